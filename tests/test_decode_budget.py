"""Drafting never much slower where drafts fail: the controller's loss budget, and the decode loop
on a model that never continues the way the history did (every draft is rejected), whose output
must still equal drafting off."""
from __future__ import annotations

import random

import pytest

E = pytest.importorskip("strata._engine")

# the budget's constants (engine_ext/decode.cpp): what a generation may lose, in T=1 windows
BUDGET_START = 2.0
BUDGET_SHARE = 0.01


def measured(costs: dict[int, float], samples: int = 20) -> "E.LengthController":
    c = E.LengthController()
    for T, us in costs.items():
        for _ in range(samples):
            c.observe_cost(T, us)
    return c


def simulate(c, windows: int, cost_of, accept, match_len: int = 30) -> tuple[float, float]:
    """Drive the controller through `windows` windows; accept(i, d) -> drafts kept. Returns the
    time drafting took and the time one-row windows would have taken for the same tokens."""
    c.begin_generation()
    spent = serial = 0.0
    for i in range(windows):
        d = c.choose(match_len, 15)
        a = accept(i, d) if d else 0
        if d:
            c.observe_drafts(match_len, min(d, a + 1), a)
        T, keep = d + 1, a + 1
        c.observe_window(T, keep)
        spent += cost_of(T)
        serial += keep * cost_of(1)
    return spent, serial


def test_drafts_that_always_fail_lose_at_most_the_budget():
    # cheap rows and optimistic acceptance: the rule alone would draft long every window
    costs = {T: 1000.0 + 100.0 * (T - 1) for T in range(1, 17)}
    c = measured(costs)
    for _ in range(50):
        c.observe_drafts(30, 15, 15)  # it learned that long matches are copies...
    spent, serial = simulate(c, 1000, costs.__getitem__, lambda i, d: 0)  # ...and now nothing is
    loss = spent - serial
    assert loss > 0  # it did try
    assert loss <= (BUDGET_START + BUDGET_SHARE * 1000 * 1.6) * costs[1]


def test_expensive_rows_and_failing_drafts_cost_almost_nothing():
    # a small model whose row costs nearly a whole window (strata-tiny-like), drafts that never hit
    costs = {T: 1000.0 * (0.2 + 0.8 * T) for T in range(1, 17)}
    c = measured({1: costs[1], 2: costs[2]}, samples=8)
    spent, serial = simulate(c, 2000, costs.__getitem__, lambda i, d: 0, match_len=5)
    assert spent / serial <= 1.0 + BUDGET_SHARE + BUDGET_START / 2000


def test_drafts_that_pay_keep_drafting():
    costs = {T: 1000.0 + 150.0 * (T - 1) for T in range(1, 17)}
    c = measured(costs)
    spent, serial = simulate(c, 500, costs.__getitem__, lambda i, d: d)  # every draft accepted
    assert serial / spent > 3.0
    assert c.budget_us > BUDGET_START * costs[1]  # it earned slack


def test_a_streak_of_failures_after_good_windows_is_bounded_too():
    costs = {T: 1000.0 + 100.0 * (T - 1) for T in range(1, 17)}
    c = measured(costs)
    # good first half, then every draft fails (an edit point, a change of subject)
    spent, serial = simulate(c, 600, costs.__getitem__, lambda i, d: d if i < 300 else 0)
    assert spent < serial
    before = c.budget_us
    spent2, serial2 = simulate(c, 300, costs.__getitem__, lambda i, d: 0)  # a new generation
    assert spent2 - serial2 <= (BUDGET_START + BUDGET_SHARE * 300 * 2.5) * costs[1]
    assert before >= 0


def test_one_slow_window_does_not_price_a_length_out_for_good():
    c = measured({1: 1000.0, 2: 1200.0}, samples=10)
    c.observe_cost(4, 9000.0)  # a busy machine stalled the only T=4 window measured so far
    assert c.cost(4) < 2000.0


def test_no_draft_before_single_row_windows_are_measured():
    c = E.LengthController()
    for _ in range(20):
        c.observe_drafts(30, 15, 15)
    assert c.choose(30, 15) == 0 and c.draft_cap(15) == 0
    c.observe_cost(1, 1000.0)
    c.observe_cost(1, 1000.0)
    assert c.choose(30, 15) > 0


# ---------------------------------------------------------------- the decode loop

VOCAB = 48


def anti_copy_model(vocab=VOCAB, **kw):
    # a negative copy bias: the model never continues a context the way it went before, so every
    # suffix draft is rejected, while a small vocabulary keeps the drafter finding matches
    return E.FakeLM(vocab, seed=5, copy_bias=-30.0, **kw)


def repetitive_prompt(vocab=VOCAB):
    rng = random.Random(3)
    block = [rng.randrange(vocab) for _ in range(40)]
    return block * 4


@pytest.mark.parametrize("row_share", [0.1, 0.8], ids=["cheap-rows", "costly-rows"])
def test_rejected_drafts_waste_little_and_never_change_the_output(row_share):
    small = 8  # every short context recurs: the drafter proposes at almost every window
    prompt = repetitive_prompt(small)
    n = 400
    # the fake model spins base + row * T microseconds per window: cheap rows tempt the controller
    # to draft (and every draft fails), costly ones are a small model's (a row ~ 80 % of a window)
    window_us = 600.0
    kw = dict(cost_us_base=window_us * (1 - row_share), cost_us_per_row=window_us * row_share)
    off_lm = anti_copy_model(small, **kw)
    off = E.Decoder(off_lm).generate(prompt, max_new=n, drafter="none", min_match=2)
    on_lm = anti_copy_model(small, **kw)
    windows = []
    on = E.Decoder(on_lm).generate(prompt, max_new=n, drafter="suffix", min_match=2,
                                   callback=lambda t, st: windows.append(st))
    assert on["tokens"] == off["tokens"]
    drafted = [st for st in windows[1:] if st["n_drafted"]]
    assert sum(st["n_accept"] for st in drafted) <= len(drafted) // 4  # (a chance hit here and there)
    if row_share < 0.5:
        assert drafted, "nothing was drafted: the test would not test the budget"
    wasted = on_lm.rows - off_lm.rows  # draft rows that were run and thrown away
    # the budget: 2 windows to start and 1 % of the windows' cost after that (twice that, for the
    # timing noise of a busy machine: the controller measures its costs)
    assert wasted * row_share <= 2 * (BUDGET_START + BUDGET_SHARE * n * (1 + row_share)) + 1


def test_forced_rejection_leaves_the_same_output_at_every_budget_state():
    # copies early (drafts accepted, the budget grows), then anti-copy turns (every draft fails)
    prompt = repetitive_prompt()
    ref_dec = E.Decoder(E.FakeLM(VOCAB, seed=5, copy_bias=14.0))
    dec = E.Decoder(E.FakeLM(VOCAB, seed=5, copy_bias=14.0))
    for turn in range(3):
        extra = [turn + 1, turn + 2, turn + 3]
        a = ref_dec.generate(prompt if turn == 0 else extra, max_new=150, drafter="none")
        b = dec.generate(prompt if turn == 0 else extra, max_new=150, drafter="suffix")
        assert a["tokens"] == b["tokens"]
