"""Where a window's GPU time goes: every dispatch timed with timestamp queries
(STRATA_WEBGPU_PROFILE=1), summed per kernel label, for decode windows of T rows.

    python bench/webgpu_profile.py DIR [--windows 1,8] [--reps 8] [--warm-prompt 256]
                                       [--label NAME] [--out RESULTS.jsonl] [--top 30]

DIR is a checkpoint (bench/webgpu_decode.py make DIR --preset a3b --repeat-experts makes the
80B-A3B layer shape). Procedure: a warm-up prefill of --warm-prompt random tokens (every expert
uploaded), a reset, a 16-token prompt, 4 T=1 steps; then for each T, --reps windows of T random
tokens (run T, commit 1), and the backend's counters before and after. Per label (a kernel and,
for matmuls, its shape): dispatches per window, GPU microseconds per window, share of the summed
dispatch time, weight bytes per window and bytes / time. With timestamps inside the pass
(the H200, lavapipe) a dispatch's time runs from the previous dispatch's end to its own end, so
it includes the barrier and launch gap before it and the rows add up to the window's GPU span.
Profiling makes every submit wait, so wall times here are not decode speeds.
Prints a table and one JSON line (what = "profile"; appended to --out).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def window_profile(eng, T: int, reps: int, vocab: int, rng) -> dict:
    before = eng.backend_counters()
    t = time.perf_counter()
    for _ in range(reps):
        eng.run([int(i) for i in rng.integers(0, vocab, T)])
        eng.commit(1)
    wall = (time.perf_counter() - t) / reps
    after = eng.backend_counters()
    d = {k: (after.get(k, 0.0) - before.get(k, 0.0)) / reps for k in after}
    kernels = {}
    for k, v in d.items():
        if k.startswith("gpu_us:"):
            label = k[7:]
            kernels[label] = {"n": d.get("gpu_n:" + label, 0.0), "us": v, "bytes": d.get("gpu_bytes:" + label, 0.0)}
    kernels = {k: v for k, v in kernels.items() if v["n"] > 0}
    return {"T": T, "reps": reps, "wall_ms": wall * 1e3, "span_us": d.get("gpu_span_us", 0.0),
            "timed_submits": d.get("gpu_timed_submits", 0.0), "dispatches": d.get("dispatches", 0.0),
            "kernels": kernels}


def table(p: dict, top: int) -> str:
    ks = sorted(p["kernels"].items(), key=lambda kv: -kv[1]["us"])
    total = sum(v["us"] for v in p["kernels"].values()) or 1.0
    byts = sum(v["bytes"] for v in p["kernels"].values())
    lines = [f"T={p['T']}: {p['dispatches']:.0f} dispatches, summed dispatch time {total:.1f} us, "
             f"GPU span {p['span_us']:.1f} us over {p['timed_submits']:.1f} submits, wall {p['wall_ms']:.2f} ms "
             f"(profiling waits at every submit); weights {byts / 1e6:.1f} MB = {byts / total / 1e3:.0f} GB/s",
             f"  {'kernel':58s} {'n':>6s} {'us':>9s} {'%':>5s} {'us/n':>7s} {'MB':>8s} {'GB/s':>7s}"]
    for label, v in ks[:top]:
        gbs = f"{v['bytes'] / v['us'] / 1e3:7.0f}" if v["bytes"] and v["us"] else "      -"
        lines.append(f"  {label[:58]:58s} {v['n']:6.1f} {v['us']:9.1f} {100 * v['us'] / total:5.1f} "
                     f"{v['us'] / v['n']:7.2f} {v['bytes'] / 1e6:8.2f} {gbs}")
    if len(ks) > top:
        rest = ks[top:]
        lines.append(f"  ({len(rest)} more labels: {sum(v['us'] for _, v in rest):.1f} us)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--windows", default="1,8")
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--warm-prompt", type=int, default=256)
    ap.add_argument("--label", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    os.environ["STRATA_WEBGPU_PROFILE"] = "1"  # read when the device opens
    sys.path.insert(0, os.path.join(REPO, "app"))
    import numpy as np

    import strata

    eng = strata.load(args.dir, backend="webgpu")
    vocab = eng.vocab_size
    rng = np.random.default_rng(3)
    mode = eng.backend_counters().get("gpu_profile", 0)
    if mode <= 0:
        why = "the adapter has no timestamp queries" if mode < 0 else "profiling is off in this build"
        print(f"GPU profile: not available ({why})")
        res = {"what": "profile", "model": args.label, "available": False, "why": why}
    else:
        if args.warm_prompt:
            eng.run([int(i) for i in rng.integers(0, vocab, args.warm_prompt)], last_only=True)
            eng.reset()
        prompt = [int(i) for i in rng.integers(0, vocab, 16)]
        eng.run(prompt, last_only=True)
        eng.commit(len(prompt))
        for tok in prompt[:4]:
            eng.run([tok])
            eng.commit(1)
        res = {"what": "profile", "model": args.label, "available": True,
               "mode": "inside the pass" if mode == 1 else "one pass per dispatch", "windows": []}
        for T in [int(x) for x in args.windows.split(",")]:
            window_profile(eng, T, 1, vocab, rng)  # pipelines and bind groups of this T made
            p = window_profile(eng, T, args.reps, vocab, rng)
            print(table(p, args.top), flush=True)
            res["windows"].append(p)
    line = json.dumps(res)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
