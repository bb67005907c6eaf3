"""The standalone prefill kernels (engine_ext/cpu/gemm.*, attention_kernel.*) against NumPy.

Prefill kernels are checked with a tolerance (batch invariance holds for decode windows only), but two properties are exact by
construction and tested as such: an output row does not depend on the other rows (T), and an
output feature does not depend on how the caller splits the feature range over threads.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata._engine import kernels

# f32 accumulation against a float64 reference: the error of each element is bounded relative to
# sum_k |x_k w_k| (a dropped or doubled term would be off by about that sum / K, >= 5e-4 of it)
RTOL = 1e-6


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even f32 -> bf16 bits, as checkpoints store them."""
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def gemm_err(y, X, W, bias=None) -> float:
    """max over elements of |y - ref| / (sum_k |x_k w_k| + |bias|), ref in float64."""
    X64, W64 = X.astype(np.float64), W.astype(np.float64)
    ref = X64 @ W64.T
    scale = np.abs(X64) @ np.abs(W64).T
    if bias is not None:
        ref = ref + bias
        scale = scale + np.abs(bias)
    return float((np.abs(y.astype(np.float64) - ref) / np.maximum(scale, 1e-30)).max())


def test_isa_is_reported():
    assert kernels.isa in ("avx512", "avx2", "scalar")
    assert kernels.gemm_feature_block() % 4 == 0


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 70), K=st.integers(1, 300), N=st.integers(1, 90), bias=st.booleans(),
       seed=st.integers(0, 2**31 - 1))
def test_gemm_f32_matches_numpy(T, K, N, bias, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, K), dtype=np.float32)
    W = rng.standard_normal((N, K), dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32) if bias else None
    assert gemm_err(kernels.gemm(X, W, b), X, W, b) < RTOL


@pytest.mark.parametrize("T,K,N", [(17, 512, 1024), (256, 512, 1536), (300, 2048, 97), (64, 128, 32000)])
def test_gemm_model_shapes(T, K, N):
    rng = np.random.default_rng(T + K + N)
    X = rng.standard_normal((T, K), dtype=np.float32)
    W = (rng.standard_normal((N, K)) * 0.02).astype(np.float32)
    assert gemm_err(kernels.gemm(X, W), X, W) < RTOL


@settings(max_examples=25, deadline=None)
@given(T=st.integers(1, 40), K=st.integers(1, 260), N=st.integers(1, 70), seed=st.integers(0, 2**31 - 1))
def test_gemm_bf16_matches_numpy_on_the_widened_weights(T, K, N, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((T, K), dtype=np.float32)
    Wb = to_bf16_bits(rng.standard_normal((N, K), dtype=np.float32))
    b = rng.standard_normal(N, dtype=np.float32)
    assert gemm_err(kernels.gemm(X, Wb, b), X, bf16_bits_to_f32(Wb), b) < RTOL


def test_gemm_rows_do_not_depend_on_the_other_rows():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((90, 333), dtype=np.float32)
    W = rng.standard_normal((77, 333), dtype=np.float32)
    full = kernels.gemm(X, W)
    for lo, hi in [(0, 1), (3, 20), (17, 90), (89, 90)]:
        np.testing.assert_array_equal(kernels.gemm(np.ascontiguousarray(X[lo:hi]), W), full[lo:hi])


def test_gemm_feature_split_is_exact():
    """What a thread split over [0, N) does: every range gives the same bits as the whole."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((40, 200), dtype=np.float32)
    W = rng.standard_normal((100, 200), dtype=np.float32)
    b = rng.standard_normal(100, dtype=np.float32)
    full = kernels.gemm(X, W, b)
    nb = kernels.gemm_feature_block()
    for lo, hi in [(0, nb), (nb, 100), (5, 37), (99, 100)]:
        part = kernels.gemm(X, W, b, n0=lo, n1=hi)
        np.testing.assert_array_equal(part[:, lo:hi], full[:, lo:hi])
        assert not part[:, :lo].any() and not part[:, hi:].any()


def test_gemm_k_zero_gives_the_bias():
    X = np.zeros((3, 0), np.float32)
    W = np.zeros((4, 0), np.float32)
    b = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(kernels.gemm(X, W, b), np.tile(b, (3, 1)))


def test_gemm_bad_shapes_are_one_line_errors():
    with pytest.raises(ValueError, match="columns"):
        kernels.gemm(np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="feature range"):
        kernels.gemm(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32), n0=2, n1=9)
    with pytest.raises(ValueError, match="bias"):
        kernels.gemm(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.float32), np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="float32 or uint16"):
        kernels.gemm(np.zeros((2, 3), np.float32), np.zeros((4, 3), np.int32))


# ---------------------------------------------------------------- attention

def attention_ref(Q, K, V, pos0, n_heads, n_kv, scale):
    T = Q.shape[0]
    hd = Q.shape[1] // n_heads
    rep = n_heads // n_kv
    O = np.zeros(Q.shape, np.float64)
    for t in range(T):
        n = pos0 + t + 1
        for h in range(n_heads):
            g = h // rep
            q = Q[t, h * hd:(h + 1) * hd].astype(np.float64)
            s = K[:n, g * hd:(g + 1) * hd].astype(np.float64) @ q * scale
            p = np.exp(s - s.max())
            O[t, h * hd:(h + 1) * hd] = (p / p.sum()) @ V[:n, g * hd:(g + 1) * hd].astype(np.float64)
    return O


def random_qkv(rng, T, pos0, n_heads, n_kv, hd, spread=1.0):
    Q = (rng.standard_normal((T, n_heads * hd)) * spread).astype(np.float32)
    K = (rng.standard_normal((pos0 + T, n_kv * hd)) * spread).astype(np.float32)
    V = rng.standard_normal((pos0 + T, n_kv * hd)).astype(np.float32)
    return Q, K, V


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 40), pos0=st.integers(0, 70), kv=st.sampled_from([(1, 1), (4, 1), (4, 2), (8, 2), (6, 3)]),
       hd=st.sampled_from([8, 16, 24, 64, 80]), seed=st.integers(0, 2**31 - 1))
def test_attention_matches_numpy(T, pos0, kv, hd, seed):
    n_heads, n_kv = kv
    rng = np.random.default_rng(seed)
    Q, K, V = random_qkv(rng, T, pos0, n_heads, n_kv, hd)
    scale = 1.0 / np.sqrt(hd)
    O = kernels.attention_causal(Q, K, V, pos0, n_heads, n_kv, scale)
    np.testing.assert_allclose(O, attention_ref(Q, K, V, pos0, n_heads, n_kv, scale), rtol=0, atol=3e-6)


@pytest.mark.parametrize("T,pos0,n_heads,n_kv,hd", [(256, 0, 8, 2, 64), (64, 448, 8, 2, 64), (33, 100, 16, 2, 128),
                                                    (20, 5, 32, 2, 256)])
def test_attention_model_shapes(T, pos0, n_heads, n_kv, hd):
    rng = np.random.default_rng(T + pos0 + hd)
    Q, K, V = random_qkv(rng, T, pos0, n_heads, n_kv, hd)
    scale = 1.0 / np.sqrt(hd)
    O = kernels.attention_causal(Q, K, V, pos0, n_heads, n_kv, scale)
    np.testing.assert_allclose(O, attention_ref(Q, K, V, pos0, n_heads, n_kv, scale), rtol=0, atol=3e-6)


def test_attention_peaked_and_flat_softmax():
    """Large logits (one cell dominates: exp range and the max subtraction) and zero logits
    (uniform weights: the masked tail must contribute exactly nothing)."""
    rng = np.random.default_rng(9)
    Q, K, V = random_qkv(rng, 19, 13, 4, 2, 32, spread=6.0)
    O = kernels.attention_causal(Q, K, V, 13, 4, 2, 1.0)
    np.testing.assert_allclose(O, attention_ref(Q, K, V, 13, 4, 2, 1.0), rtol=0, atol=2e-5)
    Qz = np.zeros_like(Q)
    O = kernels.attention_causal(Qz, K, V, 13, 4, 2, 1.0)
    for t in range(19):
        mean = V[:13 + t + 1].astype(np.float64).mean(0)
        np.testing.assert_allclose(O[t], np.concatenate([np.repeat(mean[None, :32], 2, 0).ravel(),
                                                         np.repeat(mean[None, 32:], 2, 0).ravel()]), atol=2e-6)


def test_attention_row_does_not_depend_on_the_block():
    """A row's output is the same whether it is computed in a block of 40 rows or alone."""
    rng = np.random.default_rng(11)
    Q, K, V = random_qkv(rng, 40, 25, 8, 2, 64)
    full = kernels.attention_causal(Q, K, V, 25, 8, 2, 0.125)
    for t in (0, 7, 39):
        one = kernels.attention_causal(np.ascontiguousarray(Q[t:t + 1]), K[:25 + t + 1], V[:25 + t + 1], 25 + t, 8, 2,
                                       0.125)
        np.testing.assert_array_equal(one[0], full[t])


def test_attention_bad_shapes_are_one_line_errors():
    Q, K, V = random_qkv(np.random.default_rng(0), 4, 2, 4, 2, 8)
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        kernels.attention_causal(Q, K, V, 2, 4, 3, 1.0)
    with pytest.raises(ValueError, match="K and V"):
        kernels.attention_causal(Q, K[:-1], V[:-1], 2, 4, 2, 1.0)
    with pytest.raises(ValueError, match="2-D"):
        kernels.attention_causal(Q[0], K, V, 2, 4, 2, 1.0)
