"""Q4_K, Q5_K and Q6_K quantizers with ggml's reference rounding (what llama-quantize writes without an
importance matrix), in NumPy: vectorized over blocks, every sum taken in f32 in the element order
the reference uses, so the blocks come out byte for byte the same.

Written from the GGUF block definitions and the published description of ggml's reference
search: per sub-block, a scale (and, for Q4_K, a min) is chosen by trying a few candidate inverse
scales around nmax / range and keeping the weighted least-squares fit with the lowest error; the
sub-block scales are then quantized to 6 (Q4_K, Q5_K) or 8 (Q6_K) bits against one f16 super-scale,
and the weights are re-quantized against the quantized scales.
"""
from __future__ import annotations

import numpy as np

F32 = np.float32
GROUP_MAX_EPS = F32(1e-15)


def _nearest(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: round half to even in f32."""
    return np.rint(v.astype(F32)).astype(np.int32)


def _f16(v: np.ndarray) -> np.ndarray:
    return v.astype(F32).astype(np.float16)


def _fit_scale_min(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """Per row of x [G, n] (weights w): (scale, -min, levels) with levels in [0, nmax] minimising the
    weighted squared error of scale * level + min (min <= 0)."""
    G, n = x.shape
    mn, mx = x[:, 0].copy(), x[:, 0].copy()
    sum_w = w[:, 0].copy()
    sum_x = (sum_w * x[:, 0]).astype(F32)
    for i in range(1, n):
        mn = np.minimum(mn, x[:, i])
        mx = np.maximum(mx, x[:, i])
        sum_w = (sum_w + w[:, i]).astype(F32)
        sum_x = (sum_x + w[:, i] * x[:, i]).astype(F32)
    mn = np.where(mn > 0, F32(0), mn).astype(F32)
    flat = mx == mn
    rng_ = np.where(flat, F32(1), mx - mn).astype(F32)
    iscale = (F32(nmax) / rng_).astype(F32)
    scale = (F32(1) / iscale).astype(F32)
    L = np.clip(_nearest(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    best = np.zeros(G, F32)
    for i in range(n):
        diff = (scale * L[:, i].astype(F32) + mn - x[:, i]).astype(F32)
        best = (best + w[:, i] * (diff * diff)).astype(F32)
    for step in range(nstep + 1):
        # the reference searches around the current fit: min (and so the range) as last improved
        rng_ = np.where(flat, F32(1), mx - mn).astype(F32)
        cand = ((F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / rng_).astype(F32)
        La = np.clip(_nearest(cand[:, None] * (x - mn[:, None])), 0, nmax)
        Lf = La.astype(F32)
        s_l = np.zeros(G, F32)
        s_l2 = np.zeros(G, F32)
        s_xl = np.zeros(G, F32)
        for i in range(n):
            wl = (w[:, i] * Lf[:, i]).astype(F32)
            s_l = (s_l + wl).astype(F32)
            s_l2 = (s_l2 + wl * Lf[:, i]).astype(F32)
            s_xl = (s_xl + wl * x[:, i]).astype(F32)
        D = (sum_w * s_l2 - s_l * s_l).astype(F32)
        ok = D > 0
        Ds = np.where(ok, D, F32(1))
        with np.errstate(divide="ignore", invalid="ignore"):
            t_scale = ((sum_w * s_xl - sum_x * s_l) / Ds).astype(F32)
            t_min = ((s_l2 * sum_x - s_l * s_xl) / Ds).astype(F32)
            pos = t_min > 0
            t_scale = np.where(pos, (s_xl / np.where(s_l2 == 0, F32(1), s_l2)).astype(F32), t_scale)
        t_min = np.where(pos, F32(0), t_min).astype(F32)
        cur = np.zeros(G, F32)
        for i in range(n):
            diff = (t_scale * Lf[:, i] + t_min - x[:, i]).astype(F32)
            cur = (cur + w[:, i] * (diff * diff)).astype(F32)
        better = ok & (cur < best) & ~flat
        L = np.where(better[:, None], La, L)
        best = np.where(better, cur, best)
        scale = np.where(better, t_scale, scale)
        mn = np.where(better, t_min, mn)
    scale = np.where(flat, F32(0), scale).astype(F32)
    L = np.where(flat[:, None], 0, L)
    return scale, (-mn).astype(F32), L


def _scale_min_blocks(x: np.ndarray, fmt: str, nmax: int, rmin: float, rdelta: float, nstep: int):
    """The part Q4_K and Q5_K share: f32 rows (cols a multiple of 256) -> (d, dmin, packed 6-bit
    sub-block scales and mins [nb, 12], levels [nb, 8, 32] in [0, nmax])."""
    x = np.ascontiguousarray(x, dtype=F32)
    if x.shape[-1] % 256:
        raise ValueError(f"a {fmt} row of {x.shape[-1]} weights is not a whole number of 256-weight blocks")
    b = x.reshape(-1, 8, 32)
    nb = b.shape[0]
    sub = b.reshape(-1, 32)
    s2 = np.zeros(sub.shape[0], F32)
    for i in range(32):
        s2 = (s2 + sub[:, i] * sub[:, i]).astype(F32)
    av = np.sqrt((s2 / F32(32)).astype(F32)).astype(F32)
    w = (av[:, None] + np.abs(sub)).astype(F32)
    scales, mins, L = _fit_scale_min(sub, w, nmax, rmin, rdelta, nstep)
    scales, mins, L = scales.reshape(nb, 8), mins.reshape(nb, 8), L.reshape(nb, 8, 32)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    with np.errstate(divide="ignore"):
        inv_s = np.where(max_scale > 0, F32(63) / np.where(max_scale > 0, max_scale, F32(1)), F32(0)).astype(F32)
        inv_m = np.where(max_min > 0, F32(63) / np.where(max_min > 0, max_min, F32(1)), F32(0)).astype(F32)
    ls = np.minimum(63, _nearest(inv_s[:, None] * scales)).astype(np.uint8)
    lm = np.minimum(63, _nearest(inv_m[:, None] * mins)).astype(np.uint8)
    d = _f16(max_scale / F32(63))
    dmin = _f16(max_min / F32(63))
    packed = np.zeros((nb, 12), np.uint8)
    packed[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (ls[:, 4:8] & 15) | ((lm[:, 4:8] & 15) << 4)
    dj = (d.astype(F32)[:, None] * ls.astype(F32)).astype(F32)
    dmj = (dmin.astype(F32)[:, None] * lm.astype(F32)).astype(F32)
    nz = dj != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(_nearest(((b + dmj[..., None]) / np.where(nz, dj, F32(1))[..., None]).astype(F32)), 0, nmax)
    L = np.where(nz[..., None], q, L).astype(np.uint8)
    return d, dmin, packed, L


def quantize_q4_k(x: np.ndarray) -> bytes:
    """f32 rows (cols a multiple of 256) -> Q4_K blocks (144 bytes per 256 weights)."""
    d, dmin, packed, L = _scale_min_blocks(x, "Q4_K", 15, -1.0, 0.1, 20)
    nb = L.shape[0]
    L = L.reshape(nb, 4, 2, 32)
    qs = (L[:, :, 0, :] | (L[:, :, 1, :] << 4)).reshape(nb, 128)
    out = np.concatenate([d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), packed, qs], axis=1)
    return out.tobytes()


def quantize_q5_k(x: np.ndarray) -> bytes:
    """f32 rows (cols a multiple of 256) -> Q5_K blocks (176 bytes per 256 weights): d, dmin, the
    12 bytes of scales and mins as in Q4_K, then qh (bit 4 of every level: weight j of the pair of
    sub-blocks 2c, 2c+1 gives bits 2c, 2c+1 of qh[j]) and qs (the low 4 bits, as Q4_K's nibbles)."""
    d, dmin, packed, L = _scale_min_blocks(x, "Q5_K", 31, -0.5, 0.1, 15)
    nb = L.shape[0]
    L = L.reshape(nb, 4, 2, 32)
    lo, hi = L & 15, (L >> 4).astype(np.uint8)
    qs = (lo[:, :, 0, :] | (lo[:, :, 1, :] << 4)).reshape(nb, 128)
    qh = np.zeros((nb, 32), np.uint8)
    for c in range(4):
        qh |= (hi[:, c, 0, :] << (2 * c)) | (hi[:, c, 1, :] << (2 * c + 1))
    out = np.concatenate([d.view(np.uint8).reshape(nb, 2), dmin.view(np.uint8).reshape(nb, 2), packed, qh, qs],
                         axis=1)
    return out.tobytes()


def _fit_symmetric(x: np.ndarray, nmax: int):
    """Per row of x [G, n]: (scale, levels in [0, 2*nmax)) of ggml's symmetric search with weights x^2."""
    G, n = x.shape
    ax = np.abs(x)
    idx = np.argmax(ax, axis=1)
    amax = ax[np.arange(G), idx]
    mx = x[np.arange(G), idx]
    tiny = amax < GROUP_MAX_EPS
    mxs = np.where(tiny, F32(1), mx).astype(F32)
    w = (x * x).astype(F32)

    def sums(iscale):
        l = np.clip(_nearest(iscale[:, None] * x), -nmax, nmax - 1)
        lf = l.astype(F32)
        slx = np.zeros(G, F32)
        sl2 = np.zeros(G, F32)
        for i in range(n):
            slx = (slx + (w[:, i] * x[:, i]).astype(F32) * lf[:, i]).astype(F32)
            sl2 = (sl2 + (w[:, i] * lf[:, i]).astype(F32) * lf[:, i]).astype(F32)
        return l, slx, sl2

    iscale = (F32(-nmax) / mxs).astype(F32)
    l, slx, sl2 = sums(iscale)
    L = l + nmax
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(sl2 != 0, slx / np.where(sl2 != 0, sl2, F32(1)), F32(0)).astype(F32)
    best = (scale * slx).astype(F32)
    for step in range(-9, 10):
        if step == 0:
            continue
        cand = (-(F32(nmax) + F32(0.1) * F32(step)) / mxs).astype(F32)
        l, slx, sl2 = sums(cand)
        better = (sl2 > 0) & ((slx * slx).astype(F32) > (best * sl2).astype(F32)) & ~tiny
        with np.errstate(divide="ignore", invalid="ignore"):
            s_new = (slx / np.where(sl2 > 0, sl2, F32(1))).astype(F32)
        L = np.where(better[:, None], l + nmax, L)
        scale = np.where(better, s_new, scale)
        best = np.where(better, (s_new * slx).astype(F32), best)
    scale = np.where(tiny, F32(0), scale).astype(F32)
    L = np.where(tiny[:, None], 0, L)
    return scale, L


def quantize_q6_k(x: np.ndarray) -> bytes:
    """f32 rows (cols a multiple of 256) -> Q6_K blocks (210 bytes per 256 weights)."""
    x = np.ascontiguousarray(x, dtype=F32)
    if x.shape[-1] % 256:
        raise ValueError(f"a Q6_K row of {x.shape[-1]} weights is not a whole number of 256-weight blocks")
    b = x.reshape(-1, 16, 16)
    nb = b.shape[0]
    scales, L = _fit_symmetric(b.reshape(-1, 16), 32)
    scales, L = scales.reshape(nb, 16), L.reshape(nb, 16, 16)
    a = np.abs(scales)
    pick = np.argmax(a, axis=1)
    max_scale = scales[np.arange(nb), pick]
    zero = a[np.arange(nb), pick] < GROUP_MAX_EPS
    ms = np.where(zero, F32(1), max_scale).astype(F32)
    iscale = (F32(-128) / ms).astype(F32)
    d = np.where(zero, np.float16(0), _f16(F32(1) / iscale))
    sc = np.where(zero[:, None], 0, np.minimum(127, _nearest(iscale[:, None] * scales))).astype(np.int8)
    dj = (d.astype(F32)[:, None] * sc.astype(F32)).astype(F32)
    nz = dj != 0
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(_nearest((b / np.where(nz, dj, F32(1))[..., None]).astype(F32)), -32, 31) + 32
    L = np.where(nz[..., None], q, L)
    L = np.where(zero[:, None, None], 0, L).reshape(nb, 2, 4, 32).astype(np.uint8)  # [half, quarter, 32]
    lo = L & 15
    hi = L >> 4
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=2).reshape(nb, 128)
    qh = (hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)).reshape(nb, 64)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(nb, 2)], axis=1)
    return out.tobytes()
