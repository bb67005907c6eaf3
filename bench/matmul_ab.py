"""The CPU f32 matmul kernel of two (or more) engine builds, side by side: one thread, CPU time.

For each build and round, a fresh process times `strata._engine.ops.matmul` (threads=1) on an
LM-head-sized 32000x512 f32 matrix (65 MB: larger than the caches, so its weights stream from
DRAM, as every matrix of the anchor models does in a window) and a cache-resident 1536x512, for
T = 1, 2, 3, 4, 8, 16 rows. Builds alternate within each round, so slow phases of a shared
machine hit all of them; the table gives each build's best time over all rounds and its ratio to
the first build. CPU time is immune to other processes taking the core, not to their memory
traffic: on a loaded machine read only differences that repeat across runs.

    python bench/matmul_ab.py build/dev-base build/dev-new [--rounds 10] [--reps 3] [--wait-quiet S]

The quiet-machine options are benchlib's: before each process wait up to --wait-quiet s (default
0 here: CPU time is the point of this tool) for the machine to quiet down; the table's last line
gives the most cores other processes used during any of the processes.

A build is a dev-build folder (scripts/dev-build.sh NAME -> build/dev-NAME) or "installed" (the
strata Python imports without STRATA_DEV_BUILD).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = ((32000, 512), (1536, 512))
TS = (1, 2, 3, 4, 8, 16)


def one(reps: int) -> dict:
    """This process's engine: {"RxC T": best seconds per call}."""
    import numpy as np

    sys.path.insert(0, HERE)
    import benchlib

    ops = benchlib.import_strata()._engine.ops
    rng = np.random.default_rng(0)
    out = {}
    for rows, cols in SHAPES:
        W = rng.standard_normal((rows, cols), dtype=np.float32)
        calls = max(5, int(2e8 // (rows * cols)))  # ~0.1-0.3 s per repetition
        for T in TS:
            X = rng.standard_normal((T, cols), dtype=np.float32)
            ops.matmul("cpu", X, W, "f32", rows, cols)  # warm-up
            best = float("inf")
            for _ in range(reps):
                t0 = time.process_time()
                for _ in range(calls):
                    ops.matmul("cpu", X, W, "f32", rows, cols)
                best = min(best, (time.process_time() - t0) / calls)
            out[f"{rows}x{cols} {T}"] = best
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="*", help="dev-build folders (or 'installed'); the first is the reference")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions per process (best kept)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    sys.path.insert(0, HERE)
    import benchlib

    benchlib.add_quiet_args(ap)
    ap.set_defaults(wait_quiet=0.0)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.reps)))
        return
    if not args.builds:
        ap.error("name at least one build")
    for b in args.builds:
        if b != "installed" and not os.path.isdir(b):
            sys.exit(f"matmul_ab: no build folder {b}")
    best: dict[str, dict[str, float]] = {b: {} for b in args.builds}
    others: list[float] = []
    for r in range(args.rounds):
        for b in args.builds:
            env = benchlib.build_env(b)
            benchlib.wait_for_quiet(args.wait_quiet, args.quiet_cores)
            with benchlib.OthersMeter() as meter:
                p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", "--reps", str(args.reps)],
                                   env=env, capture_output=True, text=True)
            if meter.cores is not None:
                others.append(meter.cores)
            if p.returncode != 0:
                sys.exit(f"matmul_ab: {b} failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}")
            for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items():
                best[b][k] = min(best[b].get(k, float("inf")), v)
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    ref = args.builds[0]
    print(f"best of {args.rounds} x {args.reps} per build, one thread, CPU time; ms per call (ratio to {ref})")
    print()
    print("| matrix | T | " + " | ".join(args.builds) + " |")
    print("|---|---|" + "---|" * len(args.builds))
    for rows, cols in SHAPES:
        for T in TS:
            k = f"{rows}x{cols} {T}"
            cells = [f"{best[b][k] * 1e3:.4f}" + ("" if b == ref else f" ({best[b][k] / best[ref][k]:.2f})")
                     for b in args.builds]
            print(f"| {rows}x{cols} | {T} | " + " | ".join(cells) + " |")
    if others:
        print()
        print(f"other processes used {min(others):.2f}-{max(others):.2f} cores during the runs")


if __name__ == "__main__":
    main()
