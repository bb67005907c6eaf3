"""Cache-aware routing (MoCE) against a NumPy reference: protect/bonus math, draft overrides,
and the hard budget (never an ineligible expert; fallback with weight 0)."""
from __future__ import annotations

import numpy as np
import pytest

_engine = pytest.importorskip("strata._engine")


def softmax(l):
    l = l.astype(np.float32)
    e = np.exp(l - l.max())
    return (e / e.sum()).astype(np.float32)


def pick(score, taken, allowed=None):
    best = -1
    for e in range(len(score)):  # ties: lower id first, like the engine
        if taken[e] or (allowed is not None and not allowed[e]):
            continue
        if best < 0 or score[e] > score[best]:
            best = e
    return best


def ref_cache_aware(l, k, renorm, protect, bonus, ready):
    p = softmax(l)
    taken = np.zeros(len(p), bool)
    idx = []
    for _ in range(min(protect, k)):
        idx.append(pick(p, taken))
        taken[idx[-1]] = True
    score = p * np.where(ready, np.float32(np.exp(np.float32(bonus))), np.float32(1))
    while len(idx) < k:
        idx.append(pick(score, taken))
        taken[idx[-1]] = True
    w = p[idx]
    return idx, (w / w.sum() if renorm else w)


def ref_budget(l, k, renorm, eligible):
    p = softmax(l)
    taken = np.zeros(len(p), bool)
    idx = []
    while len(idx) < k:
        e = pick(p, taken, eligible)
        if e < 0:
            break
        idx.append(e)
        taken[e] = True
    w = p[idx]
    w = w / w.sum() if renorm else w
    n = len(idx)
    return idx + [idx[-1]] * (k - n), list(w) + [0.0] * (k - n)


def test_all_off_is_exact_topk():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((5, 64)).astype(np.float32)
    i0, w0 = _engine.route_window(logits, 8)
    for t in range(5):
        p = softmax(logits[t])
        assert list(i0[t]) == list(np.argsort(-p, kind="stable")[:8])
    # cache-aware with no bonus, or everything protected, changes nothing
    ready = (rng.random(64) < 0.5).astype(np.uint8)
    for kw in (dict(cache_aware=True, protect=0, bonus=0.0), dict(cache_aware=True, protect=8, bonus=3.0)):
        i1, w1 = _engine.route_window(logits, 8, ready=ready, **kw)
        assert np.array_equal(i0, i1) and np.array_equal(w0, w1)


@pytest.mark.parametrize("seed", range(6))
def test_protect_and_bonus_match_reference(seed):
    rng = np.random.default_rng(seed)
    E, k, rows = 48, 6, 4
    logits = (rng.standard_normal((rows, E)) * 2).astype(np.float32)
    ready = (rng.random(E) < 0.3).astype(np.uint8)
    protect, bonus = int(rng.integers(0, k + 1)), float(rng.uniform(0.2, 3.0))
    dprot, dbonus = int(rng.integers(0, k)), float(rng.uniform(0.0, 4.0))
    renorm = bool(seed % 2)
    idx, w = _engine.route_window(logits, k, renorm, ready, cache_aware=True, protect=protect, bonus=bonus,
                                  draft_protect=dprot, draft_bonus=dbonus)
    for t in range(rows):
        pr, bo = (protect, bonus) if t == 0 else (dprot, dbonus)
        ri, rw = ref_cache_aware(logits[t], k, renorm, pr, bo, ready.astype(bool))
        assert list(idx[t]) == ri, t
        np.testing.assert_allclose(w[t], rw, rtol=2e-6)
        # the protected experts are the natural top-j, whatever is resident
        nat = list(np.argsort(-softmax(logits[t]), kind="stable")[:pr])
        assert list(idx[t][:pr]) == nat
    # a big bonus pulls ready experts in: more of the chosen experts are resident
    i_big, _ = _engine.route_window(logits, k, renorm, ready, cache_aware=True, protect=0, bonus=20.0)
    i_none, _ = _engine.route_window(logits, k, renorm, ready)
    assert ready[i_big].sum() >= ready[i_none].sum()
    assert ready[i_big[0]].sum() == min(k, int(ready.sum()))


@pytest.mark.parametrize("seed", range(6))
def test_hard_budget_never_selects_an_ineligible_expert(seed):
    rng = np.random.default_rng(100 + seed)
    E, k, rows = 64, 8, 6
    logits = (rng.standard_normal((rows, E)) * 2).astype(np.float32)
    ready = (rng.random(E) < rng.uniform(0.0, 0.3)).astype(np.uint8)
    anchors = int(rng.integers(0, k + 1)) if seed % 2 else -1
    idx, w = _engine.route_window(logits, k, True, ready, hard_budget=True, budget_anchors=anchors)
    root = list(np.argsort(-softmax(logits[0]), kind="stable")[:k])
    assert list(idx[0]) == root  # the root row itself is routed exactly
    eligible = ready.astype(bool).copy()
    eligible[root[: (k if anchors < 0 else anchors)]] = True
    for t in range(1, rows):
        assert all(eligible[e] for e in idx[t]), (t, idx[t])
        ri, rw = ref_budget(logits[t], k, True, eligible)
        assert list(idx[t]) == ri
        np.testing.assert_allclose(w[t], rw, rtol=2e-6, atol=0)
        assert abs(float(w[t].sum()) - 1.0) < 1e-5


def test_hard_budget_fallback_with_few_eligible():
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((3, 32)).astype(np.float32)
    ready = np.zeros(32, np.uint8)
    ready[[3, 9]] = 1
    idx, w = _engine.route_window(logits, 6, True, ready, hard_budget=True, budget_anchors=1)
    root0 = int(np.argmax(softmax(logits[0])))
    for t in (1, 2):
        chosen = set(idx[t])
        assert chosen <= {root0, 3, 9}
        assert len(chosen) == len({root0, 3, 9})
        assert (w[t][3:] == 0).all() and abs(w[t][:3].sum() - 1) < 1e-6
