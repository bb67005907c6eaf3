"""The copy bias: its predictor (CopyIndex) against a brute-force reference, the sampler's use of
it, and the decode loop: one-token decoding with the bias matches a Python loop over the same
rule, and drafting on gives the same output as drafting off."""
from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

E = pytest.importorskip("strata._engine")

VOCAB = 48


def brute_predict(source, ctx):
    """The token after the most recent occurrence (with a token after it) of the longest suffix
    of ctx that occurs in source; (-1, 0) when none does."""
    for n in range(len(ctx), 0, -1):
        tail = ctx[-n:]
        for end in range(len(source) - 2, n - 2, -1):
            if source[end - n + 1:end + 1] == tail:
                return source[end + 1], n
    return -1, 0


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60), st.lists(st.integers(0, 3), max_size=30))
def test_copy_index_matches_brute_force(source, ctx):
    assert E.CopyIndex(source).predict(ctx) == brute_predict(source, ctx)


def test_predictions_walk_every_prefix_once():
    rng = random.Random(5)
    source = [rng.randrange(6) for _ in range(80)]
    ctx = source[:30] + [rng.randrange(6) for _ in range(40)]
    idx = E.CopyIndex(source)
    assert idx.predictions(ctx, 10) == [idx.predict(ctx[:k])[0] for k in range(10, len(ctx) + 1)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 4), max_size=80), st.lists(st.integers(0, 4), max_size=40))
def test_the_training_machines_python_predictor_is_the_engines(source, ctx):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from copy_index import CopyIndex

    assert CopyIndex(source).predictions(ctx) == E.CopyIndex(source).predictions(ctx)
    assert CopyIndex(source).predictions(ctx, 0, {2}) == [-1 if t == 2 else t for t in E.CopyIndex(source).predictions(ctx)]


def test_copy_index_long_contexts_and_most_recent():
    rng = random.Random(4)
    block = [rng.randrange(1000) for _ in range(100)]
    # the same 100 tokens twice, followed by different tokens: the most recent occurrence wins
    source = block + [7] + block + [9]
    idx = E.CopyIndex(source)
    assert idx.predict(block) == (9, 100)
    assert idx.predict(block[:50]) == (block[50], 50)
    assert idx.predict([7] + block[:70]) == (block[70], 71)  # only the second copy follows a 7
    assert idx.predict([5, 7] + block[:70]) == (block[70], 71)
    assert idx.predict([5000]) == (-1, 0)
    assert idx.predict([]) == (-1, 0)
    assert E.CopyIndex([]).predict([1, 2]) == (-1, 0)
    assert E.CopyIndex([3]).predict([3]) == (-1, 0)  # nothing follows the only occurrence


def test_sampler_greedy_adds_the_bias_to_the_copy_token():
    x = np.array([0.0, 3.0, 1.5, 2.0], dtype=np.float32)
    assert E.Sampler().sample(x, 0, copy=2) == 1  # no bias set
    s = E.Sampler(copy_bias=1.0)
    assert s.sample(x, 0) == 1 and s.sample(x, 0, copy=-1) == 1
    assert s.sample(x, 0, copy=3) == 1  # 2 + 1 ties 3: the lower id wins, as without a bias
    assert E.Sampler(copy_bias=0.5).sample(x, 0, copy=2) == 1
    assert E.Sampler(copy_bias=2.0).sample(x, 0, copy=2) == 2
    assert E.Sampler(copy_bias=1.0).sample(np.array([3.0, 2.0], dtype=np.float32), 0, copy=1) == 0  # tie: lower id
    assert s.sample(x, 0, copy=99) == 1  # outside the vocabulary: ignored


def test_sampler_sampling_is_gumbel_max_over_boosted_logits():
    rng = np.random.default_rng(0)
    for trial in range(50):
        x = rng.normal(size=12).astype(np.float32)
        copy, bias, temp, pos = int(rng.integers(12)), float(rng.uniform(0, 3)), 0.8, trial
        s = E.Sampler(temperature=temp, seed=9, copy_bias=bias)
        b = x.copy()
        b[copy] = np.float32(x[copy] + np.float32(bias))
        scores = [float(np.float32(v * np.float32(1 / temp))) + E.gumbel_noise(9, pos, t) for t, v in enumerate(b)]
        assert s.sample(x, pos, copy=copy) == int(np.argmax(scores))


def _reference(lm, prompt, max_new, bias, history=(), skip=()):
    """One-token greedy decoding with the copy bias, in Python: the source is the session (earlier
    turns and this prompt), fixed for the generation; tokens in skip are never boosted."""
    seq = list(history) + list(prompt)
    idx = E.CopyIndex(seq)
    rows = lm.run(list(prompt))
    lm.commit(len(prompt))
    out = []
    logits = rows[-1]
    for _ in range(max_new):
        copy, _ = idx.predict(seq)
        v = logits.astype(np.float32).copy()
        if copy >= 0 and copy not in skip:
            v[copy] = np.float32(v[copy] + np.float32(bias))
        tok = int(np.argmax(v))
        out.append(tok)
        seq.append(tok)
        if len(out) < max_new:  # the last token stays pending, as in the decoder
            logits = lm.run([tok])[0]
            lm.commit(1)
    return out


def _prompt():
    rng = random.Random(11)
    code = [rng.randrange(VOCAB) for _ in range(60)]
    # the text to copy, then a cue back into its middle
    return code + code[10:14]


@pytest.mark.parametrize("bias", [0.0, 0.7, 2.0, 6.0])
def test_one_token_decoding_matches_the_python_rule(bias):
    prompt = _prompt()
    lm = E.FakeLM(VOCAB, seed=3, copy_bias=1.0)
    ref = _reference(E.FakeLM(VOCAB, seed=3, copy_bias=1.0), prompt, 80, bias)
    res = E.Decoder(lm).generate(prompt, max_new=80, drafter="none", copy_bias=bias)
    assert res["tokens"] == ref


def test_the_bias_changes_greedy_output_toward_the_source():
    prompt = _prompt()
    plain = E.Decoder(E.FakeLM(VOCAB, seed=3, copy_bias=1.0)).generate(prompt, max_new=40, drafter="none")
    biased = E.Decoder(E.FakeLM(VOCAB, seed=3, copy_bias=1.0)).generate(prompt, max_new=40, drafter="none",
                                                                      copy_bias=20.0)
    assert plain["tokens"] != biased["tokens"]
    assert biased["tokens"][:40] == prompt[14:54]  # a large bias copies the source on from the cue


@pytest.mark.parametrize("sampling", [dict(), dict(temperature=0.9, seed=5), dict(repetition_penalty=1.4)],
                         ids=["greedy", "sampled", "penalised"])
@pytest.mark.parametrize("bias", [0.5, 2.0, 8.0])
def test_drafting_never_changes_biased_output(sampling, bias):
    prompt = _prompt()
    ref = E.Decoder(E.FakeLM(VOCAB, seed=3, copy_bias=8.0)).generate(prompt, max_new=100, drafter="none",
                                                                   copy_bias=bias, **sampling)
    accepted = 0
    for drafter in ("baseline", "suffix"):
        for k in (None, 1, 3, 8, 15):
            windows = []
            res = E.Decoder(E.FakeLM(VOCAB, seed=3, copy_bias=8.0)).generate(
                prompt, max_new=100, drafter=drafter, max_draft=k, copy_bias=bias, **sampling,
                callback=lambda toks, s: windows.append(s))
            assert res["tokens"] == ref["tokens"], (drafter, k)
            accepted += sum(w["n_accept"] for w in windows)
    assert accepted > 0  # windows of several rows did run


def test_a_later_turn_copies_from_the_whole_session():
    prompt = _prompt()
    lm = E.FakeLM(VOCAB, seed=3, copy_bias=1.0)
    dec = E.Decoder(lm)
    first = dec.generate(prompt, max_new=10, drafter="suffix", copy_bias=2.0)["tokens"]
    second = dec.generate([1, 2, 3], max_new=30, drafter="suffix", copy_bias=2.0)["tokens"]
    # the reference feeds the pending root with the new prompt, as the decoder does
    ref_lm = E.FakeLM(VOCAB, seed=3, copy_bias=1.0)
    ref_first = _reference(ref_lm, prompt, 10, 2.0)
    assert ref_first == first
    history = prompt + first[:-1]
    ref_second = _reference(ref_lm, [first[-1], 1, 2, 3], 30, 2.0, history=history)
    assert second == ref_second


def test_skipped_tokens_are_never_boosted():
    prompt = _prompt()
    # the tokens the bias boosts without a skip list, then the same run skipping half of them
    seen = E.CopyIndex(prompt).predictions(prompt + _reference(E.FakeLM(VOCAB, seed=3, copy_bias=1.0), prompt, 60, 20.0))
    skip = sorted({t for t in seen if t >= 0})[::2]
    ref = _reference(E.FakeLM(VOCAB, seed=3, copy_bias=1.0), prompt, 60, 20.0, skip=skip)
    assert ref != _reference(E.FakeLM(VOCAB, seed=3, copy_bias=1.0), prompt, 60, 20.0)
    for drafter, k in (("none", None), ("suffix", None), ("suffix", 8)):
        res = E.Decoder(E.FakeLM(VOCAB, seed=3, copy_bias=1.0)).generate(
            prompt, max_new=60, drafter=drafter, max_draft=k, copy_bias=20.0, copy_skip=skip)
        assert res["tokens"] == ref, (drafter, k)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_copy_bias_is_refused(bad):
    with pytest.raises(ValueError, match="copy_bias"):
        E.Decoder(E.FakeLM(VOCAB)).generate([1, 2], max_new=2, copy_bias=bad)
