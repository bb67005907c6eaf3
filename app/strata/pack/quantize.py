"""Quantizing expert matrices for `strata convert --quantize`, with ggml's reference rounding so the
blocks equal what llama.cpp's (and gguf-py's) quantizer writes for the same tensor.

Q8_0: blocks of 32 weights; d = max|x| / 127 stored as f16 (round to nearest even), q = roundf(x / d)
(halves away from zero), computed in f32 as the reference does. Q4_K / Q5_K / Q6_K: `kquants`.
"""
from __future__ import annotations

import numpy as np

QUANTIZE_FORMATS = {"q8_0": "Q8_0", "q4_k": "Q4_K", "q5_k": "Q5_K", "q6_k": "Q6_K"}


def _roundf(v: np.ndarray) -> np.ndarray:
    """C's roundf on f32 values: halves away from zero (exact: v + 0.5 is exact in f64)."""
    a = np.abs(v).astype(np.float64)
    return np.copysign(np.floor(a + 0.5), v)


def quantize_q8_0(x: np.ndarray) -> bytes:
    """f32 rows (cols a multiple of 32) -> Q8_0 blocks: per block 2 bytes f16 d, then 32 int8."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % 32:
        raise ValueError(f"a Q8_0 row of {x.shape[-1]} weights is not a whole number of 32-weight blocks")
    b = x.reshape(-1, 32)
    d = (np.abs(b).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = _roundf((b * inv).astype(np.float32)).astype(np.int8)
    out = np.empty((b.shape[0], 34), np.uint8)
    out[:, :2] = d.astype(np.float16).view(np.uint8)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def _kquant(name: str):
    """kquants' quantizer `name`, imported when first called."""
    def quantize(x: np.ndarray) -> bytes:
        from . import kquants

        return getattr(kquants, name)(x)

    return quantize


QUANTIZERS = {"Q8_0": quantize_q8_0, "Q4_K": _kquant("quantize_q4_k"), "Q5_K": _kquant("quantize_q5_k"),
              "Q6_K": _kquant("quantize_q6_k")}
