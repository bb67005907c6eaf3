"""Test doubles and model makers, kept out of the shipped core.

- `strata.testing.fake.FakeGenerator`: a deterministic stand-in for the engine that speaks
  `strata.protocol.TextGenerator` (tests, screenshots, and `--model fake` with STRATA_ALLOW_FAKE=1).
- `strata.testing.devmodel.write_random_model`: random checkpoints with numpy only, for tests and
  benchmarks.
"""
