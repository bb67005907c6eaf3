"""Per-op consistency test (in the spirit of ggml's test-backend-ops).

Every op x every registered backend x every weight format the backend supports, on random
shapes and on the real model shapes, against a NumPy reference (float64); plus batch
invariance per op: a row's result is bit-identical whatever the window size T in 1..16, the
other rows and the thread count. Backends and formats are discovered from the engine
(`strata._engine.ops`): registering a new one needs no change here, only a row in TOLERANCE
when its error differs from the fallback row.
"""
from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

E = pytest.importorskip("strata._engine")
ops = E.ops

BACKENDS = ops.backends()
FORMATS = {name: dict(block=be, nbytes=bb, quantized=q) for name, be, bb, q in ops.formats()}

# Largest error allowed, per backend and op, as a fraction of the op's error scale (see each
# op's `scale`: |x|.|w| for products, the magnitude of the result elsewhere). "exact" ops
# (copies, conversions, index selection) must match bit for bit on every backend.
TOLERANCE = {
    "cpu": {"default": 1e-6},  # measured worst: 4.4e-7 (router_topk), most ops 0.3-3e-7
    # measured on lavapipe (Mesa 22.3 llvmpipe): worst 7.3e-7 (swiglu), 5.5e-7 (router_topk),
    # 4.9e-7 (gated_rmsnorm, gdn_inputs), most ops 0.3-3.4e-7; re-measure on a real GPU
    "webgpu": {"default": 2e-6},
    # backends without a row of their own (a new one starts here; write its measured row above)
    "*": {"default": 1e-4, "gdn_step": 5e-4, "attention": 5e-4},
}
EXACT_OPS = {"gather", "add", "copy"}
# quantized formats: the error of the dequantised product against gguf's dequantisation
# (measured, matmul of the int8 activations each format's kernel sees: worst 5.5e-8 on cpu, 5.4e-8
# on webgpu/lavapipe, whose activation blocks are the cpu's bit for bit)
QUANT_TOLERANCE = 2e-5

# Real model shapes: the anchor checkpoints (devmodel "bench" preset: hidden 512, 64 experts
# top-4) and Qwen3-Next-80B-A3B (hidden 2048, 512 experts top-10, expert width 512).
MODELS = {
    "anchor": dict(hidden=512, experts=64, top_k=4, expert_inter=128, shared_inter=256, heads=8, kv=2,
                   head_dim=64, rot_half=16, nk=4, nv=8, dk=64, dv=64, conv_k=4),
    "qwen3_next_80b": dict(hidden=2048, experts=512, top_k=10, expert_inter=512, shared_inter=512, heads=16,
                           kv=2, head_dim=256, rot_half=32, nk=16, nv=32, dk=128, dv=128, conv_k=4),
}


def tolerance(backend: str, op: str) -> float:
    row = TOLERANCE.get(backend, TOLERANCE["*"])
    return row.get(op, row["default"])


# ---------------------------------------------------------------------------------------------
# weight formats: encode a float matrix in a format; decode it back the way the format defines


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


# byte offsets of the f16 scales inside one block (random bytes elsewhere are valid data)
# a format not listed keeps its one f16 scale first, as Q8_0 / Q5_0 / IQ4_XS do
_QUANT_SCALES = {"Q4_K": [0, 2], "Q5_K": [0, 2], "Q5_1": [0, 2], "Q6_K": [208]}


def make_weights(rng, fmt: str, rows: int, cols: int):
    """(stored bytes as a numpy array, the f64 matrix they decode to)."""
    if fmt == "F32":
        w = rng.standard_normal((rows, cols)).astype(np.float32)
        return w, w.astype(np.float64)
    if fmt == "BF16":
        bits = _bf16_bits(rng.standard_normal((rows, cols)))
        return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if fmt == "F16":
        w = rng.standard_normal((rows, cols)).astype(np.float16)
        return w, w.astype(np.float64)
    gguf = pytest.importorskip("gguf")
    from gguf import quants  # noqa: PLC0415

    info = FORMATS[fmt]
    nblk = cols // info["block"]
    raw = rng.integers(0, 256, (rows, nblk, info["nbytes"]), dtype=np.uint8)
    for off in _QUANT_SCALES.get(fmt, [0]):
        d = rng.uniform(0.002, 0.02, (rows, nblk)).astype(np.float16)
        raw[:, :, off:off + 2] = d.view(np.uint8).reshape(rows, nblk, 2)
    raw = raw.reshape(rows, nblk * info["nbytes"])
    deq = quants.dequantize(raw, getattr(gguf.GGMLQuantizationType, fmt))
    return raw, deq.reshape(rows, cols).astype(np.float64)


def activations_seen(fmt: str, x: np.ndarray) -> np.ndarray:
    """The input rows a format's matmul computes with: the GGUF block formats quantize each row
    to int8 per block of 32 or 256 values as llama.cpp's CPU backend does (gguf_helpers)."""
    from strata import _engine  # noqa: PLC0415

    block = _engine.quant_activation_block(fmt) if fmt in _engine.quant_formats() else 0
    if not block:
        return x.astype(np.float64)
    from gguf_helpers import ggml_activation_blocks  # noqa: PLC0415

    q, d = ggml_activation_blocks(x.reshape(-1, block), block)
    return (q.astype(np.float64) * d.astype(np.float64)[:, None]).reshape(x.shape)


def block_sum_correction(fmt: str, x: np.ndarray, raw: np.ndarray, rows: int):
    """Q5_1 with int8 activations (llama.cpp's Q5_1 x Q8_1): each block's min multiplies the
    activation block's Q8_1 sum s = f16(amax/127 x sum of q), where activations_seen's rows give
    d x sum of q. Returns what that adds to x_seen @ W.T, (T, rows); 0 for every other format."""
    from strata import _engine  # noqa: PLC0415

    if fmt not in _engine.quant_formats() or not _engine.quant_activation_sums(fmt):
        return 0.0
    assert fmt == "Q5_1", fmt  # the min's place (bytes 2-3 of 24) is Q5_1's
    from gguf_helpers import ggml_activation_blocks  # noqa: PLC0415

    q, d, s = ggml_activation_blocks(x.reshape(-1, 32), 32, sums=True)
    diff = (s.astype(np.float64) - d.astype(np.float64) * q.astype(np.float64).sum(axis=1)).reshape(len(x), -1)
    mins = np.ascontiguousarray(raw.reshape(rows, -1, 24)[:, :, 2:4]).view(np.float16)[..., 0]
    return diff @ mins.astype(np.float64).T


def supported_formats(backend: str, op: str) -> list[str]:
    return [f for f in FORMATS if ops.supports(backend, op, f)]


# ---------------------------------------------------------------------------------------------
# op specs: inputs, the numpy reference, the error scale, and how rows relate (for invariance)
#   rows: "independent" (row r depends on row r only), "positional" (and on its position p0+r),
#   "causal" (and on the rows before it)


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _f(a):
    return np.asarray(a, dtype=np.float32)


class Spec:
    name: str = ""
    rows = "independent"
    row_args: tuple[str, ...] = ()
    row_outputs: tuple[int, ...] = (0,)
    uses_format = False

    def cases(self, rng):
        """(label, dims) pairs: random shapes and the real model shapes."""
        raise NotImplementedError

    def make(self, rng, dims, T, fmt):
        """(kwargs for ops.<name>, context for the reference)."""
        raise NotImplementedError

    def reference(self, kw, ctx):
        """(list of f64 outputs, list of error scales)."""
        raise NotImplementedError


class Embed(Spec):
    name = "embed"
    row_args = ("ids",)
    uses_format = True

    def cases(self, rng):
        return [("random", dict(vocab=int(rng.integers(5, 40)), cols=256)),
                ("anchor", dict(vocab=300, cols=512)), ("qwen3_next_80b", dict(vocab=64, cols=2048))]

    def make(self, rng, d, T, fmt):
        raw, deq = make_weights(rng, fmt, d["vocab"], d["cols"])
        return dict(w=raw, format=fmt, rows=d["vocab"], cols=d["cols"],
                    ids=rng.integers(0, d["vocab"], T).astype(np.int32)), dict(deq=deq)

    def reference(self, kw, ctx):
        out = ctx["deq"][kw["ids"]]
        return [out], [0 * out]


class Matmul(Spec):
    name = "matmul"
    row_args = ("x",)
    uses_format = True

    def cases(self, rng):
        out = [("random", dict(rows=int(rng.integers(1, 70)), cols=256 * int(rng.integers(1, 3)), bias=True)),
               ("random-odd", dict(rows=int(rng.integers(1, 40)), cols=int(rng.integers(1, 100)), bias=False))]
        for m, s in MODELS.items():
            out += [(f"{m}-router", dict(rows=s["experts"], cols=s["hidden"], bias=False)),
                    (f"{m}-expert-up", dict(rows=s["expert_inter"], cols=s["hidden"], bias=False)),
                    (f"{m}-expert-down", dict(rows=s["hidden"], cols=s["expert_inter"], bias=False))]
        return out

    def make(self, rng, d, T, fmt):
        cols = d["cols"]
        if FORMATS[fmt]["block"] > 1:
            cols = max(1, cols // FORMATS[fmt]["block"]) * FORMATS[fmt]["block"]
        raw, deq = make_weights(rng, fmt, d["rows"], cols)
        kw = dict(x=_f(rng.standard_normal((T, cols))), w=raw, format=fmt, rows=d["rows"], cols=cols)
        if d["bias"]:
            kw["bias"] = _f(rng.standard_normal(d["rows"]))
        return kw, dict(deq=deq)

    def reference(self, kw, ctx):
        x = activations_seen(kw["format"], kw["x"])
        y = x @ ctx["deq"].T + block_sum_correction(kw["format"], kw["x"], kw["w"], kw["rows"])
        scale = np.abs(x) @ np.abs(ctx["deq"]).T
        if "bias" in kw:
            y = y + kw["bias"]
            scale = scale + np.abs(kw["bias"])
        return [y], [scale]


def _rms(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


class RmsNorm(Spec):
    name = "rmsnorm"
    row_args = ("x",)

    def cases(self, rng):
        return [("random", dict(heads=int(rng.integers(1, 5)), dim=int(rng.integers(1, 70)))),
                ("anchor-hidden", dict(heads=1, dim=512)), ("qwen3_next_80b-hidden", dict(heads=1, dim=2048)),
                ("qwen3_next_80b-qnorm", dict(heads=16, dim=256))]

    def make(self, rng, d, T, fmt):
        return dict(x=_f(rng.standard_normal((T, d["heads"], d["dim"])) * 3),
                    w=_f(1 + 0.1 * rng.standard_normal(d["dim"])), eps=1e-6), {}

    def reference(self, kw, ctx):
        out = _rms(kw["x"], kw["w"], kw["eps"])
        return [out], [np.abs(out) + 1e-30]


class GatedRmsNorm(Spec):
    name = "gated_rmsnorm"
    row_args = ("x", "z")

    def cases(self, rng):
        return [("random", dict(heads=int(rng.integers(1, 5)), dim=int(rng.integers(1, 70)))),
                ("anchor", dict(heads=8, dim=64)), ("qwen3_next_80b", dict(heads=32, dim=128))]

    def make(self, rng, d, T, fmt):
        shape = (T, d["heads"], d["dim"])
        return dict(x=_f(rng.standard_normal(shape)), z=_f(rng.standard_normal(shape) * 2),
                    w=_f(1 + 0.1 * rng.standard_normal(d["dim"])), eps=1e-6), {}

    def reference(self, kw, ctx):
        z = kw["z"].astype(np.float64)
        out = _rms(kw["x"], kw["w"], kw["eps"]) * z * _sig(z)
        return [out], [np.abs(out) + 1e-30]


def _inv_freq(half: int, theta: float = 10000.0) -> np.ndarray:
    rot = 2 * half
    return (np.float32(1.0) / np.power(np.float32(theta), np.arange(0, rot, 2, dtype=np.float32) / np.float32(rot))
            ).astype(np.float32)


class Rotary(Spec):
    name = "rotary"
    rows = "positional"
    row_args = ("x",)

    def cases(self, rng):
        return [("random", dict(heads=int(rng.integers(1, 5)), dim=16, half=int(rng.integers(1, 9)), p0=int(rng.integers(0, 5000)))),
                ("anchor", dict(heads=8, dim=64, half=16, p0=300)),
                ("qwen3_next_80b", dict(heads=16, dim=256, half=32, p0=30000))]

    def make(self, rng, d, T, fmt):
        return dict(x=_f(rng.standard_normal((T, d["heads"], d["dim"]))), p0=d["p0"],
                    inv_freq=_inv_freq(d["half"])), {}

    def reference(self, kw, ctx):
        x = kw["x"].astype(np.float64)
        half = len(kw["inv_freq"])
        pos = (np.arange(x.shape[0]) + kw["p0"]).astype(np.float32)
        ang = (pos[:, None] * kw["inv_freq"][None, :]).astype(np.float64)  # f32 angles, like the reference
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        x1, x2 = x[..., :half], x[..., half:2 * half]
        out[..., :half] = x1 * c - x2 * s
        out[..., half:2 * half] = x2 * c + x1 * s
        return [out], [np.abs(x1).max() + np.abs(x2).max() + 0 * out]


class Attention(Spec):
    name = "attention"
    rows = "positional"
    row_args = ("q", "gate")

    def cases(self, rng):
        out = [("random", dict(heads=4, kv=int(rng.choice([1, 2, 4])), head_dim=int(rng.integers(1, 40)),
                               p0=int(rng.integers(0, 40)), gate=bool(rng.integers(0, 2))))]
        for m, s in MODELS.items():
            out.append((m, dict(heads=s["heads"], kv=s["kv"], head_dim=s["head_dim"], p0=70, gate=True)))
        return out

    def make(self, rng, d, T, fmt):
        cells = d["p0"] + max(T, 16) + 4  # room for 16 rows at p0 (the invariance test shifts p0)
        hd = d["head_dim"]
        kw = dict(q=_f(rng.standard_normal((T, d["heads"], hd))),
                  k_cells=_f(rng.standard_normal((cells, d["kv"], hd))),
                  v_cells=_f(rng.standard_normal((cells, d["kv"], hd))), p0=d["p0"], scale=1.0 / math.sqrt(hd))
        if d["gate"]:
            kw["gate"] = _f(rng.standard_normal((T, d["heads"], hd)))
        return kw, {}

    def reference(self, kw, ctx):
        q = kw["q"].astype(np.float64)
        k, v = kw["k_cells"].astype(np.float64), kw["v_cells"].astype(np.float64)
        n, nh, hd = q.shape
        rep = nh // k.shape[1]
        out = np.zeros_like(q)
        scale = np.zeros_like(q)
        for t in range(n):
            p = kw["p0"] + t
            for h in range(nh):
                g = h // rep
                sc = (k[:p + 1, g] @ q[t, h]) * kw["scale"]
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                out[t, h] = pr @ v[:p + 1, g]
                scale[t, h] = np.abs(v[:p + 1, g]).max()
        if "gate" in kw:
            gt = _sig(kw["gate"].astype(np.float64))
            out, scale = out * gt, scale * gt
        return [out], [scale]


class CausalConv(Spec):
    name = "causal_conv"
    rows = "causal"
    row_args = ("x",)

    def cases(self, rng):
        out = [("random", dict(channels=int(rng.integers(1, 90)), K=int(rng.integers(1, 6))))]
        for m, s in MODELS.items():
            out.append((m, dict(channels=2 * s["nk"] * s["dk"] + s["nv"] * s["dv"], K=s["conv_k"])))
        return out

    def make(self, rng, d, T, fmt):
        C, K = d["channels"], d["K"]
        return dict(x=_f(rng.standard_normal((T, C))), hist=_f(rng.standard_normal((K - 1, C))),
                    w=_f(rng.standard_normal((C, K)) * 0.5)), {}

    def reference(self, kw, ctx):
        x = np.concatenate([kw["hist"], kw["x"]]).astype(np.float64)
        w = kw["w"].astype(np.float64)
        K = w.shape[1]
        T = kw["x"].shape[0]
        acc = np.stack([(x[t:t + K].T * w).sum(axis=1) for t in range(T)])
        mag = np.stack([(np.abs(x[t:t + K].T) * np.abs(w)).sum(axis=1) for t in range(T)])
        return [acc * _sig(acc)], [mag]


@pytest.mark.parametrize("backend", BACKENDS)
def test_causal_conv_reads_strided_rows_and_keeps_them(backend):
    # the GDN layer's conv input is the first C lanes of wider projection rows (read in place on
    # the GPU), and the window keeps those rows packed for its fold (ConvArgs::x_rows, written by
    # the conv itself): the output equals the packed input's, the kept rows equal the input
    rng = np.random.default_rng(zlib.crc32(f"conv-strided/{backend}".encode()))
    T, C, K, W = 5, 40, 4, 57
    wide = _f(rng.standard_normal((T, W)))
    hist, w = _f(rng.standard_normal((K - 1, C))), _f(rng.standard_normal((C, K)) * 0.5)
    packed = np.ascontiguousarray(wide[:, :C])
    want = ops.causal_conv(backend, packed, hist, w)
    out, rows = ops.causal_conv(backend, wide, hist, w, keep_x=True)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(rows, packed)
    np.testing.assert_array_equal(ops.causal_conv(backend, wide, hist, w), want)


def _softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


class GdnInputs(Spec):
    name = "gdn_inputs"
    row_args = ("conv", "b", "a")
    row_outputs = (0, 1, 2, 3, 4)

    def cases(self, rng):
        out = [("random", dict(nk=int(rng.integers(1, 3)), r=int(rng.integers(1, 3)), dk=int(rng.integers(1, 20)),
                               dv=int(rng.integers(1, 20))))]
        for m, s in MODELS.items():
            out.append((m, dict(nk=s["nk"], r=s["nv"] // s["nk"], dk=s["dk"], dv=s["dv"])))
        return out

    def make(self, rng, d, T, fmt):
        nk, dk, dv = d["nk"], d["dk"], d["dv"]
        nv = nk * d["r"]
        cd = 2 * nk * dk + nv * dv
        return dict(conv=_f(rng.standard_normal((T, cd))), b=_f(rng.standard_normal((T, nv))),
                    a=_f(rng.standard_normal((T, nv)) * 3), A=_f(-np.exp(rng.standard_normal(nv))),
                    dt_bias=_f(rng.standard_normal(nv)), n_k=nk, d_k=dk, d_v=dv), {}

    def reference(self, kw, ctx):
        c = kw["conv"].astype(np.float64)
        n, nk, dk, dv = c.shape[0], kw["n_k"], kw["d_k"], kw["d_v"]
        kd = nk * dk
        q = c[:, :kd].reshape(n, nk, dk)
        k = c[:, kd:2 * kd].reshape(n, nk, dk)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / math.sqrt(dk)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        v = c[:, 2 * kd:]
        g = kw["A"].astype(np.float64) * _softplus(kw["a"].astype(np.float64) + kw["dt_bias"])
        dec = np.exp(g)
        beta = _sig(kw["b"].astype(np.float64))
        outs = [q.reshape(n, kd), k.reshape(n, kd), v, dec, beta]
        scales = [np.abs(o) + 1e-30 for o in outs]
        scales[3] = dec * (1 + np.abs(g))  # exp amplifies the f32 error of its argument
        return outs, scales


class GdnStep(Spec):
    name = "gdn_step"
    rows = "causal"
    row_args = ("q", "k", "v", "decay", "beta")
    row_outputs = (1,)

    def cases(self, rng):
        out = [("random", dict(nk=int(rng.integers(1, 3)), r=int(rng.integers(1, 3)), dk=int(rng.integers(1, 20)),
                               dv=int(rng.integers(1, 20))))]
        for m, s in MODELS.items():
            out.append((m, dict(nk=s["nk"], r=s["nv"] // s["nk"], dk=s["dk"], dv=s["dv"])))
        return out

    def make(self, rng, d, T, fmt):
        nk, dk, dv = d["nk"], d["dk"], d["dv"]
        nv = nk * d["r"]

        def unit(shape):
            x = rng.standard_normal(shape)
            return _f(x / np.linalg.norm(x, axis=-1, keepdims=True))

        return dict(S0=_f(rng.standard_normal((nv, dk, dv)) * 0.3), q=unit((T, nk, dk)).reshape(T, nk * dk) / math.sqrt(dk),
                    k=unit((T, nk, dk)).reshape(T, nk * dk), v=_f(rng.standard_normal((T, nv * dv))),
                    decay=_f(rng.uniform(0.5, 1.0, (T, nv))), beta=_f(rng.uniform(0.0, 1.0, (T, nv))), n_k=nk), {}

    def reference(self, kw, ctx):
        S = kw["S0"].astype(np.float64).copy()
        nv, dk, dv = S.shape
        nk = kw["n_k"]
        T = kw["q"].shape[0]
        q = kw["q"].astype(np.float64).reshape(T, nk, dk)
        k = kw["k"].astype(np.float64).reshape(T, nk, dk)
        v = kw["v"].astype(np.float64).reshape(T, nv, dv)
        out = np.zeros((T, nv, dv))
        r = nv // nk
        for t in range(T):
            for h in range(nv):
                g = h // r
                S[h] *= kw["decay"][t, h]
                delta = (v[t, h] - k[t, g] @ S[h]) * kw["beta"][t, h]
                S[h] += np.outer(k[t, g], delta)
                out[t, h] = q[t, g] @ S[h]
        mag_S = np.abs(S).max() + np.abs(v).max()
        return [S, out.reshape(T, nv * dv)], [mag_S + 0 * S, mag_S + 0 * out.reshape(T, nv * dv)]


class RouterTopk(Spec):
    name = "router_topk"
    row_args = ("logits",)
    row_outputs = (0, 1)

    def cases(self, rng):
        out = [("random", dict(E=int(rng.integers(2, 40)), renorm=bool(rng.integers(0, 2))))]
        for m, s in MODELS.items():
            out.append((m, dict(E=s["experts"], k=s["top_k"], renorm=True)))
        return out

    def make(self, rng, d, T, fmt):
        k = d.get("k") or int(rng.integers(1, d["E"] + 1))
        return dict(logits=_f(rng.standard_normal((T, d["E"])) * 2), k=k, renormalize=d["renorm"]), {}

    def reference(self, kw, ctx):
        lg = kw["logits"].astype(np.float64)
        p = np.exp(lg - lg.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        idx = np.argsort(-p, axis=-1, kind="stable")[:, :kw["k"]]
        w = np.take_along_axis(p, idx, -1)
        if kw["renormalize"]:
            w = w / w.sum(-1, keepdims=True)
        return [idx, w], [0 * w, w + 1e-30]


class Gather(Spec):
    name = "gather"
    row_args = ("idx",)

    def cases(self, rng):
        return [("random", dict(m=int(rng.integers(1, 30)), cols=int(rng.integers(1, 100)))),
                ("qwen3_next_80b", dict(m=16, cols=2048))]

    def make(self, rng, d, T, fmt):
        return dict(src=_f(rng.standard_normal((d["m"], d["cols"]))),
                    idx=rng.integers(0, d["m"], T).astype(np.int32)), {}

    def reference(self, kw, ctx):
        out = kw["src"][kw["idx"]].astype(np.float64)
        return [out], [0 * out]


class SwiGlu(Spec):
    name = "swiglu"
    row_args = ("g", "u")

    def cases(self, rng):
        return [("random", dict(n=int(rng.integers(1, 100)))), ("anchor", dict(n=128)), ("qwen3_next_80b", dict(n=512))]

    def make(self, rng, d, T, fmt):
        return dict(g=_f(rng.standard_normal((T, d["n"])) * 3), u=_f(rng.standard_normal((T, d["n"])))), {}

    def reference(self, kw, ctx):
        g, u = kw["g"].astype(np.float64), kw["u"].astype(np.float64)
        out = g * _sig(g) * u
        return [out], [np.abs(out) + 1e-30]


class MoeCombine(Spec):
    name = "moe_combine"
    row_args = ("slot", "w", "shared", "shared_gate")

    def cases(self, rng):
        out = [("random", dict(k=int(rng.integers(1, 5)), H=int(rng.integers(1, 80)), shared=bool(rng.integers(0, 2))))]
        for m, s in MODELS.items():
            out.append((m, dict(k=s["top_k"], H=s["hidden"], shared=True)))
        return out

    def make(self, rng, d, T, fmt):
        k, H = d["k"], d["H"]
        slots = 40
        kw = dict(D=_f(rng.standard_normal((slots, H))), slot=rng.integers(0, slots, (T, k)).astype(np.int32),
                  w=_f(rng.uniform(0, 1, (T, k))))
        if d["shared"]:
            kw["shared"] = _f(rng.standard_normal((T, H)))
            kw["shared_gate"] = _f(rng.standard_normal(T))
        return kw, {}

    def reference(self, kw, ctx):
        D = kw["D"].astype(np.float64)
        w = kw["w"].astype(np.float64)
        out = (D[kw["slot"]] * w[..., None]).sum(1)
        mag = (np.abs(D[kw["slot"]]) * w[..., None]).sum(1)
        if "shared" in kw:
            gs = _sig(kw["shared_gate"].astype(np.float64))[:, None]
            out = out + gs * kw["shared"]
            mag = mag + gs * np.abs(kw["shared"])
        return [out], [mag]


class Add(Spec):
    name = "add"
    row_args = ("x", "y")

    def cases(self, rng):
        return [("random", dict(n=int(rng.integers(1, 100)))), ("qwen3_next_80b", dict(n=2048))]

    def make(self, rng, d, T, fmt):
        return dict(x=_f(rng.standard_normal((T, d["n"]))), y=_f(rng.standard_normal((T, d["n"])))), {}

    def reference(self, kw, ctx):
        out = (kw["x"] + kw["y"]).astype(np.float64)  # one f32 rounding: the exact result
        return [out], [0 * out]


class Copy(Spec):
    name = "copy"
    row_args = ("src",)

    def cases(self, rng):
        return [("random", dict(heads=int(rng.integers(1, 5)), dim=int(rng.integers(1, 70)))),
                ("anchor", dict(heads=8, dim=64))]

    def make(self, rng, d, T, fmt):
        return dict(src=_f(rng.standard_normal((T, d["heads"] * d["dim"]))), heads=d["heads"]), {}

    def reference(self, kw, ctx):
        out = kw["src"].astype(np.float64)
        return [out], [0 * out]


SPECS = {s.name: s for s in (Embed(), Matmul(), RmsNorm(), GatedRmsNorm(), Rotary(), Attention(), CausalConv(),
                             GdnInputs(), GdnStep(), RouterTopk(), Gather(), SwiGlu(), MoeCombine(), Add(), Copy())}


def run(backend: str, spec: Spec, kw: dict, threads: int = 1) -> list[np.ndarray]:
    out = getattr(ops, spec.name)(backend, threads=threads, **kw)
    return list(out) if isinstance(out, tuple) else [out]


def _params():
    for backend in BACKENDS:
        for name, spec in SPECS.items():
            if not ops.supports(backend, name):
                continue
            fmts = supported_formats(backend, name) if spec.uses_format else ["F32"]
            for fmt in fmts:
                yield pytest.param(backend, name, fmt, id=f"{backend}-{name}-{fmt}")


PARAMS = list(_params())
# ops with a prefill mode (Backend::set_prefill: faster kernels for many rows, tolerance only)
PREFILL_OPS = {"matmul", "attention"}
MODES = [pytest.param(*p.values, False, id=p.id + "-exact") for p in PARAMS] + [
    pytest.param(*p.values, True, id=p.id + "-prefill") for p in PARAMS if p.values[1] in PREFILL_OPS]


def test_every_op_is_specified():
    # an op added to the backend interface must get a spec (and a reference) here
    assert sorted(ops.op_names()) == sorted(SPECS)


@pytest.mark.parametrize("backend,name,fmt,prefill", MODES)
def test_op_matches_numpy(backend, name, fmt, prefill):
    spec = SPECS[name]
    rng = np.random.default_rng(zlib.crc32(f"{backend}/{name}/{fmt}/{prefill}".encode()))
    tol = QUANT_TOLERANCE if FORMATS[fmt]["quantized"] else tolerance(backend, name)
    for label, dims in spec.cases(rng):
        for T in ((17, 40) if prefill else (1, 5)):
            kw, ctx = spec.make(rng, dims, T, fmt)
            if prefill:
                kw["prefill"] = True
            got = run(backend, spec, kw, threads=2)
            want, scale = spec.reference(kw, ctx)
            for i, (g, w, s) in enumerate(zip(got, want, scale)):
                assert g.shape == w.shape, f"{label} T={T} output {i}: shape {g.shape} != {w.shape}"
                if name in EXACT_OPS or g.dtype.kind == "i":
                    np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=f"{label} T={T} output {i}")
                    continue
                err = np.abs(g.astype(np.float64) - w)
                bound = tol * np.maximum(s, np.finfo(np.float32).tiny)
                if name == "embed" and not FORMATS[fmt]["quantized"]:
                    bound = 0 * bound  # a float conversion is exact
                worst = np.unravel_index(np.argmax(err - bound), err.shape)
                assert np.all(err <= bound), (
                    f"{backend} {name} {fmt} {label} T={T} output {i}: error {err[worst]:.3g} at {worst} "
                    f"> {bound[worst]:.3g} (tolerance {tol} x scale {s[worst]:.3g})")


@pytest.mark.parametrize("backend,name,fmt", PARAMS)
def test_batch_invariance(backend, name, fmt):
    """Row r's output is bit-identical for every T in 1..16, any other rows, any thread count."""
    spec = SPECS[name]
    rng = np.random.default_rng(zlib.crc32(f"invariance/{backend}/{name}/{fmt}".encode()))
    cases = spec.cases(rng)
    for label, dims in (cases[0], cases[-1]):
        if spec.rows == "causal":
            _prefix_stable(backend, spec, label, dims, fmt, rng)
        else:
            _rows_independent(backend, spec, label, dims, fmt, rng)


def _prefix_stable(backend, spec, label, dims, fmt, rng):
    """Causal ops: rows 0..T-1 are the same whether the window has T rows or 16."""
    full, _ = spec.make(np.random.default_rng(7), dims, 16, fmt)
    ref = run(backend, spec, full)
    for T in range(1, 17):
        kw = dict(full)
        for a in spec.row_args:
            kw[a] = np.ascontiguousarray(full[a][:T])
        got = run(backend, spec, kw, threads=int(rng.integers(1, 3)))
        for i in spec.row_outputs:
            np.testing.assert_array_equal(got[i], ref[i][:T], err_msg=f"{label}: T={T} output {i}")


def _rows_independent(backend, spec, label, dims, fmt, rng):
    """The 1-row window is the reference; row r of a T-row window (random other rows, same shared
    inputs such as weights, same absolute position for positional ops) must equal it."""
    dims = dict(dims)
    if spec.rows == "positional":
        dims["p0"] = max(dims["p0"], 16)  # so that row r can sit at p0 - r
    one, _ = spec.make(rng, dims, 1, fmt)
    base = run(backend, spec, one)
    for T in range(1, 17):
        fresh, _ = spec.make(rng, dims, T, fmt)
        for r in (rng.permutation(T)[:2] if T > 1 else [0]):
            kw = dict(one)
            for a in spec.row_args:
                if a in one:
                    arr = np.array(fresh[a], copy=True)
                    arr[r] = one[a][0]
                    kw[a] = arr
            if spec.rows == "positional":
                kw["p0"] = one["p0"] - int(r)
            got = run(backend, spec, kw, threads=int(rng.integers(1, 3)))
            for i in spec.row_outputs:
                np.testing.assert_array_equal(got[i][r], base[i][0], err_msg=f"{label}: T={T} row {r} output {i}")


def test_unsupported_format_is_a_clear_error():
    for backend in BACKENDS:
        for fmt in FORMATS:
            if ops.supports(backend, "matmul", fmt):
                continue
            info = FORMATS[fmt]
            cols = info["block"] * 2
            raw = np.zeros((3, cols // info["block"] * info["nbytes"]), np.uint8)
            with pytest.raises(ValueError, match=f"does not support matmul on {fmt}"):
                ops.matmul(backend, np.zeros((1, cols), np.float32), raw, fmt, 3, cols)


def test_cpu_support_table():
    # the float formats the engine stores in memory; quantized ones join by registering kernels
    assert ops.supports("cpu", "matmul", "F32") and ops.supports("cpu", "matmul", "BF16")
    assert ops.supports("cpu", "embed", "F16")
    assert "cpu" in BACKENDS


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown weight format 'Q9_9'"):
        ops.supports("cpu", "matmul", "Q9_9")
    with pytest.raises(ValueError, match="unknown op"):
        ops.supports("cpu", "conv3d")
    with pytest.raises(ValueError, match="unknown backend 'nope'"):
        ops.add("nope", np.zeros(2, np.float32), np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="bytes given"):
        ops.matmul("cpu", np.zeros((1, 4), np.float32), np.zeros((2, 3), np.float32), "F32", 2, 4)


def test_engine_refuses_a_format_its_backend_cannot_compute(tmp_path):
    """A model whose matrix is stored in a format without kernels is refused at load, naming it."""
    import strata  # noqa: PLC0415
    from strata import config, model  # noqa: PLC0415
    from strata.testing.devmodel import write_random_model  # noqa: PLC0415
    from strata.errors import ModelError  # noqa: PLC0415
    from strata.safetensors_io import checkpoint_files, read_header  # noqa: PLC0415

    missing = [f for f, info in FORMATS.items()
               if info["quantized"] and info["block"] <= 64 and not ops.supports("cpu", "matmul", f)]
    if not missing:
        pytest.skip("the cpu backend computes every small-block format")
    fmt = missing[0]
    path = write_random_model(tmp_path / "m", arch="qwen3_moe", seed=1)  # hidden 64
    _, spec = config.read_config(path)
    infos = [t for f in checkpoint_files(path) for t in read_header(f).values()]
    table = model.tensor_table(spec, infos)
    rows = [(name, t.path, t.offset, t.dtype, list(t.shape)) for name, t in table.items()]
    target = "layers.0.self_attn.o_proj.weight"
    rows = [(n, p, o, fmt if n == target else d, s) for n, p, o, d, s in rows]
    with pytest.raises(ModelError, match=f"tensor {target} is stored as {fmt}, which the cpu backend cannot"):
        E.Engine(spec, rows, threads=1)
    assert strata.load(path, threads=1).vocab_size > 0  # the same model in f32 loads


# ---------------------------------------------------------------------------------------------
# composite ops a backend may fuse (Backend::add_rmsnorm, Backend::copy_many,
# Backend::swiglu_matmul): each must equal
# its plain ops in sequence bit for bit, on host arrays and on arrays attached to the backend
# (where the webgpu backend runs its one-dispatch path, as in the engine)


@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_add_rmsnorm_equals_add_then_rmsnorm(backend, attached):
    rng = np.random.default_rng(zlib.crc32(f"add_rmsnorm/{backend}/{attached}".encode()))
    for rows, dim in ((1, 64), (5, 33), (3, 512), (2, 2048)):
        x = _f(rng.standard_normal((rows, dim)) * 2)
        y = _f(rng.standard_normal((rows, dim)))
        w = _f(1 + 0.1 * rng.standard_normal(dim))
        total, normed = ops.add_rmsnorm(backend, x, y, w, 1e-6, attached=attached)
        want_total = ops.add(backend, x, y)
        np.testing.assert_array_equal(total, want_total, err_msg=f"{rows}x{dim} sum")
        want = ops.rmsnorm(backend, want_total.reshape(rows, 1, dim), w, 1e-6).reshape(rows, dim)
        np.testing.assert_array_equal(normed, want, err_msg=f"{rows}x{dim} norm")
        ref = _rms(want_total.reshape(rows, 1, dim).astype(np.float64), w, 1e-6).reshape(rows, dim)
        assert np.all(np.abs(normed - ref) <= tolerance(backend, "rmsnorm") * (np.abs(ref) + 1e-30))


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_rmsnorm_rows_are_batch_invariant(backend):
    rng = np.random.default_rng(zlib.crc32(f"add_rmsnorm-rows/{backend}".encode()))
    dim = 512
    x1, y1 = _f(rng.standard_normal((1, dim))), _f(rng.standard_normal((1, dim)))
    w = _f(1 + 0.1 * rng.standard_normal(dim))
    base = ops.add_rmsnorm(backend, x1, y1, w, 1e-6, attached=True)
    for T in range(1, 17):
        x, y = _f(rng.standard_normal((T, dim))), _f(rng.standard_normal((T, dim)))
        r = int(rng.integers(0, T))
        x[r], y[r] = x1[0], y1[0]
        got = ops.add_rmsnorm(backend, x, y, w, 1e-6, attached=True)
        for i in range(2):
            np.testing.assert_array_equal(got[i][r], base[i][0], err_msg=f"T={T} row {r} output {i}")


@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("fmt", ["BF16", "F16", "F32"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_swiglu_matmul_equals_swiglu_then_matmul(backend, fmt, attached):
    # attached, on webgpu (half-precision rows): the SwiGLU folded into the matmul's reads of x
    if not ops.supports(backend, "matmul", fmt):
        pytest.skip(f"{backend} has no {fmt} matmul")
    rng = np.random.default_rng(zlib.crc32(f"swiglu_matmul/{backend}/{fmt}/{attached}".encode()))
    for T, n, rows in ((1, 64, 32), (5, 128, 64), (3, 512, 128), (9, 40, 16)):
        g, u = _f(rng.standard_normal((T, n)) * 3), _f(rng.standard_normal((T, n)))
        raw, _ = make_weights(rng, fmt, rows, n)
        got = ops.swiglu_matmul(backend, g, u, raw, fmt, rows, attached=attached)
        want = ops.matmul(backend, ops.swiglu(backend, g, u), raw, fmt, rows, n)
        np.testing.assert_array_equal(got, want, err_msg=f"T={T} n={n} rows={rows}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_swiglu_matmul_rows_are_batch_invariant(backend):
    rng = np.random.default_rng(zlib.crc32(f"swiglu_matmul-rows/{backend}".encode()))
    n, rows = 256, 64
    raw, _ = make_weights(rng, "BF16", rows, n)
    g1, u1 = _f(rng.standard_normal((1, n))), _f(rng.standard_normal((1, n)))
    base = ops.swiglu_matmul(backend, g1, u1, raw, "BF16", rows, attached=True)
    for T in range(1, 17):
        g, u = _f(rng.standard_normal((T, n))), _f(rng.standard_normal((T, n)))
        r = int(rng.integers(0, T))
        g[r], u[r] = g1[0], u1[0]
        got = ops.swiglu_matmul(backend, g, u, raw, "BF16", rows, attached=True)
        np.testing.assert_array_equal(got[r], base[0], err_msg=f"T={T} row {r}")


@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_rmsnorm_rotary_equals_rmsnorm_then_rotary(backend, attached):
    rng = np.random.default_rng(zlib.crc32(f"rmsnorm_rotary/{backend}/{attached}".encode()))
    for rows, heads, dim, half, p0 in ((1, 4, 64, 32, 0), (5, 2, 128, 16, 37), (3, 1, 256, 32, 1000), (2, 3, 8, 4, 5)):
        x = _f(rng.standard_normal((rows, heads, dim)) * 2)
        w = _f(1 + 0.1 * rng.standard_normal(dim))
        inv = _f(10000.0 ** (-np.arange(half) / half))
        got = ops.rmsnorm_rotary(backend, x, w, 1e-6, p0, inv, attached=attached)
        want = ops.rotary(backend, ops.rmsnorm(backend, x, w, 1e-6), p0, inv)
        np.testing.assert_array_equal(got, want, err_msg=f"{rows}x{heads}x{dim} half {half}")


@pytest.mark.parametrize("shared", [False, True], ids=["routed", "shared"])
@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_moe_combine_add_rmsnorm_equals_the_two_ops(backend, attached, shared):
    rng = np.random.default_rng(zlib.crc32(f"moe_combine_add_rmsnorm/{backend}/{attached}/{shared}".encode()))
    for n, k, H in ((1, 2, 64), (5, 4, 96), (3, 10, 512)):
        D = _f(rng.standard_normal((n * k + 3, H)))
        slot = rng.permutation(n * k + 3)[: n * k].reshape(n, k).astype(np.int32)
        cw = _f(rng.random((n, k)))
        sh = _f(rng.standard_normal((n, H))) if shared else None
        sg = _f(rng.standard_normal(n)) if shared else None
        x = _f(rng.standard_normal((n, H)) * 2)
        w = _f(1 + 0.1 * rng.standard_normal(H))
        total, normed = ops.moe_combine_add_rmsnorm(backend, D, slot, cw, sh, sg, x, w, 1e-6, attached=attached)
        want_total, want = ops.add_rmsnorm(backend, x, ops.moe_combine(backend, D, slot, cw, sh, sg), w, 1e-6)
        np.testing.assert_array_equal(total, want_total, err_msg=f"n={n} k={k} H={H} sum")
        np.testing.assert_array_equal(normed, want, err_msg=f"n={n} k={k} H={H} norm")


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_norm_rows_are_batch_invariant(backend):
    # rmsnorm_rotary and moe_combine_add_rmsnorm: a row's values do not depend on T or the other rows
    rng = np.random.default_rng(zlib.crc32(f"fused-norm-rows/{backend}".encode()))
    heads, dim, half, H, k = 2, 128, 32, 256, 4
    w, nw = _f(1 + 0.1 * rng.standard_normal(dim)), _f(1 + 0.1 * rng.standard_normal(H))
    inv = _f(10000.0 ** (-np.arange(half) / half))
    x1 = _f(rng.standard_normal((1, heads, dim)))
    D1, c1 = _f(rng.standard_normal((k, H))), _f(rng.random((1, k)))
    s1, g1, r1 = _f(rng.standard_normal((1, H))), _f(rng.standard_normal(1)), _f(rng.standard_normal((1, H)))
    base_rot = ops.rmsnorm_rotary(backend, x1, w, 1e-6, 20, inv, attached=True)
    base = ops.moe_combine_add_rmsnorm(backend, D1, np.arange(k, dtype=np.int32).reshape(1, k), c1, s1, g1, r1, nw,
                                       1e-6, attached=True)
    for T in range(1, 17):
        r = int(rng.integers(0, T))
        x = _f(rng.standard_normal((T, heads, dim)))
        x[r] = x1[0]
        # the window starts at position 20 - r: row r at position 20, as in base_rot
        got = ops.rmsnorm_rotary(backend, x, w, 1e-6, 20 - r, inv, attached=True)
        np.testing.assert_array_equal(got[r], base_rot[0], err_msg=f"rmsnorm_rotary T={T} row {r}")
        D = _f(rng.standard_normal((T * k, H)))
        D[r * k:(r + 1) * k] = D1
        slot = np.arange(T * k, dtype=np.int32).reshape(T, k)
        cw, sh, sg, res = (_f(rng.random((T, k))), _f(rng.standard_normal((T, H))), _f(rng.standard_normal(T)),
                           _f(rng.standard_normal((T, H))))
        cw[r], sh[r], sg[r], res[r] = c1[0], s1[0], g1[0], r1[0]
        got = ops.moe_combine_add_rmsnorm(backend, D, slot, cw, sh, sg, res, nw, 1e-6, attached=True)
        for i in range(2):
            np.testing.assert_array_equal(got[i][r], base[i][0], err_msg=f"moe_combine_add_rmsnorm T={T} row {r} output {i}")


def _gdn_window(rng, T, nk, r, dk, dv):
    nv = nk * r
    cd = 2 * nk * dk + nv * dv
    return (_f(rng.standard_normal((T, cd))), _f(rng.standard_normal((T, nv))), _f(rng.standard_normal((T, nv)) * 3),
            _f(-np.exp(rng.standard_normal(nv))), _f(rng.standard_normal(nv)),
            _f(rng.standard_normal((nv, dk, dv)) * 0.1))


@pytest.mark.parametrize("in_place", [False, True], ids=["S0", "in-place"])
@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gdn_inputs_step_equals_the_two_ops(backend, attached, in_place):
    # the webgpu backend folds gdn_inputs into gdn_step (key head dims a multiple of 8; others
    # take the two ops): the state and outputs are the two ops' bit for bit
    rng = np.random.default_rng(zlib.crc32(f"gdn_inputs_step/{backend}/{attached}/{in_place}".encode()))
    for T, nk, r, dk, dv in ((1, 2, 2, 64, 64), (5, 1, 3, 16, 24), (3, 2, 1, 128, 128), (2, 1, 2, 12, 8),
                             (4, 16, 2, 128, 128)):
        conv, b, a, A, dt, S0 = _gdn_window(rng, T, nk, r, dk, dv)
        S, out = ops.gdn_inputs_step(backend, conv, b, a, A, dt, S0, nk, in_place=in_place, attached=attached)
        q, k, v, dec, beta = ops.gdn_inputs(backend, conv, b, a, A, dt, nk, dk, dv)
        want_S, want_out = ops.gdn_step(backend, S0, q, k, v, dec, beta, nk)
        np.testing.assert_array_equal(out, want_out, err_msg=f"T={T} {nk}x{r} dk {dk} dv {dv} out")
        np.testing.assert_array_equal(S, want_S, err_msg=f"T={T} {nk}x{r} dk {dk} dv {dv} state")


@pytest.mark.parametrize("backend", BACKENDS)
def test_gdn_inputs_step_rows_are_batch_invariant(backend):
    # row t of the fused GDN step depends on the state and rows 0..t only, whatever T
    rng = np.random.default_rng(zlib.crc32(f"gdn_inputs_step-rows/{backend}".encode()))
    nk, r, dk, dv = 2, 2, 64, 32
    conv, b, a, A, dt, S0 = _gdn_window(rng, 16, nk, r, dk, dv)
    S16, full = ops.gdn_inputs_step(backend, conv, b, a, A, dt, S0, nk, attached=True)
    for T in range(1, 17):
        S, out = ops.gdn_inputs_step(backend, conv[:T].copy(), b[:T].copy(), a[:T].copy(), A, dt, S0, nk,
                                     attached=True)
        np.testing.assert_array_equal(out, full[:T], err_msg=f"T={T}")
    np.testing.assert_array_equal(S, S16)


@pytest.mark.parametrize("in_place", [False, True], ids=["S0", "in-place"])
@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_gdn_inputs_step_equals_the_three_ops(backend, attached, in_place):
    # the webgpu backend folds the causal conv and gdn_inputs into gdn_step (key head dims a
    # multiple of 8; others take the ops apart): the state and outputs are the three ops' bit for bit
    rng = np.random.default_rng(zlib.crc32(f"conv_gdn_inputs_step/{backend}/{attached}/{in_place}".encode()))
    for T, nk, r, dk, dv, K in ((1, 2, 2, 64, 64, 4), (5, 1, 3, 16, 24, 4), (3, 2, 1, 128, 128, 2),
                                (2, 1, 2, 12, 8, 4), (4, 16, 2, 128, 128, 4), (1, 1, 1, 8, 8, 1)):
        _, b, a, A, dt, S0 = _gdn_window(rng, T, nk, r, dk, dv)
        C = 2 * nk * dk + nk * r * dv
        x, hist, w = (_f(rng.standard_normal((T, C))), _f(rng.standard_normal((K - 1, C))),
                      _f(rng.standard_normal((C, K)) * 0.5))
        S, out = ops.conv_gdn_inputs_step(backend, x, hist, w, b, a, A, dt, S0, nk, in_place=in_place,
                                          attached=attached)
        conv = ops.causal_conv(backend, x, hist, w)
        q, k, v, dec, beta = ops.gdn_inputs(backend, conv, b, a, A, dt, nk, dk, dv)
        want_S, want_out = ops.gdn_step(backend, S0, q, k, v, dec, beta, nk)
        np.testing.assert_array_equal(out, want_out, err_msg=f"T={T} {nk}x{r} dk {dk} dv {dv} K {K} out")
        np.testing.assert_array_equal(S, want_S, err_msg=f"T={T} {nk}x{r} dk {dk} dv {dv} K {K} state")


@pytest.mark.parametrize("backend", BACKENDS)
def test_conv_gdn_inputs_step_rows_are_batch_invariant(backend):
    # row t of the fused conv and GDN step depends on the history, the state and rows 0..t only
    rng = np.random.default_rng(zlib.crc32(f"conv_gdn_inputs_step-rows/{backend}".encode()))
    nk, r, dk, dv, K = 2, 2, 64, 32, 4
    _, b, a, A, dt, S0 = _gdn_window(rng, 16, nk, r, dk, dv)
    C = 2 * nk * dk + nk * r * dv
    x, hist, w = _f(rng.standard_normal((16, C))), _f(rng.standard_normal((K - 1, C))), _f(rng.standard_normal((C, K)))
    S16, full = ops.conv_gdn_inputs_step(backend, x, hist, w, b, a, A, dt, S0, nk, attached=True)
    for T in range(1, 17):
        S, out = ops.conv_gdn_inputs_step(backend, x[:T].copy(), hist, w, b[:T].copy(), a[:T].copy(), A, dt, S0, nk,
                                          attached=True)
        np.testing.assert_array_equal(out, full[:T], err_msg=f"T={T}")
    np.testing.assert_array_equal(S, S16)


def _copy_many_reference(src, dst_size, jobs):
    dst = np.full(dst_size, -1.0, dtype=np.float32)
    for rows, heads, dim, so, sld, shs, do, dld, dhs in jobs:
        for r in range(rows):
            for h in range(heads):
                dst[do + r * dld + h * dhs: do + r * dld + h * dhs + dim] = src[so + r * sld + h * shs:
                                                                            so + r * sld + h * shs + dim]
    return dst


@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_many_equals_each_copy(backend, attached):
    # the GDN layer's de-interleaving: one fused projection row [q k v z b a] per token into
    # packed per-head arrays, plus strided and single-value copies; up to 16 copies in a call
    rng = np.random.default_rng(zlib.crc32(f"copy_many/{backend}/{attached}".encode()))
    T, nk, dk, nv, dv = 5, 2, 16, 4, 8
    W = 2 * nk * dk + 2 * nv * dv + 2 * nv
    src = _f(rng.standard_normal(T * W + 7))
    jobs, at = [], 0
    for off, heads, dim in ((0, nk, dk), (nk * dk, nk, dk), (2 * nk * dk, nv, dv),
                            (2 * nk * dk + nv * dv, nv, dv), (W - 2 * nv, 1, nv), (W - nv, 1, nv)):
        jobs.append((T, heads, dim, off, W, dim, at, heads * dim, dim))
        at += T * heads * dim
    jobs.append((3, 2, 3, 5, 11, 4, at, 9, 4))  # strided on both sides, gaps left as -1
    at += 3 * 9
    for n in range(16 - len(jobs)):  # single values
        jobs.append((1, 1, 1, 1 + 3 * n, 1, 1, at + n, 1, 1))
    at += 16
    for count in (1, 7, 16):
        want = _copy_many_reference(src, at, jobs[:count])
        got = ops.copy_many(backend, src, at, np.array(jobs[:count], dtype=np.int32), attached=attached)
        np.testing.assert_array_equal(got, want, err_msg=f"{count} copies")


@pytest.mark.parametrize("attached", [False, True], ids=["host", "attached"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_copy_many_from_two_sources_equals_each_copy(backend, attached):
    # the GDN history advance: the kept rows of the old history and the window's last rows, two
    # arrays, into one (on the webgpu backend one dispatch with two source bindings); a 10th job
    # column 1 reads the second source
    rng = np.random.default_rng(zlib.crc32(f"copy_many2/{backend}/{attached}".encode()))
    hist, x = _f(rng.standard_normal(3 * 40)), _f(rng.standard_normal(5 * 56 + 3))
    jobs = [(2, 1, 40, 40, 40, 0, 0, 40, 0, 0),  # rows 1..2 of hist
            (1, 1, 40, 4 * 56 + 3, 56, 0, 80, 40, 0, 1),  # the last row of x (stride 56, offset 3)
            (2, 4, 5, 1, 56, 7, 120, 20, 5, 1),  # strided from x
            (1, 2, 3, 0, 0, 9, 200, 0, 3, 0)]  # strided from hist
    for count in (2, 4):
        want = _copy_many_reference(hist, 210, [j[:9] for j in jobs[:count] if j[9] == 0])
        from_x = _copy_many_reference(x, 210, [j[:9] for j in jobs[:count] if j[9] == 1])
        want[from_x != -1] = from_x[from_x != -1]
        got = ops.copy_many(backend, hist, 210, np.array(jobs[:count], dtype=np.int32), attached=attached, src2=x)
        np.testing.assert_array_equal(got, want, err_msg=f"{count} copies")


def test_fused_ops_reject_bad_arguments():
    with pytest.raises(ValueError, match="add_rmsnorm: w"):
        ops.add_rmsnorm(BACKENDS[0], np.zeros((2, 8), np.float32), np.zeros((2, 8), np.float32),
                        np.ones(7, np.float32))
    with pytest.raises(ValueError, match="reaches past its array"):
        ops.copy_many(BACKENDS[0], np.zeros(10, np.float32), 4, np.array([[1, 1, 8, 0, 8, 8, 0, 8, 8]], np.int32))
