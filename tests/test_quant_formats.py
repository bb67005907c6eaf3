"""GGUF block formats in C++: dequantization equals gguf-py's NumPy dequantizer bit for bit,
the multi-row dot kernels agree with NumPy on the dequantized weights, and a row's result is
the same whatever window (T, other rows) it ran in."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from gguf import quants

from strata import _engine

from gguf_helpers import ggml_activation_blocks  # noqa: E402

FORMATS = ["F32", "F16", "BF16", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
ISAS = _engine.quant_isas()

# Byte offsets of the f16 scale fields inside one block (where the edge values go).
SCALE_OFFSETS = {"Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208], "IQ4_XS": [0]}
# f16 bit patterns at the edges: +-0, smallest subnormal, largest subnormal, smallest normal,
# 1, max finite, +-inf, NaN.
EDGE_HALVES = [0x0000, 0x8000, 0x0001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00]


def geometry(fmt):
    gid, elems, nbytes = _engine.quant_formats()[fmt]
    assert gid == int(getattr(GT, fmt))
    return elems, nbytes


def random_tensor(fmt, rows, cols, rng, *, edge=False, finite=False):
    """Random raw bytes of a rows x cols tensor; scale fields random halves (or edge values)."""
    elems, nbytes = geometry(fmt)
    nblocks = rows * cols // elems
    raw = rng.integers(0, 256, size=(nblocks, nbytes), dtype=np.uint8)
    if fmt in SCALE_OFFSETS:
        for off in SCALE_OFFSETS[fmt]:
            if edge:
                h = np.array(EDGE_HALVES, dtype=np.uint16)[rng.integers(0, len(EDGE_HALVES), nblocks)]
            elif finite:  # moderate magnitudes, both signs: realistic scales for the dot tests
                h = np.float16(rng.uniform(-0.05, 0.05, nblocks)).view(np.uint16)
            else:
                h = rng.integers(0, 1 << 16, nblocks, dtype=np.uint16)
            raw[:, off:off + 2] = h.view(np.uint8).reshape(nblocks, 2)
    elif finite:
        vals = rng.standard_normal(rows * cols).astype(np.float32)
        raw = {"F32": vals.view(np.uint8), "F16": vals.astype(np.float16).view(np.uint8),
               "BF16": (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)}[fmt]
    return np.ascontiguousarray(raw).reshape(rows, -1)


def reference_dequant(fmt, raw, rows, cols):
    if fmt == "BF16":  # gguf-py dequantizes BF16 through its BF16 trait
        return quants.dequantize(raw.reshape(-1), GT.BF16).reshape(rows, cols)
    return np.asarray(quants.dequantize(raw.reshape(rows, -1), getattr(GT, fmt))).reshape(rows, cols)


def assert_bit_equal(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape
    both_nan = np.isnan(got) & np.isnan(want)
    diff = (got.view(np.uint32) != want.view(np.uint32)) & ~both_nan
    assert not diff.any(), f"{diff.sum()} of {diff.size} values differ, first at {np.argwhere(diff)[0]}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # gguf-py on inf/NaN scales
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("edge", [False, True])
def test_dequantize_matches_gguf_bit_for_bit(fmt, edge):
    rng = np.random.default_rng(hash((fmt, edge)) & 0xFFFF)
    elems, _ = geometry(fmt)
    rows, cols = 6, max(elems, 256) * 3
    raw = random_tensor(fmt, rows, cols, rng, edge=edge)
    got = _engine.quant_dequantize(fmt, raw, rows, cols)
    assert_bit_equal(got, reference_dequant(fmt, raw, rows, cols))


# Formats whose kernels quantize each activation row per block (32 or 256 values) like ggml.
INT8_ACTIVATIONS = {"Q5_0": 32, "Q5_1": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "IQ4_XS": 256}


def quantized_activations(X, block):
    """The activations the int8 kernels use (ggml_activation_blocks), as values d * q."""
    Xb = X.reshape(-1, block).astype(np.float32)
    q, d = ggml_activation_blocks(Xb, block)
    return (q.astype(np.float64) * d.astype(np.float64)[:, None]).reshape(X.shape)


def q5_1_mins(raw, rows):
    """The f16 min of every Q5_1 block, (rows, blocks) as f64."""
    return raw.reshape(rows, -1, 24)[:, :, 2:4].copy().view(np.float16)[..., 0].astype(np.float64)


def q5_1_without_mins(raw):
    blocks = raw.reshape(-1, 24).copy()
    blocks[:, 2:4] = 0
    return blocks.reshape(raw.shape)


def int8_reference(fmt, raw, rows, cols, X):
    """What the int8 kernels compute, in f64: the quantized activations times the dequantized
    weights; for Q5_1 the d * q part so, plus min x the activation block's Q8_1 sum (llama.cpp's
    Q5_1 x Q8_1 arithmetic: s is the f16-rounded amax/127 * sum of q, not d * sum of q)."""
    Xr = quantized_activations(X, INT8_ACTIVATIONS[fmt])
    if fmt != "Q5_1":
        return Xr @ reference_dequant(fmt, raw, rows, cols).astype(np.float64).T
    Wd = reference_dequant(fmt, q5_1_without_mins(raw), rows, cols).astype(np.float64)
    s = ggml_activation_blocks(X.reshape(-1, 32).astype(np.float32), 32, sums=True)[2]
    S = s.astype(np.float64).reshape(X.shape[0], -1)
    return Xr @ Wd.T + S @ q5_1_mins(raw, rows).T


@pytest.mark.parametrize("block", [32, 256])
def test_activation_quantization_matches_ggml_rounding(block):
    """The engine's int8 activations equal a NumPy model of llama.cpp's (f16 scale and 127/amax
    for 32-blocks, -127/max for 256-blocks, round half to even) bit for bit, ties, zero blocks,
    signed zeros and negative maxima included."""
    rng = np.random.default_rng(block)
    nb = 12
    x = (rng.standard_normal(nb * block) * rng.choice([1e-3, 1.0, 50.0], nb * block)).astype(np.float32)
    xb = x.reshape(nb, block)
    xb[0] = 0.0                       # scale 0
    xb[1] = -0.0
    xb[2, :] = rng.integers(-127, 127, block).astype(np.float32) + 0.5  # exact ties at d = 1
    xb[2, 0] = 127.0
    xb[2, 1:] = np.clip(xb[2, 1:], -126.5, 126.5)
    xb[3, ::2] = -xb[3, 1::2]         # mirrored values: symmetric rounding, a tie for the max
    xb[4, 5] = -3 * np.abs(xb[4]).max()  # a negative max
    xb[5] *= np.float32(1e-5)         # an f16-subnormal 32-block scale
    q, d = _engine.quant_quantize_activation(x, block)
    want_q, want_d = ggml_activation_blocks(xb, block)
    assert d.tobytes() == want_d.tobytes()
    assert np.array_equal(q.reshape(nb, block), want_q)
    if block == 32:  # the Q8_1 sums (Q5_1's partner): f16(f32 scale x integer sum)
        q1, d1, s = _engine.quant_quantize_activation(x, block, sums=True)
        want_s = ggml_activation_blocks(xb, block, sums=True)[2]
        assert q1.tobytes() == q.tobytes() and d1.tobytes() == d.tobytes()
        assert s.tobytes() == want_s.tobytes()
        assert (s != want_d * want_q.astype(np.int32).sum(axis=1)).any()  # not d x sum: rounded once
    else:
        with pytest.raises(ValueError, match="32-blocks"):
            _engine.quant_quantize_activation(x, block, sums=True)
    away = np.clip(quants.np_roundf(np.abs(xb[2])), -127, 127)
    assert (np.abs(want_q[2]) != away).any()  # the tie row really rounds half to even
    if block == 256:
        assert want_d[2] < 0 and want_d[4] > 0  # the sign follows -max


def magnitude_weights(fmt, raw, rows, cols):
    """|w| to bound rounding errors with: for formats with a min term, |d*sc*q| + |dmin*m|."""
    W = reference_dequant(fmt, raw, rows, cols)
    if fmt == "Q5_1":
        scaled = reference_dequant(fmt, q5_1_without_mins(raw), rows, cols)
        return np.abs(scaled) + np.abs(scaled - W)
    if fmt not in ("Q4_K", "Q5_K"):
        return np.abs(W)
    blocks = raw.reshape(-1, {"Q4_K": 144, "Q5_K": 176}[fmt]).copy()
    blocks[:, 2:4] = 0  # dmin = 0 leaves d*sc*q
    scaled = reference_dequant(fmt, blocks.reshape(raw.shape), rows, cols)
    return np.abs(scaled) + np.abs(scaled - W)


def dot_tolerance(Wabs, X):
    """Forward error bound of any f32 summation order: gamma_n * sum |w||x| (n plus a few
    roundings of the block scales)."""
    n = Wabs.shape[1] + 8
    u = 2.0 ** -24
    gamma = n * u / (1 - n * u)
    return gamma * (np.abs(X).astype(np.float64) @ Wabs.astype(np.float64).T) + 1e-30


def shape_for(fmt):
    # Q8_0: 11 blocks (a partial span); plain floats: a masked tail; K-quants: 3 super-blocks.
    return {"Q8_0": 352, "Q5_0": 352, "Q5_1": 352, "F32": 300, "F16": 300, "BF16": 300}.get(fmt, 768)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_dot_matches_numpy_on_dequantized_weights(fmt, isa):
    rng = np.random.default_rng(7)
    rows, cols = 9, shape_for(fmt)
    raw = random_tensor(fmt, rows, cols, rng, finite=True)
    W = reference_dequant(fmt, raw, rows, cols)
    X = rng.standard_normal((5, cols)).astype(np.float32)
    X[1, :40] = 0.0  # an all-zero activation block (scale 0)
    Xr = quantized_activations(X, INT8_ACTIVATIONS[fmt]) if fmt in INT8_ACTIVATIONS else X.astype(np.float64)
    got = _engine.quant_dot(fmt, raw, rows, cols, X, isa=isa)
    want = int8_reference(fmt, raw, rows, cols, X) if fmt in INT8_ACTIVATIONS else Xr @ W.astype(np.float64).T
    err = np.abs(got - want)
    assert (err <= dot_tolerance(magnitude_weights(fmt, raw, rows, cols), Xr)).all(), f"max error {err.max()}"


@pytest.mark.parametrize("blocks", [1, 2, 3, 8, 11, 16])
@pytest.mark.parametrize("fmt", sorted(INT8_ACTIVATIONS))
def test_int8_kernels_agree_across_instruction_sets(fmt, blocks):
    """Integer sums are exact and the float steps are the same: every ISA gives the same bits
    (rows of 1 to 16 blocks: whole and partial 8-block spans, odd block counts; 1-16 input rows)."""
    rng = np.random.default_rng(5 + blocks)
    elems, _ = geometry(fmt)
    rows, cols = 7, elems * blocks
    raw = random_tensor(fmt, rows, cols, rng, finite=True)
    for T in (1, 3, 4, 6, 16):
        X = rng.standard_normal((T, cols)).astype(np.float32)
        results = {isa: _engine.quant_dot(fmt, raw, rows, cols, X, isa=isa).tobytes() for isa in ISAS}
        assert len(set(results.values())) == 1, (T, list(results))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_dot_rows_are_batch_invariant(fmt, isa):
    rng = np.random.default_rng(11)
    rows, cols = 5, shape_for(fmt)
    raw = random_tensor(fmt, rows, cols, rng, finite=True)
    x = rng.standard_normal(cols).astype(np.float32)
    alone = _engine.quant_dot(fmt, raw, rows, cols, x[None, :], isa=isa)[0]
    for T in range(1, 17):
        X = rng.standard_normal((T, cols)).astype(np.float32)
        at = int(rng.integers(0, T))
        X[at] = x
        got = _engine.quant_dot(fmt, raw, rows, cols, X, isa=isa)[at]
        assert got.tobytes() == alone.tobytes(), f"T={T}, row {at}"


@pytest.mark.parametrize("isa", ISAS)
def test_q5_1_min_term_is_llama_cpps(isa):
    """With every d = 0 a Q5_1 product is its min term alone: the f32 sum, in block order, of
    min x the activation block's Q8_1 sum, bit for bit (so the kernels use ggml's f16 block sums,
    not d x the integer sum), plus the +0 of the scale lanes."""
    rng = np.random.default_rng(3)
    rows, cols = 4, 32 * 13  # an 8-block span and a partial one of 5
    raw = random_tensor("Q5_1", rows, cols, rng, finite=True)
    raw.reshape(-1, 24)[:, 0:2] = 0
    X = rng.standard_normal((3, cols)).astype(np.float32)
    got = _engine.quant_dot("Q5_1", raw, rows, cols, X, isa=isa)
    mins = q5_1_mins(raw, rows).astype(np.float32)
    for t in range(3):
        s = ggml_activation_blocks(X[t].reshape(-1, 32), 32, sums=True)[2]
        for r in range(rows):
            acc = np.float32(0)
            for b in range(cols // 32):
                acc = np.float32(acc + np.float32(mins[r, b] * s[b]))
            assert got[t, r].tobytes() == np.float32(np.float32(0) + acc).tobytes(), (t, r)


def test_wrong_sizes_are_refused():
    raw = np.zeros((2, 144), np.uint8)
    with pytest.raises(ValueError, match="not a whole number"):
        _engine.quant_dequantize("Q4_K", raw, 2, 300)
    with pytest.raises(ValueError, match="expected"):
        _engine.quant_dequantize("Q4_K", raw, 3, 256)
    with pytest.raises(ValueError, match="unknown weight format"):
        _engine.quant_dequantize("Q3_K", raw, 2, 256)
    with pytest.raises(ValueError, match="1..16"):
        _engine.quant_dot("Q4_K", raw, 2, 256, np.zeros((17, 256), np.float32))
