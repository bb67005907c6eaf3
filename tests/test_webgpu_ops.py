"""Every WGSL kernel against a NumPy (or transformers) reference on the available WebGPU
adapter (lavapipe in CI), with the tolerance written next to each check, plus batch
invariance: a row's result is bit-identical whatever the number of rows and the other rows."""
from __future__ import annotations

import numpy as np
import pytest

from webgpu_helpers import bf16_bits, bf16_to_f32, open_test_device, weights_in

# Tolerances, max abs error (relative to the scale named where it says so). Measured on lavapipe
# (Mesa 22.3 llvmpipe, larger shapes than here: K=2048 matmul, D=2048 norms, 1000-cell
# attention, Dk=Dv=128 GDN): matmul 1.7e-8 of |x|.|w|, rmsnorm 7e-7, gated 2.4e-7, rotary 0,
# elementwise 1.6e-7 relative, router weights 9e-8 (ids equal), attention 2.7e-7, GDN out 2e-8
# and state 1.8e-7, conv 9.5e-7. Each bound is about 10x the measured value.
MATMUL_REL = 2e-7       # |y - ref| / (|x| @ |w|.T)
NORM_ABS = 1e-5
ROTARY_ABS = 1e-6
ELEMENTWISE_REL = 2e-6
ROUTER_ABS = 1e-6
ATTENTION_ABS = 3e-6
GDN_ABS = 2e-6
CONV_ABS = 1e-5


@pytest.fixture(scope="module")
def gpu():
    return open_test_device()


@pytest.fixture(scope="module")
def gpu_small_chunks():
    # 4 KiB weight chunks: every matrix below spans several bindings
    return open_test_device(max_chunk_bytes=4096)


# -- matmul -------------------------------------------------------------------------------

def assert_matmul_close(y, x, exact):
    """y is x @ exact.T within MATMUL_REL of |x| @ |exact|.T, each element (float64 reference)."""
    x64 = x.astype(np.float64)
    assert np.max(np.abs(y - x64 @ exact.T) / (np.abs(x64) @ np.abs(exact).T)) < MATMUL_REL


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
def test_matmul_matches_numpy(gpu, fmt):
    rng = np.random.default_rng(1)
    stored, exact = weights_in(fmt, 70, 200, rng)
    x = rng.standard_normal((21, 200)).astype(np.float32)  # three token blocks, the last partial
    y, chunks = gpu.matmul(x, stored, fmt)
    assert y.shape == (21, 70)
    assert chunks == 1
    assert_matmul_close(y, x, exact)


@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
def test_matmul_rows_are_batch_invariant(gpu, fmt):
    rng = np.random.default_rng(2)
    stored, _ = weights_in(fmt, 33, 130, rng)
    x = rng.standard_normal((16, 130)).astype(np.float32)
    full, _ = gpu.matmul(x, stored, fmt)
    for T in range(1, 17):
        y, _ = gpu.matmul(x[:T], stored, fmt)
        np.testing.assert_array_equal(y, full[:T], err_msg=f"T={T}")
    # other rows changed: row 0 stays identical
    other = rng.standard_normal((7, 130)).astype(np.float32)
    other[0] = x[0]
    y, _ = gpu.matmul(other, stored, fmt)
    np.testing.assert_array_equal(y[0], full[0])


def test_matmul_prefill_rows_match_decode_rows(gpu):
    # beyond 16 rows (prefill) the same kernel runs: every row equals its one-row result
    rng = np.random.default_rng(3)
    stored, exact = weights_in("f16", 40, 96, rng)
    x = rng.standard_normal((45, 96)).astype(np.float32)
    y, _ = gpu.matmul(x, stored, "f16")
    for t in (0, 17, 44):
        one, _ = gpu.matmul(x[t : t + 1], stored, "f16")
        np.testing.assert_array_equal(y[t], one[0])


@pytest.mark.parametrize("fmt", ["f32", "bf16"])
def test_matmul_over_weight_chunks_is_identical(gpu, gpu_small_chunks, fmt):
    rng = np.random.default_rng(4)
    stored, _ = weights_in(fmt, 100, 256, rng)
    x = rng.standard_normal((3, 256)).astype(np.float32)
    whole, n_whole = gpu.matmul(x, stored, fmt)
    chunked, n_chunks = gpu_small_chunks.matmul(x, stored, fmt)
    row_bytes = 256 * (4 if fmt == "f32" else 2)
    assert n_whole == 1
    assert n_chunks == -(-100 // (4096 // row_bytes))
    np.testing.assert_array_equal(chunked, whole)


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_matmul_odd_reduction_length(gpu, fmt):
    # 16-bit rows of odd length: the last u32 word holds one value and a zero pad
    rng = np.random.default_rng(20)
    stored, exact = weights_in(fmt, 9, 37, rng)
    x = rng.standard_normal((3, 37)).astype(np.float32)
    y, _ = gpu.matmul(x, stored, fmt)
    assert_matmul_close(y, x, exact)


def test_matmul_strided_rows(gpu):
    # a view whose rows are wider than the packed data (row_bytes > cols * 2)
    rng = np.random.default_rng(5)
    wide = rng.standard_normal((12, 80)).astype(np.float16)
    view = wide[:, :64]
    x = rng.standard_normal((2, 64)).astype(np.float32)
    y, _ = gpu.matmul(x, view, "f16")
    ref = x.astype(np.float64) @ view.astype(np.float64).T
    assert np.max(np.abs(y - ref)) < 1e-4


def test_matmul_head_rows_are_batch_invariant(gpu):
    # a matrix of at least 32768 rows is an output head: at T = 2..8 it runs the lanes4 loop
    # (four quads of 4 rows per iteration), at T = 1 and T > 8 the lanes loop; the two sum each
    # row alike, so every row equals its one-row result bit for bit. K = 520 (65 quads) runs the
    # four-quad loop and its remainder; 32771 rows leave a workgroup with 3 live rows.
    rng = np.random.default_rng(21)
    stored, exact = weights_in("bf16", 32771, 520, rng)
    x = rng.standard_normal((16, 520)).astype(np.float32)
    full, _ = gpu.matmul(x, stored, "bf16")
    assert_matmul_close(full, x, exact)
    for T in (1, 2, 7, 9):
        y, _ = gpu.matmul(x[:T], stored, "bf16")
        np.testing.assert_array_equal(y, full[:T], err_msg=f"T={T}")
    other = rng.standard_normal((4, 520)).astype(np.float32)
    other[2] = x[0]
    y, _ = gpu.matmul(other, stored, "bf16")
    np.testing.assert_array_equal(y[2], full[0])


def test_matmul_window_row_split_changes_no_bit(gpu, monkeypatch):
    # a matrix of few row groups (2399 rows: 600 workgroups of 4, under the 2048 a dispatch should
    # have) spreads its window rows over several workgroups per row group (T = 3: 3 workgroups of
    # one row; T = 8: 4 of 2; T = 16: 4 of 4): every row equals its one-row result, the other
    # rows' choice does not matter, and the unsplit kernel (STRATA_WEBGPU_ROW_SPLIT=0) gives the
    # same bits
    monkeypatch.setenv("STRATA_WEBGPU_ROW_SPLIT", "0")
    unsplit = open_test_device()
    monkeypatch.delenv("STRATA_WEBGPU_ROW_SPLIT")
    rng = np.random.default_rng(22)
    stored, exact = weights_in("bf16", 2399, 264, rng)
    x = rng.standard_normal((16, 264)).astype(np.float32)
    full, _ = gpu.matmul(x, stored, "bf16")
    assert_matmul_close(full, x, exact)
    for T in range(1, 17):
        y, _ = gpu.matmul(x[:T], stored, "bf16")
        np.testing.assert_array_equal(y, full[:T], err_msg=f"T={T}")
    for T in (3, 8, 16):
        y, _ = unsplit.matmul(x[:T], stored, "bf16")
        np.testing.assert_array_equal(y, full[:T], err_msg=f"unsplit T={T}")
    other = rng.standard_normal((7, 264)).astype(np.float32)
    other[5] = x[0]
    y, _ = gpu.matmul(other, stored, "bf16")
    np.testing.assert_array_equal(y[5], full[0])


def test_matmul_rejects_bad_format(gpu):
    with pytest.raises(ValueError, match="unsupported weight format 'q4'"):
        gpu.matmul(np.zeros((1, 4), np.float32), np.zeros((2, 4), np.float32), "q4")


# -- norms --------------------------------------------------------------------------------

def test_rmsnorm_matches_transformers(gpu):
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNorm

    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 3, 96)).astype(np.float32)
    w = (rng.standard_normal(96) * 0.1).astype(np.float32)
    norm = Qwen3NextRMSNorm(96, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(w))
        ref = norm(torch.from_numpy(x)).numpy()
    y = gpu.rmsnorm(x, w, 1e-6, 1.0)  # Qwen3-Next norms scale by (1 + w)
    assert np.max(np.abs(y - ref)) < NORM_ABS


def test_rmsnorm_gated_matches_transformers(gpu):
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextRMSNormGated

    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 64)).astype(np.float32)
    z = rng.standard_normal((6, 64)).astype(np.float32)
    w = (1 + rng.standard_normal(64) * 0.1).astype(np.float32)
    norm = Qwen3NextRMSNormGated(64, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(w))
        ref = norm(torch.from_numpy(x), torch.from_numpy(z)).numpy()
    y = gpu.rmsnorm(x, w, 1e-6, 0.0, z)
    assert np.max(np.abs(y - ref)) < NORM_ABS


def test_rmsnorm_rows_are_independent(gpu):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((16, 200)).astype(np.float32)
    w = rng.standard_normal(200).astype(np.float32)
    full = gpu.rmsnorm(x, w, 1e-6)
    for T in (1, 5, 16):
        np.testing.assert_array_equal(gpu.rmsnorm(x[:T], w, 1e-6), full[:T])


# -- rotary -------------------------------------------------------------------------------

def _cos_sin(positions, rot_dim, theta=10000.0):
    inv = 1.0 / theta ** (np.arange(0, rot_dim, 2, dtype=np.float64) / rot_dim)
    ang = np.asarray(positions, np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)


def test_rotary_partial_matches_transformers(gpu):
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_next.modeling_qwen3_next import apply_rotary_pos_emb

    rng = np.random.default_rng(9)
    T, H, D, rot = 5, 4, 64, 16  # partial rotary: the first 16 of 64 dims
    x = rng.standard_normal((T, H, D)).astype(np.float32)
    positions = [0, 1, 7, 300, 40000]
    cs = _cos_sin(positions, rot)
    half = rot // 2
    cos = np.concatenate([cs[:, :half], cs[:, :half]], 1)
    sin = np.concatenate([cs[:, half:], cs[:, half:]], 1)
    xt = torch.from_numpy(x).permute(1, 0, 2)[None]  # (1, H, T, D)
    ref, _ = apply_rotary_pos_emb(xt, xt, torch.from_numpy(cos)[None], torch.from_numpy(sin)[None])
    ref = ref[0].permute(1, 0, 2).numpy()
    y = gpu.rotary(x, cs, rot)
    assert np.max(np.abs(y - ref)) < ROTARY_ABS
    np.testing.assert_array_equal(y[..., rot:], x[..., rot:])


# -- embedding ----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["f32", "f16", "bf16"])
def test_embedding_gathers_exact_rows(gpu, gpu_small_chunks, fmt):
    rng = np.random.default_rng(10)
    stored, exact = weights_in(fmt, 300, 48, rng)
    ids = np.array([0, 299, 5, 5, 123], np.uint32)
    y, chunks = gpu.embedding(ids, stored, fmt, 48)
    np.testing.assert_array_equal(y, exact[ids].astype(np.float32))
    y2, chunks2 = gpu_small_chunks.embedding(ids, stored, fmt, 48)
    assert chunks == 1 and chunks2 > 1
    np.testing.assert_array_equal(y2, y)


def test_embedding_rejects_out_of_vocab_id(gpu):
    table = np.zeros((10, 4), np.float32)
    with pytest.raises(ValueError, match="token id 10 outside the vocabulary of 10"):
        gpu.embedding(np.array([3, 10], np.uint32), table, "f32", 4)


# -- elementwise --------------------------------------------------------------------------

def test_elementwise_ops(gpu):
    rng = np.random.default_rng(11)
    a = rng.standard_normal(1000).astype(np.float32) * 4
    b = rng.standard_normal(1000).astype(np.float32) * 4
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    s = np.float64(np.float32(0.37))
    silu = a64 / (1 + np.exp(-a64))
    # (result, reference, magnitude of the terms the error is measured against)
    checks = {
        "add": (gpu.elementwise("add", a, b), a64 + b64, np.abs(a64) + np.abs(b64)),
        "add_scaled": (gpu.elementwise("add_scaled", a, b, 0.37), a64 + s * b64, np.abs(a64) + np.abs(s * b64)),
        "scale": (gpu.elementwise("scale", a, None, -1.5), a64 * -1.5, np.abs(a64 * 1.5)),
        "silu": (gpu.elementwise("silu", a), silu, np.abs(a64)),
        "swiglu": (gpu.elementwise("swiglu", a, b), silu * b64, np.abs(a64 * b64)),
        "sigmoid_mul": (gpu.elementwise("sigmoid_mul", a, b), a64 / (1 + np.exp(-b64)), np.abs(a64)),
    }
    for op, (got, ref, mag) in checks.items():
        assert got.shape == a.shape
        assert np.max(np.abs(got - ref) / (mag + 1e-6)) < ELEMENTWISE_REL, op


def test_elementwise_rejects_unknown_op(gpu):
    with pytest.raises(ValueError, match="unknown op 'gelu'"):
        gpu.elementwise("gelu", np.zeros(4, np.float32))


# -- router -------------------------------------------------------------------------------

@pytest.mark.parametrize("renormalize", [False, True])
def test_router_topk_matches_numpy(gpu, renormalize):
    rng = np.random.default_rng(12)
    T, E, k = 6, 512, 10
    logits = rng.standard_normal((T, E)).astype(np.float32) * 3
    ids, weights = gpu.router_topk(logits, k, renormalize)
    l64 = logits.astype(np.float64)
    probs = np.exp(l64 - l64.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    ref_ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    ref_w = np.take_along_axis(probs, ref_ids, 1)
    if renormalize:
        ref_w /= ref_w.sum(1, keepdims=True)
    np.testing.assert_array_equal(ids, ref_ids)
    assert np.max(np.abs(weights - ref_w)) < ROUTER_ABS


def test_router_ties_go_to_the_lower_index(gpu):
    logits = np.zeros((2, 64), np.float32)
    logits[0, [40, 3, 17]] = 1.0
    logits[1, :] = 0.5
    ids, weights = gpu.router_topk(logits, 3, False)
    assert ids[0].tolist() == [3, 17, 40]
    assert ids[1].tolist() == [0, 1, 2]
    np.testing.assert_allclose(weights[1], 1 / 64, rtol=1e-6)


def test_router_rows_are_independent(gpu):
    rng = np.random.default_rng(13)
    logits = rng.standard_normal((16, 128)).astype(np.float32)
    ids, w = gpu.router_topk(logits, 8, True)
    for T in (1, 3, 16):
        i2, w2 = gpu.router_topk(logits[:T], 8, True)
        np.testing.assert_array_equal(i2, ids[:T])
        np.testing.assert_array_equal(w2, w[:T])


# -- attention over the KV cache ----------------------------------------------------------

def _attention_ref(q, kc, vc, pos0, scale):
    T, Hq, D = q.shape
    Hk = kc.shape[1]
    out = np.zeros((T, Hq, D))
    for t in range(T):
        n = pos0 + t + 1
        for h in range(Hq):
            kh = h // (Hq // Hk)
            s = kc[:n, kh].astype(np.float64) @ q[t, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ vc[:n, kh].astype(np.float64)
    return out


def test_attention_window_matches_numpy_and_writes_cells(gpu):
    rng = np.random.default_rng(14)
    cells, Hq, Hk, D, pos0, T = 80, 4, 2, 32, 70, 6
    kc = rng.standard_normal((cells, Hk, D)).astype(np.float32)
    vc = rng.standard_normal((cells, Hk, D)).astype(np.float32)
    q = rng.standard_normal((T, Hq, D)).astype(np.float32)
    kn = rng.standard_normal((T, Hk, D)).astype(np.float32)
    vn = rng.standard_normal((T, Hk, D)).astype(np.float32)
    out, k_after = gpu.attention(q, kc, vc, kn, vn, pos0, D**-0.5)
    kc2, vc2 = kc.copy(), vc.copy()
    kc2[pos0 : pos0 + T], vc2[pos0 : pos0 + T] = kn, vn
    np.testing.assert_array_equal(k_after, kc2)
    assert np.max(np.abs(out - _attention_ref(q, kc2, vc2, pos0, D**-0.5))) < ATTENTION_ABS


def test_attention_window_rows_equal_serial_decode(gpu):
    # a T-row window gives each row exactly what one-row decoding at that position gives,
    # and rejected rows' cells (past the kept prefix) never change a committed row
    rng = np.random.default_rng(15)
    cells, Hq, Hk, D, pos0, T = 40, 2, 1, 16, 20, 5
    kc = rng.standard_normal((cells, Hk, D)).astype(np.float32)
    vc = rng.standard_normal((cells, Hk, D)).astype(np.float32)
    q = rng.standard_normal((T, Hq, D)).astype(np.float32)
    kn = rng.standard_normal((T, Hk, D)).astype(np.float32)
    vn = rng.standard_normal((T, Hk, D)).astype(np.float32)
    window, _ = gpu.attention(q, kc, vc, kn, vn, pos0, 0.25)
    k_serial, v_serial = kc.copy(), vc.copy()
    for t in range(T):
        row, _ = gpu.attention(q[t : t + 1], k_serial, v_serial, kn[t : t + 1], vn[t : t + 1], pos0 + t, 0.25)
        np.testing.assert_array_equal(row[0], window[t], err_msg=f"row {t}")
        k_serial[pos0 + t], v_serial[pos0 + t] = kn[t], vn[t]


# -- Gated DeltaNet -----------------------------------------------------------------------

def _gdn_inputs(rng, T, Hk=2, Hv=4, Dk=32, Dv=24):
    q = rng.standard_normal((T, Hk, Dk)).astype(np.float32)
    k = rng.standard_normal((T, Hk, Dk)).astype(np.float32)
    v = rng.standard_normal((T, Hv, Dv)).astype(np.float32)
    g = -np.abs(rng.standard_normal((T, Hv))).astype(np.float32) * 0.5
    beta = (1 / (1 + np.exp(-rng.standard_normal((T, Hv))))).astype(np.float32)
    state = rng.standard_normal((Hv, Dk, Dv)).astype(np.float32) * 0.1
    return q, k, v, g, beta, state


def test_gdn_matches_transformers_recurrence(gpu):
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_recurrent_gated_delta_rule

    rng = np.random.default_rng(16)
    q, k, v, g, beta, state = _gdn_inputs(rng, T=7)
    out, new_state = gpu.gdn(q, k, v, g, beta, state, 7, 32**-0.5)
    t = lambda a: torch.from_numpy(a)[None]  # noqa: E731
    ref_out, ref_state = torch_recurrent_gated_delta_rule(
        t(q), t(k), t(v), t(g), t(beta), initial_state=t(state), output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    assert np.max(np.abs(out - ref_out[0].numpy())) < GDN_ABS
    assert np.max(np.abs(new_state - ref_state[0].numpy())) < GDN_ABS


def test_gdn_window_leaves_state_and_commit_folds_kept_rows(gpu):
    rng = np.random.default_rng(17)
    q, k, v, g, beta, state = _gdn_inputs(rng, T=5)
    scale = 32**-0.5
    window, untouched = gpu.gdn(q, k, v, g, beta, state, 0, scale)
    np.testing.assert_array_equal(untouched, state)  # verification run: state not mutated
    s = state
    for t in range(5):  # serial decode: each step commits its row
        row, s = gpu.gdn(q[t : t + 1], k[t : t + 1], v[t : t + 1], g[t : t + 1], beta[t : t + 1], s, 1, scale)
        np.testing.assert_array_equal(row[0], window[t], err_msg=f"row {t}")
        if t == 2:
            s_after_3 = s
    _, folded = gpu.gdn(q, k, v, g, beta, state, 3, scale)  # commit(keep=3) of the window
    np.testing.assert_array_equal(folded, s_after_3)


# -- causal conv --------------------------------------------------------------------------

def test_causal_conv_matches_transformers(gpu):
    torch = pytest.importorskip("torch")
    from transformers.models.qwen3_next.modeling_qwen3_next import causal_conv1d_update

    rng = np.random.default_rng(18)
    T, C, K = 6, 96, 4
    x = rng.standard_normal((T, C)).astype(np.float32)
    w = rng.standard_normal((C, K)).astype(np.float32) * 0.5
    hist = rng.standard_normal((K - 1, C)).astype(np.float32)  # oldest input first, like the engine
    y, new_hist = gpu.causal_conv(x, w, hist, T)
    conv_state = torch.from_numpy(hist.T.copy())[None]  # transformers keeps (C, K-1)
    ref = causal_conv1d_update(torch.from_numpy(x.T.copy())[None], conv_state, torch.from_numpy(w), None, "silu")
    assert np.max(np.abs(y - ref[0].numpy().T)) < CONV_ABS
    np.testing.assert_array_equal(new_hist, conv_state[0].numpy().T)


def test_causal_conv_history_advances_over_committed_rows_only(gpu):
    rng = np.random.default_rng(19)
    T, C, K = 5, 40, 4
    x = rng.standard_normal((T, C)).astype(np.float32)
    w = rng.standard_normal((C, K)).astype(np.float32)
    hist = rng.standard_normal((K - 1, C)).astype(np.float32)
    window, same = gpu.causal_conv(x, w, hist, 0)
    np.testing.assert_array_equal(same, hist)
    h = hist
    for t in range(T):
        row, h = gpu.causal_conv(x[t : t + 1], w, h, 1)
        np.testing.assert_array_equal(row[0], window[t])
        if t == 1:
            h_after_2 = h
    _, kept2 = gpu.causal_conv(x, w, hist, 2)
    np.testing.assert_array_equal(kept2, h_after_2)
