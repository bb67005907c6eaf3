"""What `strata edit FILE --yes` would have done with each rewrite of an `evaluate.py --engine
strata` run: written and right, written and wrong, refused by the edit guard (the rewrite stopped
early, or filesafety.rewrite_checks warned: it no longer parses, drops a definition, changes what
the instruction does not explain, ...), or nothing to write (the rewrite is the file).

    python train/guard_outcomes.py --tasks TASKS.jsonl.gz --samples OUT/edit_samples.jsonl

The tasks are the run's own (same order: evaluate.py writes one sample per task it ran); each
task's `path` gives the file name the guard judges by (its suffix picks the syntax check).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "app"))

from strata.filesafety import rewrite_checks  # noqa: E402


def outcome(task: dict, sample: dict) -> str:
    """written-right / written-wrong / refused-incomplete / refused-guard / nothing-to-write"""
    new = task["rewritten"] if sample["exact"] else sample["output"]
    if new is None:
        raise ValueError(f"{task['path']}: a wrong rewrite without its output")
    if not sample["stopped"]:
        return "refused-incomplete"
    if new == task["original"]:
        return "nothing-to-write"
    warnings, _ = rewrite_checks(task["path"], task["original"], new, task["instruction"])
    if warnings:
        return "refused-guard"
    return "written-right" if sample["exact"] else "written-wrong"


def task_samples(description: str) -> list[tuple[dict, dict]]:
    """The (task, sample) pairs of the run named on the command line (--tasks, --samples): one
    command line for this script and first_divergence.py."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--tasks", type=Path, required=True)
    ap.add_argument("--samples", type=Path, required=True)
    args = ap.parse_args()
    with gzip.open(args.tasks, "rt", encoding="utf-8") as f:
        by_key = {(t["kind"], t["path"], t["instruction"]): t for t in map(json.loads, f)}
    out = []
    raw = args.samples.read_bytes()
    if args.samples.suffix == ".gz":  # as kept under train/runs/
        raw = gzip.decompress(raw)
    for line in raw.decode("utf-8").splitlines():
        if not line.strip():
            continue
        s = json.loads(line)
        t = by_key.get((s["kind"], s["path"], s["instruction"]))
        if t is None:
            raise SystemExit(f"{args.samples}: a sample for a task not in {args.tasks}: {s['kind']} {s['path']}")
        out.append((t, s))
    return out


def main() -> None:
    per_kind: dict[str, Counter] = {}
    for t, s in task_samples(__doc__.split("\n\n")[0]):
        per_kind.setdefault(s["kind"], Counter())[outcome(t, s)] += 1
    cols = ["written-right", "written-wrong", "refused-guard", "refused-incomplete", "nothing-to-write"]
    print("| kind | tasks | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    total = Counter()
    for kind, c in per_kind.items():
        total += c
        print(f"| {kind} | {sum(c.values())} | " + " | ".join(str(c[k]) for k in cols) + " |")
    print(f"| all | {sum(total.values())} | " + " | ".join(str(total[k]) for k in cols) + " |")


if __name__ == "__main__":
    main()
