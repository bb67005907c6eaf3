"""The decode loop on the fake model: drafting never changes the output (greedy or seeded
sampling, every max-draft, EOS anywhere, max-new and context boundaries), and every stop
leaves a committed, consistent state."""
from __future__ import annotations

import random

import pytest

E = pytest.importorskip("strata._engine")
from strata.errors import WindowError  # noqa: E402

VOCAB = 48


def model(**kw):
    kw.setdefault("copy_bias", 14.0)
    return E.FakeLM(VOCAB, seed=kw.pop("seed", 3), **kw)


def prompts():
    rng = random.Random(11)
    code = [rng.randrange(VOCAB) for _ in range(60)]
    yield "repetitive", code + code[:12]
    yield "random", [rng.randrange(VOCAB) for _ in range(40)]
    yield "short", [5]
    prose = [rng.randrange(VOCAB) for _ in range(25)]
    yield "prose", prose + [rng.randrange(VOCAB) for _ in range(25)] + prose[:3]


def run(prompt, *, lm=None, **kw):
    lm = lm or model()
    dec = E.Decoder(lm)
    windows = []
    res = dec.generate(prompt, callback=lambda toks, st: windows.append((list(toks), st)), **kw)
    return res, windows, dec, lm


def check_windows(res, windows):
    """Events concatenate to the result; each window's fields are consistent."""
    assert [t for toks, _ in windows for t in toks] == res["tokens"]
    for toks, st in windows[1:]:
        assert st["T"] == st["n_drafted"] + 1
        assert st["keep"] == st["n_accept"] + 1 == st["emitted"] == len(toks)
        assert 0 <= st["n_accept"] <= st["n_drafted"]
    assert windows[0][1]["T"] == 0 and windows[0][1]["emitted"] == 1


SAMPLING = [dict(), dict(temperature=0.9, seed=5), dict(temperature=1.3, top_k=8, top_p=0.9, seed=77,
                                                      repetition_penalty=1.3, presence_penalty=1.5,
                                                      frequency_penalty=0.7),
            dict(repetition_penalty=1.5, frequency_penalty=1.0)]


@pytest.mark.parametrize("sampling", SAMPLING, ids=["greedy", "sampled", "sampled-masked-penalised", "greedy-penalised"])
def test_drafting_never_changes_output(sampling):
    for name, prompt in prompts():
        ref, ref_windows, _, ref_lm = run(prompt, max_new=120, drafter="none", **sampling)
        assert len(ref["tokens"]) == 120 and ref_lm.runs == 120  # one row per window + prefill
        check_windows(ref, ref_windows)
        drafted_any = 0
        for drafter in ("baseline", "suffix"):
            for k in [None, *range(1, 16)]:
                res, windows, dec, lm = run(prompt, max_new=120, drafter=drafter, max_draft=k, **sampling)
                assert res["tokens"] == ref["tokens"], (name, drafter, k)
                check_windows(res, windows)
                assert lm.committed == prompt + res["tokens"][:-1]
                assert dec.history == prompt + res["tokens"] and dec.pending == res["tokens"][-1:]
                assert all(st["T"] <= (k or 15) + 1 for _, st in windows)
                drafted_any += sum(st["n_accept"] for _, st in windows)
        if name == "repetitive":
            assert drafted_any > 0


def test_drafts_of_up_to_fifteen_are_used_on_copies():
    rng = random.Random(2)
    text = [rng.randrange(VOCAB) for _ in range(200)]
    res, windows, _, lm = run(text + text[:20], lm=model(copy_bias=30.0), max_new=150, drafter="suffix", max_draft=15)
    assert res["tokens"][:100] == text[20:120]
    assert max(st["T"] for _, st in windows) == 16
    assert lm.runs < 30


@pytest.mark.parametrize("sampling", SAMPLING[:2], ids=["greedy", "sampled"])
def test_eos_at_every_position(sampling):
    _, prompt = next(prompts())
    ref, *_ = run(prompt, max_new=60, drafter="none", **sampling)
    for i, tok in enumerate(ref["tokens"]):
        expect = ref["tokens"][:ref["tokens"].index(tok) + 1]
        for drafter, k in (("none", None), ("suffix", None), ("suffix", 3), ("baseline", 16 - 1), ("suffix", 15)):
            res, windows, dec, lm = run(prompt, max_new=60, drafter=drafter, max_draft=k, stop_ids=[tok], **sampling)
            assert res["tokens"] == expect and res["stop_reason"] == "eos", (i, drafter, k)
            check_windows(res, windows)
            assert lm.committed == prompt + expect[:-1] and not lm.window_open


def test_max_new_boundaries():
    _, prompt = next(prompts())
    ref, *_ = run(prompt, max_new=80, drafter="none")
    for n in range(0, 40):
        for k in (None, 1, 4, 15):
            res, windows, dec, lm = run(prompt, max_new=n, drafter="suffix", max_draft=k)
            assert res["tokens"] == ref["tokens"][:n]
            assert res["stop_reason"] == "max_new"
            assert lm.pos == len(prompt) + max(n - 1, 0)


def test_context_limit_caps_windows_and_stops():
    _, prompt = next(prompts())
    ref, *_ = run(prompt, max_new=80, drafter="none")
    for limit in range(len(prompt), len(prompt) + 30):
        for k in (None, 2, 15):
            res, windows, dec, lm = run(prompt, lm=model(context_limit=limit), max_new=80, drafter="suffix", max_draft=k)
            # the context holds `limit` tokens; the last emitted token is not fed, so limit - len + 1 come out
            n = limit - len(prompt) + 1
            assert res["tokens"] == ref["tokens"][:n], limit
            assert res["stop_reason"] == "context"
            assert lm.pos == limit
    with pytest.raises(WindowError, match="does not fit"):
        run(prompt, lm=model(context_limit=len(prompt) - 1), max_new=5)


def test_callback_stop_leaves_committed_state_and_next_turn_continues():
    _, prompt = next(prompts())
    ref, *_ = run(prompt, max_new=100, drafter="none")
    lm = model()
    dec = E.Decoder(lm)
    seen = []

    def cb(toks, st):
        seen.extend(toks)
        return len(seen) < 30

    res = dec.generate(prompt, max_new=100, drafter="suffix", callback=cb)
    assert res["stop_reason"] == "stopped" and not lm.window_open
    n = len(res["tokens"])
    assert 30 <= n < 100 and res["tokens"] == ref["tokens"][:n]
    # the next call feeds the pending root and continues exactly like one long generation
    more = dec.generate([], max_new=100 - n, drafter="suffix")
    assert res["tokens"] + more["tokens"] == ref["tokens"]


def test_two_turns_equal_one_prompt():
    _, prompt = next(prompts())
    dec = E.Decoder(model())
    first = dec.generate(prompt, max_new=20)
    second = dec.generate([1, 2, 3], max_new=30)
    dec2 = E.Decoder(model())
    whole = dec2.generate(prompt + first["tokens"] + [1, 2, 3], max_new=30, drafter="none")
    assert second["tokens"] == whole["tokens"]


def test_callback_exception_propagates_with_state_committed():
    _, prompt = next(prompts())
    lm = model()
    dec = E.Decoder(lm)

    def boom(toks, st):
        if st["T"] > 0:
            raise KeyError("stop here")

    with pytest.raises(KeyError):
        dec.generate(prompt, max_new=50, callback=boom)
    assert not lm.window_open and lm.pos + 1 == len(dec.history)
    dec.generate([], max_new=5)  # still usable


def test_window_rules_of_the_fake_model():
    lm = model(context_limit=10)
    with pytest.raises(WindowError, match="without a run"):
        lm.commit(1)
    lm.run([1, 2])
    with pytest.raises(WindowError, match="uncommitted"):
        lm.run([3])
    with pytest.raises(WindowError, match="out of range"):
        lm.commit(3)
    lm.commit(2)
    with pytest.raises(WindowError, match="without a run"):
        lm.commit(1)
    with pytest.raises(WindowError, match="context limit"):
        lm.run(list(range(9)))
    assert lm.pos == 2


def test_row_logits_do_not_depend_on_the_window():
    lm = model()
    lm.run([1, 2, 3, 4, 5, 6, 7])
    lm.commit(3)
    a = lm.run([4, 5, 6, 7])
    lm.commit(1)
    b = lm.run([5])
    assert (a[1] == b[0]).all()


def test_out_of_sync_and_bad_input_are_refused():
    lm = model()
    dec = E.Decoder(lm)
    with pytest.raises(ValueError, match="empty"):
        dec.generate([], max_new=3)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        dec.generate([VOCAB + 1], max_new=3)
    lm.run([1])
    lm.commit(1)
    with pytest.raises(WindowError, match="out of sync"):
        dec.generate([2], max_new=3)
    dec.reset()
    assert dec.generate([2], max_new=3)["tokens"]


def test_set_state_restores_a_session():
    _, prompt = next(prompts())
    lm = model()
    dec = E.Decoder(lm)
    dec.generate(prompt, max_new=10)
    blob, hist, pend = lm.save_state(), dec.history, dec.pending
    after = dec.generate([7, 8], max_new=15)["tokens"]
    lm2 = model()
    lm2.load_state(blob)
    dec2 = E.Decoder(lm2)
    dec2.set_state(hist, pend)
    assert dec2.generate([7, 8], max_new=15)["tokens"] == after
    with pytest.raises(WindowError, match="committed tokens"):
        dec2.set_state(hist[:-3], [])


def test_adaptive_controller_measures_costs_and_acceptance():
    rng = random.Random(4)
    text = [rng.randrange(VOCAB) for _ in range(150)]
    dec = E.Decoder(model(copy_bias=30.0))
    dec.generate(text + text[:10], max_new=130)
    state = dec.controller_state()
    assert sum(state["cost_samples"][1:]) > 0  # windows with drafts were measured
    long_bucket = state["acceptance"][6]
    assert long_bucket[0] > 0.8  # long matches of an exact copy are accepted


def feed_acceptance(c, match_len, rate, windows=400, drafts=15):
    """Windows whose drafts are each accepted with probability `rate` (deterministic sequence)."""
    rng = random.Random(1)
    for _ in range(windows):
        accepted = 0
        while accepted < drafts and rng.random() < rate:
            accepted += 1
        c.observe_drafts(match_len, min(drafts, accepted + 1), accepted)


def test_controller_expected_keep_matches_the_design():
    c = E.LengthController()
    feed_acceptance(c, 30, 0.7, windows=4000)
    assert c.acceptance(E.LengthController.bucket(30), 0) == pytest.approx(0.7, abs=0.05)
    # the length controller rule: a = 0.7 gives E[keep] = 2.533 for T = 4 and 2.19 for T = 3
    assert c.expected_keep(30, 3) == pytest.approx(2.533, abs=0.12)
    assert c.expected_keep(30, 2) == pytest.approx(2.19, abs=0.08)


def test_controller_drafts_long_when_rows_are_cheap_and_accepted():
    c = E.LengthController()
    for T in range(1, 17):
        for _ in range(20):
            c.observe_cost(T, 1000.0 + 60.0 * (T - 1))
    feed_acceptance(c, 40, 0.95)
    assert c.choose(40, 15) >= 10
    assert c.choose(40, 3) == 3  # never more than the drafter has


def test_controller_does_not_draft_when_rows_cost_a_full_window():
    c = E.LengthController()
    for T in range(1, 17):
        for _ in range(20):
            c.observe_cost(T, 1000.0 * T)
    feed_acceptance(c, 5, 0.5)
    choices = [c.choose(5, 15) for _ in range(64)]
    assert choices.count(0) >= 62  # at most the occasional one-token exploration


def test_controller_picks_the_cheap_middle_of_a_lumpy_cost_curve():
    # MoE windows: T = 2 costs about what T = 1 does, every further row costs a lot
    c = E.LengthController()
    costs = {1: 1000.0, 2: 1050.0, **{T: 1000.0 + 900.0 * (T - 1) for T in range(3, 17)}}
    for T, us in costs.items():
        for _ in range(20):
            c.observe_cost(T, us)
    feed_acceptance(c, 10, 0.9)
    assert c.choose(10, 15) == 1
    assert c.cost(2) == pytest.approx(1050.0, rel=0.05)


def test_controller_costs_are_robust_to_spikes():
    c = E.LengthController()
    for i in range(31):
        c.observe_cost(1, 50000.0 if i % 5 == 0 else 1000.0)
    assert c.cost(1) < 1100.0


def test_ctrl_c_between_windows_leaves_a_committed_state():
    import os
    import signal
    import threading

    lm = model(cost_us_base=3000.0)  # 3 ms windows: the signal lands mid-generation
    dec = E.Decoder(lm)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            dec.generate(list(range(20)), max_new=1000, drafter="suffix")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not lm.window_open and lm.pos + 1 == len(dec.history)
    assert 20 < len(dec.history) < 20 + 1000
    dec.generate([], max_new=3)  # continues from there


def test_a_prompt_that_does_not_fit_changes_nothing():
    lm = model(context_limit=700)
    dec = E.Decoder(lm)
    first = dec.generate(list(range(40)) * 3, max_new=5)["tokens"]
    before = (lm.pos, dec.history, dec.pending)
    with pytest.raises(WindowError, match="does not fit"):
        dec.generate([i % VOCAB for i in range(1200)], max_new=5)
    assert (lm.pos, dec.history, dec.pending) == before
    assert dec.pending == first[-1:]
