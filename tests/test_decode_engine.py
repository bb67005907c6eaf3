"""The decode loop on the real engine (a tiny random checkpoint): drafting never changes greedy or
seeded-sampled output, EOS and the context limit, and Generator snapshots of engine state."""
from __future__ import annotations

import random

import pytest

E = pytest.importorskip("strata._engine")

import strata  # noqa: E402
from strata.testing.devmodel import write_random_model  # noqa: E402
from strata.generate import Generator  # noqa: E402
from strata.protocol import GenerationSettings  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("rand") / "m"
    write_random_model(str(path), arch="qwen3_next", seed=3, preset="tiny", vocab_size=96)
    return path


def prompts():
    rng = random.Random(5)
    loop = [rng.randrange(96) for _ in range(12)]
    yield loop * 4
    yield [rng.randrange(96) for _ in range(30)]
    yield [7]


def decode(model_dir, prompt, *, document=None, **kw):
    eng = strata.load(str(model_dir), threads=1, ctx=kw.pop("ctx", None))
    dec = E.Decoder(eng)
    if document:
        dec.add_document(document)  # an oracle: the suffix drafter then knows the continuation
    windows = []
    res = dec.generate(prompt, callback=lambda t, s: windows.append(s), **kw)
    return res, windows, eng


@pytest.mark.parametrize("sampling", [dict(), dict(temperature=1.0, seed=11, top_k=20),
                                      dict(temperature=0.7, seed=4, top_p=0.8, presence_penalty=0.5)],
                         ids=["greedy", "sampled-top-k", "sampled-top-p-penalised"])
def test_drafting_never_changes_output_on_the_engine(model_dir, sampling):
    for prompt in prompts():
        ref, _, _ = decode(model_dir, prompt, max_new=48, drafter="none", **sampling)
        oracle = prompt + ref["tokens"]
        for drafter, k, doc in (("suffix", None, None), ("suffix", 4, None), ("baseline", 3, None),
                                ("suffix", None, oracle), ("suffix", 1, oracle), ("suffix", 7, oracle),
                                ("suffix", 15, oracle)):
            res, windows, eng = decode(model_dir, prompt, max_new=48, drafter=drafter, max_draft=k,
                                       document=doc, **sampling)
            assert res["tokens"] == ref["tokens"], (prompt[:5], drafter, k)
            assert eng.pos == len(prompt) + 47 and not eng.window_open
            if doc and k:
                # the oracle's drafts are right: long windows, mostly accepted (fixed lengths only:
                # the adaptive controller's choice depends on measured time)
                assert sum(w["n_accept"] for w in windows) >= 20
                assert max(w["T"] for w in windows) == k + 1


def test_eos_and_context_limit_on_the_engine(model_dir):
    prompt = next(prompts())
    ref, _, _ = decode(model_dir, prompt, max_new=40, drafter="none")
    for i in (0, 1, 7, 20):
        eos = ref["tokens"][i]
        expect = ref["tokens"][:ref["tokens"].index(eos) + 1]
        for k in (None, 15):
            res, _, eng = decode(model_dir, prompt, max_new=40, drafter="suffix", max_draft=k, stop_ids=[eos])
            assert res["tokens"] == expect and res["stop_reason"] == "eos"
    limit = len(prompt) + 10
    res, windows, eng = decode(model_dir, prompt, max_new=40, drafter="suffix", max_draft=15, ctx=limit)
    assert res["stop_reason"] == "context" and res["tokens"] == ref["tokens"][:11] and eng.pos == limit


def test_generator_snapshot_restore_on_the_engine(model_dir):
    gen = Generator.from_path(model_dir, threads=1)
    assert gen.tokenizer is None and gen.context_limit > 0
    prompt = next(prompts())
    gen.generate(prompt, GenerationSettings(max_new=9))
    blob, pos = gen.snapshot(), gen.pos
    a, _ = gen.generate([1, 2, 3], GenerationSettings(max_new=25, temperature=0.9, seed=2))
    gen.restore(blob)
    assert gen.pos == pos
    b, _ = gen.generate([1, 2, 3], GenerationSettings(max_new=25, temperature=0.9, seed=2, draft="none"))
    assert a == b
    # one long generation equals the two turns
    whole = Generator.from_path(model_dir, threads=1)
    first, _ = whole.generate(prompt, GenerationSettings(max_new=9, draft="none"))
    c, _ = Generator.from_path(model_dir, threads=1).generate(
        prompt + first + [1, 2, 3], GenerationSettings(max_new=25, temperature=0.9, seed=2))
    assert c == a
