"""bench/benchlib.py and window_cost's bytes floor (the benches' own logic, not their timings)."""
from __future__ import annotations

import os
import sys
import time

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.insert(0, BENCH)

import benchlib  # noqa: E402


def test_random_stream_is_fixed_and_in_range():
    a = benchlib.random_stream(1000, 300)
    assert a == benchlib.random_stream(1000, 300)
    assert len(a) == 300 and min(a) >= 0 and max(a) < 1000
    assert len(set(a)) > 200  # not a repeating greedy loop


def test_time_forced_feeds_every_token_in_order():
    seen = []
    tps = benchlib.time_forced(lambda t: (seen.append(t), [0.0, 1.0])[1], [5, 3, 9])
    assert seen == [5, 3, 9] and tps > 0


def test_time_greedy_follows_the_argmax():
    out_tps, toks = benchlib.time_greedy(lambda t: [0.0] * ((t + 1) % 4) + [1.0] + [0.0] * 4, [0, 1, 0], 4)
    assert toks == [1, 2, 3, 0, 1] and out_tps > 0


def _cpu_s_of(pid: int) -> float | None:
    """utime + stime of a running process from /proc (None where there is no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_busy_process_runs_and_is_reaped():
    c0 = benchlib.children_cpu_s()
    with benchlib.busy_process() as procs:
        # wait for the busy loop's CPU time itself, not a fixed sleep: on a loaded machine the
        # child may get a fraction of a core
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            used = _cpu_s_of(procs[0].pid)
            if used is None:
                time.sleep(0.3)
                break
            if used > 0.15:
                break
            time.sleep(0.05)
        assert all(p.poll() is None for p in procs)
    assert all(p.returncode is not None for p in procs)
    assert benchlib.children_cpu_s() - c0 > 0.1  # its CPU time is ours, not "other processes"


def test_quiet_measure_marks_busy_and_retries(monkeypatch):
    class Args:
        wait_quiet, quiet_cores, max_others, retry_busy = 0, 0.3, 0.25, 2

    class Meter:
        cores = 0.9

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(benchlib, "OthersMeter", Meter)
    calls = []
    res, others, busy = benchlib.quiet_measure(lambda: calls.append(1) or 7, Args, "x")
    assert (res, others, busy, len(calls)) == (7, 0.9, True, 3)


def test_window_bytes_floor(tmp_path):
    from strata.testing.devmodel import write_random_model

    import window_cost

    path = write_random_model(str(tmp_path / "m"), "qwen3_moe", seed=0, preset="tiny")
    strata = benchlib.import_strata()
    cfg = strata.load(path, threads=1).config
    bytes_of = window_cost.weight_bytes_model(path, cfg)
    L, H, I = cfg["num_layers"], cfg["hidden_size"], cfg["moe_intermediate_size"]
    per_expert = 3 * H * I * 4  # gate, up, down in f32
    one = bytes_of({"union_per_layer": [2] * L}, 1)
    three = bytes_of({"union_per_layer": [5] * L}, 3)
    assert three - one == pytest.approx(L * 3 * per_expert + 2 * H * 4)  # 3 more experts per layer, 2 embed rows
    assert bytes_of({"weight_bytes": 1234, "union_per_layer": [2] * L}, 1) == 1234  # the engine's figure wins
    assert bytes_of({}, 1) is None


def test_window_products_per_row(tmp_path):
    """The arithmetic floor's multiply-adds a row, counted by hand from the config: attention
    projections, router, top_k experts per layer and the LM head; the embedding is a gather."""
    from strata.testing.devmodel import write_random_model

    import window_cost

    path = write_random_model(str(tmp_path / "m"), "qwen3_moe", seed=0, preset="tiny")
    strata = benchlib.import_strata()
    cfg = strata.load(path, threads=1).config
    H, I, L, V = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["num_layers"], cfg["vocab_size"]
    q, kv = cfg["num_heads"] * cfg["head_dim"], cfg["num_kv_heads"] * cfg["head_dim"]
    attention = H * q + 2 * H * kv + q * H
    per_layer = attention + H * cfg["num_experts"] + cfg["top_k"] * 3 * H * I
    assert window_cost.macs_per_row(path, cfg) == L * per_layer + V * H
    assert window_cost.macs_per_row(str(tmp_path / "nothing"), cfg) is None


def test_window_rounds_pairs_ratios_within_a_round():
    """A load that doubles every cost in one round leaves the paired ratio alone; round 0 is
    not timed; restore comes before every window, accept after, and the floor is per window."""
    log, now = [], [0.0]
    slow_round = {2}  # rounds counted from 0 (the warm-up)
    rnd = [-1]

    def restore():
        log.append("restore")

    def window(tokens):
        if len(tokens) == 1:
            rnd[0] += 1
        log.append(len(tokens))
        now[0] += (1.0 + 0.25 * (len(tokens) - 1)) * (2.0 if rnd[0] in slow_round else 1.0)

    out = benchlib.window_rounds(restore, window, lambda T: log.append(("accept", T)), list(range(16)), 3,
                                 clock=lambda: now[0], window_bytes=lambda T: 100.0 + 10.0 * T)
    assert log[:3] == ["restore", 1, ("accept", 1)]
    assert log.count("restore") == 4 * len(benchlib.WINDOW_TS)
    for T in benchlib.WINDOW_TS:
        want = 1.0 + 0.25 * (T - 1)
        assert out["ratio"][T] == pytest.approx(want) and out["ratio_min"][T] == pytest.approx(want)
        assert out["ratio_max"][T] == pytest.approx(want)
        assert sorted(out["cost_ms_all"][T]) == pytest.approx([want * 1e3, want * 1e3, 2 * want * 1e3])
        assert out["excess"][T] == pytest.approx(want / ((100 + 10 * T) / 110) - 1)


def test_window_tokens_are_shared_and_fixed():
    p, w = benchlib.window_tokens(1000)
    assert (p, w) == benchlib.window_tokens(1000)
    assert len(p) == benchlib.WINDOW_PREFIX and len(w) == max(benchlib.WINDOW_TS)
    assert p[:16] != w
