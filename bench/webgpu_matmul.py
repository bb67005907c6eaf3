"""WebGPU matmul probe: the bandwidth of the WGSL matmul kernel against resident weights and
the window cost ratio cost(T)/cost(1), on the adapter strata would use.

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/webgpu_matmul.py \
        [--adapter auto|software|any] [--rows 8192 --cols 8192] [--format f16] [--iters 50]

Bytes per matmul = the weight bytes (x and y are negligible next to them); bandwidth =
bytes / time of one dispatch, timed from the queue submit of `iters` dispatches to their
completion (encoding excluded). The ratios are from one run; these machines are noisy.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from strata import webgpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--adapter", default="auto", choices=webgpu.ADAPTER_CHOICES)
    ap.add_argument("--rows", type=int, default=8192)
    ap.add_argument("--cols", type=int, default=8192)
    ap.add_argument("--format", default="f16", choices=("f32", "f16", "bf16"))
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--windows", default="1,2,4,8,16")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    dev = webgpu.open_device(args.adapter)
    info = dev.info()
    rng = np.random.default_rng(0)
    w = rng.standard_normal((args.rows, args.cols)).astype(np.float32)
    if args.format == "f16":
        w = w.astype(np.float16)
    elif args.format == "bf16":
        w = (w.view(np.uint32) >> 16).astype(np.uint16)
    weight_bytes = w.nbytes
    rows = [int(t) for t in args.windows.split(",")]
    cost = {t: dev.bench_matmul(w, args.format, t, args.iters) for t in rows}
    result = {
        "adapter": info["device"], "backend": info["backend"], "software": info["software"],
        "shape": [args.rows, args.cols], "format": args.format, "weight_bytes": weight_bytes,
        "xload": os.environ.get("STRATA_WEBGPU_XLOAD", "direct"),
        "us": {t: cost[t] * 1e6 for t in rows},
        "gb_per_s_t1": weight_bytes / cost[rows[0]] / 1e9,
        "cost_ratio": {t: cost[t] / cost[rows[0]] for t in rows},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{info['device']} ({info['backend']}{', software' if info['software'] else ''}): "
          f"{args.format} {args.rows}x{args.cols} = {weight_bytes / 2**20:.1f} MiB")
    for t in rows:
        print(f"  T={t:<3d} {cost[t] * 1e6:10.1f} us  {weight_bytes / cost[t] / 1e9:8.2f} GB/s  "
              f"cost({t})/cost({rows[0]}) = {cost[t] / cost[rows[0]]:.2f}")


if __name__ == "__main__":
    main()
