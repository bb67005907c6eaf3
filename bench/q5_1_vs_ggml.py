"""strata's Q5_1 products against ggml's own CPU functions, on random blocks.

llama.cpp's CPU backend multiplies Q5_1 weights by activations quantized to Q8_1 (f16 scale, f16
block sum, 32 int8 values). This script calls ggml's x86 `quantize_row_q8_1` and
`ggml_vec_dot_q5_1_q8_1` from llama-cpp-python's libggml-cpu.so (through ctypes, in that venv's
interpreter) and compares them with strata's:

- the Q8_1 blocks: strata's int8 values, f16 scale and f16 sum (`quant_quantize_activation(...,
  sums=True)`) must equal ggml's bytes exactly;
- the products: strata's `quant_dot("Q5_1", ...)` on every instruction set against ggml's dot
  (the same integers and scales, summed in another float order: relative differences ~1e-7).

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/q5_1_vs_ggml.py \\
        --llama-python VENV/bin/python [--rows 64] [--cols 512] [--T 4]
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np

# ---- the ggml side (run by the llama-cpp-python interpreter) -------------------------------------


def ggml_side(path: str) -> None:
    import ctypes

    import llama_cpp

    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    base = ctypes.CDLL(glob.glob(os.path.join(libdir, "libggml-base.so*"))[0], mode=ctypes.RTLD_GLOBAL)
    del base
    cpu = ctypes.CDLL(glob.glob(os.path.join(libdir, "libggml-cpu.so*"))[0])
    cpu.ggml_cpu_init()
    cpu.quantize_row_q8_1.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    cpu.ggml_vec_dot_q5_1_q8_1.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p,
                                           ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    d = dict(np.load(path))
    X, W = d["X"], d["W"]
    T, cols = X.shape
    rows = W.shape[0]
    y8 = np.zeros((T, cols // 32 * 36), np.uint8)
    for t in range(T):
        x = np.ascontiguousarray(X[t])
        cpu.quantize_row_q8_1(x.ctypes.data, y8[t].ctypes.data, cols)
    out = np.zeros((T, rows), np.float32)
    s = np.zeros(1, np.float32)
    for t in range(T):
        for r in range(rows):
            w = np.ascontiguousarray(W[r])
            cpu.ggml_vec_dot_q5_1_q8_1(cols, s.ctypes.data, 0, w.ctypes.data, 0, y8[t].ctypes.data, 0, 1)
            out[t, r] = s[0]
    np.savez(path, **d, q8_1=y8, ggml=out)


# ---- the strata side -----------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-python", required=True)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--T", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from strata import _engine

    rng = np.random.default_rng(a.seed)
    nb = a.cols // 32
    W = rng.integers(0, 256, (a.rows, nb, 24), dtype=np.uint8)
    W[:, :, 0:2] = np.float16(rng.uniform(0.001, 0.02, (a.rows, nb))).view(np.uint8).reshape(a.rows, nb, 2)
    W[:, :, 2:4] = np.float16(rng.uniform(-0.3, 0.1, (a.rows, nb))).view(np.uint8).reshape(a.rows, nb, 2)
    W = W.reshape(a.rows, nb * 24)
    X = (rng.standard_normal((a.T, a.cols)) * rng.choice([0.01, 1.0, 30.0], (a.T, a.cols))).astype(np.float32)
    X[0, :32] = 0.0  # a zero block
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "q5_1.npz")
        np.savez(path, X=X, W=W)
        subprocess.run([a.llama_python, os.path.abspath(__file__), "--ggml-side", path], check=True)
        g = np.load(path)
        y8, ref = g["q8_1"], g["ggml"]
    same = 0
    for t in range(a.T):
        q, d, s = _engine.quant_quantize_activation(X[t], 32, sums=True)
        blk = y8[t].reshape(nb, 36)
        gd = blk[:, 0:2].copy().view(np.float16)[:, 0].astype(np.float32)
        gs = blk[:, 2:4].copy().view(np.float16)[:, 0].astype(np.float32)
        gq = blk[:, 4:].view(np.int8)
        ok = d.tobytes() == gd.tobytes() and s.tobytes() == gs.tobytes() and q.tobytes() == gq.tobytes()
        same += ok
    print(f"Q8_1 activation blocks equal to ggml's quantize_row_q8_1: {same} of {a.T} rows "
          f"({a.cols // 32} blocks each)")
    for isa in _engine.quant_isas():
        got = _engine.quant_dot("Q5_1", W, a.rows, a.cols, X, isa=isa)
        rel = np.abs(got.astype(np.float64) - ref) / np.maximum(np.abs(ref), 1e-30)
        l2 = np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref)
        print(f"{isa:7s} Q5_1 x Q8_1 vs ggml_vec_dot_q5_1_q8_1: relative L2 {l2:.2e}, max element "
              f"{rel.max():.2e}, bit-identical {int((got == ref).sum())} of {got.size}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--ggml-side":
        ggml_side(sys.argv[2])
    else:
        main()
