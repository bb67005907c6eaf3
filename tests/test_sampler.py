"""Seeded Gumbel-max sampling: the right distribution, deterministic per (seed, position), and
the same whatever window the row came from."""
from __future__ import annotations

import math

import numpy as np
import pytest

E = pytest.importorskip("strata._engine")

# chi-square critical values at p = 1e-4 (deterministic test: the seed is fixed)
CHI2_CRIT = {2: 18.42, 3: 21.11, 5: 25.74, 7: 29.88}


def softmax(x):
    z = np.exp(x - x.max())
    return z / z.sum()


def chi_square(counts, probs, n):
    expected = probs * n
    mask = expected > 0
    assert counts[~mask].sum() == 0, "sampled a token outside the support"
    return float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum()), int(mask.sum()) - 1


def sample_many(sampler, logits, n, start=0):
    counts = np.zeros(len(logits), dtype=np.int64)
    for pos in range(start, start + n):
        counts[sampler.sample(logits, pos)] += 1
    return counts


LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0, 1.5, -0.3, 0.9], dtype=np.float32)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 1.7])
def test_gumbel_matches_softmax(temperature):
    s = E.Sampler(temperature=temperature, seed=1234)
    n = 20000
    counts = sample_many(s, LOGITS, n)
    stat, df = chi_square(counts, softmax(LOGITS.astype(np.float64) / temperature), n)
    assert stat < CHI2_CRIT[df], (stat, counts)


def test_top_k_renormalises_over_the_k_best():
    s = E.Sampler(temperature=1.0, top_k=3, seed=7)
    n = 15000
    counts = sample_many(s, LOGITS, n)
    probs = np.zeros(len(LOGITS))
    top = np.argsort(-LOGITS)[:3]
    probs[top] = softmax(LOGITS[top].astype(np.float64))
    stat, df = chi_square(counts, probs, n)
    assert stat < CHI2_CRIT[df], (stat, counts)


def test_top_p_keeps_the_nucleus():
    s = E.Sampler(temperature=1.0, top_p=0.6, seed=99)
    p = softmax(LOGITS.astype(np.float64))
    order = np.argsort(-p)
    cum = np.cumsum(p[order])
    k = int(np.searchsorted(cum, 0.6) + 1)
    probs = np.zeros(len(LOGITS))
    probs[order[:k]] = p[order[:k]] / p[order[:k]].sum()
    n = 15000
    counts = sample_many(s, LOGITS, n)
    stat, df = chi_square(counts, probs, n)
    assert stat < CHI2_CRIT[df], (stat, counts, k)


def test_top_p_on_a_large_vocabulary():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=5000).astype(np.float32) * 3
    s = E.Sampler(temperature=1.0, top_p=0.9, seed=5)
    p = softmax(logits.astype(np.float64))
    order = np.argsort(-p, kind="stable")
    k = int(np.searchsorted(np.cumsum(p[order]), 0.9) + 1)
    allowed = set(order[:k].tolist())
    seen = {s.sample(logits, pos) for pos in range(3000)}
    assert seen <= allowed and len(seen) > 1


def test_greedy_is_argmax_lowest_id_on_ties():
    s = E.Sampler()
    assert s.sample(LOGITS, 0) == 0
    assert s.sample(np.array([1.0, 3.0, 3.0], dtype=np.float32), 5) == 1


def test_same_seed_and_position_same_token_different_seed_differs():
    a, b = E.Sampler(temperature=1.0, seed=1), E.Sampler(temperature=1.0, seed=1)
    c = E.Sampler(temperature=1.0, seed=2)
    xs = [a.sample(LOGITS, pos) for pos in range(200)]
    assert xs == [b.sample(LOGITS, pos) for pos in range(200)]
    assert xs != [c.sample(LOGITS, pos) for pos in range(200)]
    # independent of call order: position, not a running stream, keys the noise
    assert [b.sample(LOGITS, pos) for pos in reversed(range(200))] == xs[::-1]


def test_counter_uniform_is_open_interval_and_flat():
    u = np.array([E.counter_uniform(3, pos, tok) for pos in range(100) for tok in range(100)])
    assert u.min() > 0 and u.max() < 1
    hist, _ = np.histogram(u, bins=10, range=(0, 1))
    stat = float(((hist - 1000) ** 2 / 1000).sum())
    assert stat < 33.7  # df 9, p = 1e-4
    assert E.gumbel_noise(3, 7, 11) == pytest.approx(-math.log(-math.log(E.counter_uniform(3, 7, 11))))


def test_penalties_use_accepted_and_pending_history():
    logits = np.array([1.0, 2.0, -1.0, 0.5], dtype=np.float32)
    s = E.Sampler(repetition_penalty=2.0)
    s.accept(1)
    # token 1: 2.0 / 2 = 1.0, a tie with token 0 -> lowest id wins
    assert s.sample(logits, 0) == 0
    s2 = E.Sampler(presence_penalty=0.4, frequency_penalty=0.3)
    s2.accept(1)
    # token 1: 2.0 - 0.4 - 0.3 * 3 = 0.7 with two pending copies -> 0 wins
    assert s2.sample(logits, 0, [1, 1]) == 0
    assert s2.sample(logits, 0, []) == 1  # 2.0 - 0.7 = 1.3
    # a negative logit is multiplied by the repetition penalty
    s3 = E.Sampler(repetition_penalty=3.0)
    s3.accept(2)
    assert s3.sample(np.array([-2.5, -10.0, -1.0], dtype=np.float32), 0) == 0


def test_penalised_sampling_matches_penalised_softmax():
    s = E.Sampler(temperature=1.0, presence_penalty=0.5, frequency_penalty=0.25, repetition_penalty=1.3, seed=3)
    for t in (0, 0, 5, 2):
        s.accept(t)
    pending = [5, 7]
    x = LOGITS.astype(np.float64).copy()
    counts = {0: 2, 5: 2, 2: 1, 7: 1}
    for t, c in counts.items():
        x[t] = x[t] / 1.3 if x[t] > 0 else x[t] * 1.3
        x[t] -= 0.5 + 0.25 * c
    n = 15000
    got = np.zeros(len(x), dtype=np.int64)
    for pos in range(n):
        got[s.sample(LOGITS, pos, pending)] += 1
    stat, df = chi_square(got, softmax(x), n)
    assert stat < CHI2_CRIT[df], (stat, got)
