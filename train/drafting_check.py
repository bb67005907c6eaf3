"""Drafting off vs on with strata on held-out whole-file edits of the bundled model (or another):
greedy, the model's own output, each mode run twice interleaved, best of two; prefill excluded.
Prints tokens/s both ways, the ratio, and whether the outputs are identical.

    PYTHONPATH=app python train/drafting_check.py --tasks tasks.jsonl.gz --kinds unchanged,add_import --n 4

`--model A,B` measures several models side by side in one run (each task: A's four runs, then
B's), so a comparison is made on the same machine state. `--clock cpu` times with the process's
CPU time instead of the wall clock (use `--threads 1`): on a shared machine the wall clock
counts other jobs' time slices; the CPU time of one thread does not (its prefill, a decode of
one token measured the same way, best of two, is subtracted).
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))


def main() -> None:
    from strata import prompts
    from strata.generate import Generator
    from strata.settings import GenerationSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="app/strata/models/strata-tiny", help="a folder, or several joined by commas")
    ap.add_argument("--tasks", type=Path, required=True, help="file_tasks.py output")
    ap.add_argument("--kinds", default="unchanged,add_import")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-chars", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--copy-bias", type=float, default=0.0,
                    help="decode with strata edit's copy bias (strata edit runs with 2; default 0)")
    args = ap.parse_args()
    models = args.model.split(",")
    gens = {m: Generator.from_path(m, threads=args.threads) for m in models}
    kinds = set(args.kinds.split(","))
    with gzip.open(args.tasks, "rt") as f:
        tasks = [t for t in map(json.loads, f) if t["kind"] in kinds and len(t["original"]) < args.max_chars][:args.n]
    ratios: dict[str, list[float]] = {m: [] for m in models}
    for t in tasks:
        for m, gen in gens.items():
            ids = gen.encode(prompts.edit_prompt(t["filename"], t["original"], t["instruction"]))
            limit = len(gen.encode(t["rewritten"])) + 64
            prefill = 0.0
            if args.clock == "cpu":
                costs = []
                for _ in range(2):
                    gen.reset()
                    c0 = time.process_time()
                    gen.generate(ids, GenerationSettings(max_new=1, draft="none"))
                    costs.append(time.process_time() - c0)
                prefill = min(costs)
            runs: dict[str, list] = {}
            for mode in ("none", "suffix", "none", "suffix"):
                gen.reset()
                if args.clock == "cpu":
                    c0 = time.process_time()
                    tokens, _ = gen.generate(ids, GenerationSettings(max_new=limit, draft=mode, copy_bias=args.copy_bias))
                    seconds = time.process_time() - c0 - prefill
                else:
                    t0 = time.perf_counter()
                    tokens, _ = gen.generate(ids, GenerationSettings(max_new=limit, draft=mode, copy_bias=args.copy_bias))
                    seconds = time.perf_counter() - t0 - gen.last_prefill_s
                runs.setdefault(mode, []).append((len(tokens) / seconds, tokens))
            off, on = (max(r[0] for r in runs[m_]) for m_ in ("none", "suffix"))
            same = all(r[1] == runs["none"][0][1] for m_ in runs for r in runs[m_])
            ratios[m].append(on / off)
            name = f"{Path(m).name}: " if len(models) > 1 else ""
            print(f"{name}{t['kind']} {t['path']} ({len(t['original'])} chars, {len(runs['none'][0][1])} tokens): "
                  f"off {off:.0f} tok/s, on {on:.0f} tok/s, {on / off:.2f}x, identical {same}", flush=True)
    for m, r in ratios.items():
        if r:
            gmean = math.exp(sum(map(math.log, r)) / len(r))
            print(f"{m}: {len(r)} tasks, {min(r):.2f}-{max(r):.2f}x, geometric mean {gmean:.2f}x ({args.clock} clock)")


if __name__ == "__main__":
    main()
