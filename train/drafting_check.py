"""Drafting off vs on with strata on held-out whole-file edits of the bundled model (or another):
greedy, the model's own output, each mode run twice interleaved, best of two; prefill excluded.
Prints tokens/s both ways, the ratio, and whether the outputs are identical.

    PYTHONPATH=app python train/drafting_check.py --tasks tasks.jsonl.gz --kinds unchanged,add_import --n 4
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))


def main() -> None:
    from strata import prompts
    from strata.generate import Generator
    from strata.settings import GenerationSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="app/strata/models/strata-tiny")
    ap.add_argument("--tasks", type=Path, required=True, help="file_tasks.py output")
    ap.add_argument("--kinds", default="unchanged,add_import")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--max-chars", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    gen = Generator.from_path(args.model, threads=args.threads)
    kinds = set(args.kinds.split(","))
    with gzip.open(args.tasks, "rt") as f:
        tasks = [t for t in map(json.loads, f) if t["kind"] in kinds and len(t["original"]) < args.max_chars][:args.n]
    for t in tasks:
        ids = gen.encode(prompts.edit_prompt(t["filename"], t["original"], t["instruction"]))
        limit = len(gen.encode(t["rewritten"])) + 64
        runs: dict[str, list] = {}
        for mode in ("none", "suffix", "none", "suffix"):
            gen.reset()
            t0 = time.perf_counter()
            tokens, _ = gen.generate(ids, GenerationSettings(max_new=limit, draft=mode))
            seconds = time.perf_counter() - t0 - gen.last_prefill_s
            runs.setdefault(mode, []).append((len(tokens) / seconds, tokens))
        off, on = (max(r[0] for r in runs[m]) for m in ("none", "suffix"))
        same = all(r[1] == runs["none"][0][1] for m in runs for r in runs[m])
        print(f"{t['kind']} {t['path']} ({len(t['original'])} chars, {len(runs['none'][0][1])} tokens): "
              f"off {off:.0f} tok/s, on {on:.0f} tok/s, {on / off:.2f}x, identical {same}", flush=True)


if __name__ == "__main__":
    main()
