"""Where a model's teacher-forced rewrites go wrong: for each held-out edit task, the first
rewrite positions whose top token is not the reference token, with the text before them, the
reference token and its probability, and the token the model prefers. v4's misses were mostly
in copied text, on tokens that never occur in the training rows ("NetworkX", "multigraph"),
which the model gave probability ~0 even where the file it was copying had them (v5 run,
train/README.md).

    PYTHONPATH=app python train/copy_misses.py --model app/strata/models/strata-tiny \
        --tasks tasks.jsonl.gz --kinds unchanged,delete_function --per-kind 6
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))

import make_rows  # noqa: E402
from strata import prompts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True, help="an exported Hugging Face folder")
    ap.add_argument("--tasks", type=Path, required=True, help="file_tasks.py output (.jsonl.gz)")
    ap.add_argument("--kinds", default="unchanged", help="comma list of edit kinds")
    ap.add_argument("--per-kind", type=int, default=6)
    ap.add_argument("--show", type=int, default=4, help="wrong positions shown per task")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    kinds, seen = args.kinds.split(","), {}
    with gzip.open(args.tasks, "rt", encoding="utf-8") as f:
        tasks = [json.loads(line) for line in f]
    for t in tasks:
        if t["kind"] not in kinds or seen.get(t["kind"], 0) >= args.per_kind:
            continue
        seen[t["kind"]] = seen.get(t["kind"], 0) + 1
        prompt = prompts.edit_prompt(t["filename"], t["original"], t["instruction"])
        enc = tok.encode(prompts.edit_example(t["filename"], t["original"], t["instruction"], t["rewritten"]))
        marks = make_rows.change_marks(enc.offsets, len(prompt), make_rows.changed_spans(t["original"], t["rewritten"]))
        ids = torch.tensor([enc.ids])
        with torch.no_grad():
            logits = model(input_ids=ids[:, :-1]).logits[0]
        probs = torch.softmax(logits, -1)
        pred = logits.argmax(-1)
        m = torch.from_numpy(marks[1:].astype("int64"))
        wrong = torch.nonzero((m > 0) & (pred != ids[0, 1:])).flatten().tolist()
        start = int(torch.nonzero(m > 0)[0])
        print(f"== {t['kind']} {t['path']} {t['instruction']!r}: {int((m > 0).sum())} rewrite tokens, {len(wrong)} wrong")
        for w in wrong[:args.show]:
            want, got = enc.ids[w + 1], int(pred[w])
            before = tok.decode(enc.ids[max(start + 1, w - 15):w + 1])[-60:]
            kind = "changed" if m[w] == 2 else "copied"
            print(f"   @{w - start} {kind}: {before!r} -> want {tok.decode([want])!r} ({probs[w, want]:.2f}),"
                  f" got {tok.decode([got])!r} ({probs[w, got]:.2f})")


if __name__ == "__main__":
    main()
