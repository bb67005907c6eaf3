"""Streaming a realistic-shape MoE from a quantized pack vs the bf16 pack, side by side in one run.

Qwen3-Next-80B's expert shapes (hidden 2048, 512 experts, top-10, expert width 512) over a few
layers of random weights; the same dense weights, the experts once as bf16 and once as Q4_K
(valid random blocks) or Q8_0. Both packs are decoded at the same cache fraction (default 25 %,
counted in stored bytes), interleaved, T=1 and drafted (root + 3) windows; per row: expert bytes
read per committed token, hit rate, tokens/s.

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/quant_streaming.py [--layers 2]
        [--formats q4_k,q8_0] [--cache 25%] [--out results.json]

Builds the packs in a temporary folder (--dir) and deletes them at the end, also on SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import streaming  # noqa: E402  (bench/streaming.py: synthetic config, dense weights, the decode loop)

from strata import pack  # noqa: E402
from strata.telemetry import human_bytes  # noqa: E402


def block_pool(fmt: str, n_blocks: int, rng: np.random.Generator) -> tuple[bytes, int]:
    """Random but valid blocks of `fmt` (finite f16 scales of a plausible size); (bytes, block size)."""
    if fmt == "Q8_0":
        d = (rng.uniform(0.5, 1.5, n_blocks) * 0.04 / 127).astype(np.float16).view(np.uint8).reshape(-1, 2)
        q = rng.integers(-127, 128, (n_blocks, 32), dtype=np.int8).view(np.uint8)
        return np.concatenate([d, q], axis=1).tobytes(), 34
    if fmt == "Q4_K":
        d = (rng.uniform(0.5, 1.5, n_blocks) * 0.04 / 63 / 15).astype(np.float16).view(np.uint8).reshape(-1, 2)
        dmin = (rng.uniform(0.5, 1.5, n_blocks) * 0.02 / 63).astype(np.float16).view(np.uint8).reshape(-1, 2)
        rest = rng.integers(0, 256, (n_blocks, 140), dtype=np.uint8)
        return np.concatenate([d, dmin, rest], axis=1).tobytes(), 144
    raise SystemExit(f"--formats: {fmt} is not one of q4_k, q8_0")


def build(dst: str, args, fmt: str) -> None:
    cfg = streaming.synth_config(args.layers, args.experts, args.top_k, args.hidden, args.inter, args.vocab)
    rng = np.random.default_rng(0)
    dense = streaming.synth_dense(cfg, rng)
    H, I = args.hidden, args.inter
    if fmt == "bf16":
        n = 3 * H * I
        pool = streaming.to_bf16_bits(rng.standard_normal(n + 65536, dtype=np.float32) / np.sqrt(H)).tobytes()

        def blob(li: int, e: int) -> bytes:
            off = 2 * ((li * 7919 + e * 104729) % 65536)
            return pool[off:off + 2 * n]
    else:
        elems = pack.format.MAT_FORMATS[fmt][0]
        n_blocks = 3 * H * I // elems
        pool, bb = block_pool(fmt, n_blocks + 4096, rng)

        def blob(li: int, e: int) -> bytes:
            off = bb * ((li * 7919 + e * 104729) % 4096)
            return pool[off:off + bb * n_blocks]
    t0 = time.monotonic()
    pack.write_synthetic_pack(dst, cfg, dense, layers=list(range(args.layers)), num_experts=args.experts,
                              hidden=H, inter=I, dtype=fmt.lower(), blob=blob)
    info = pack.read_pack(dst)
    print(f"{fmt:>5} pack: {args.layers} layers x {args.experts} experts x {human_bytes(info.layer_blob_bytes(0))} "
          f"= {human_bytes(info.stored_expert_bytes)} of experts, written in {time.monotonic() - t0:.1f} s", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts", type=int, default=512)
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--formats", default="q4_k", help="quantized formats to compare with bf16 (q4_k,q8_0)")
    ap.add_argument("--cache", default="25%")
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds per row")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    fmts = ["bf16"] + [f.strip().upper() for f in args.formats.split(",") if f.strip()]
    tmp = tempfile.mkdtemp(prefix="strata-qbench-", dir=args.dir)
    signal.signal(signal.SIGTERM, lambda *_: (shutil.rmtree(tmp, ignore_errors=True), sys.exit(143)))
    try:
        paths = {}
        for f in fmts:
            paths[f] = os.path.join(tmp, f.lower())
            build(paths[f], args, f)
        rows = {}
        for rnd in range(args.rounds):
            for drafted in (False, True):
                for f in fmts:  # interleaved: every format sees the same machine state in turn
                    r = streaming.run_engine(paths[f], cache=args.cache, io_mode="direct", drafted=drafted,
                                             windows=args.windows, warmup=args.warmup, seed=rnd)
                    acc = rows.setdefault((f, drafted), {"tokens": 0, "wall_s": 0.0, "bytes_read": 0,
                                                         "hits": 0, "looked": 0})
                    acc["tokens"] += r["tokens"]
                    acc["wall_s"] += r["wall_s"]
                    acc["bytes_read"] += r["bytes_read"]
                    acc["hits"] += r["hits"]
                    acc["looked"] += r["hits"] + r["cold_misses"]
        print(f"\ncache {args.cache} of each pack's stored expert bytes, direct IO, {args.rounds} interleaved "
              f"rounds x {args.windows} windows")
        print("| experts | window | MiB/token | hits | tok/s | vs bf16 tok/s |")
        print("|---|---|---|---|---|---|")
        out = []
        for drafted in (False, True):
            base = rows[("bf16", drafted)]
            base_tps = base["tokens"] / base["wall_s"] if base["wall_s"] else 0.0
            for f in fmts:
                a = rows[(f, drafted)]
                tps = a["tokens"] / a["wall_s"] if a["wall_s"] else 0.0
                mib = a["bytes_read"] / max(a["tokens"], 1) / 2**20
                hit = a["hits"] / a["looked"] if a["looked"] else 0.0
                ratio = tps / base_tps if base_tps else 0.0
                print(f"| {f} | {'T=4 drafted' if drafted else 'T=1'} | {mib:.1f} | {hit:.1%} | {tps:.2f} | {ratio:.2f}x |")
                out.append({"format": f, "drafted": drafted, "mib_per_token": mib, "hit_rate": hit, "tok_s": tps,
                            "vs_bf16": ratio})
        if args.out:
            with open(args.out, "w") as fh:
                json.dump({"args": vars(args), "rows": out}, fh, indent=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
