"""Where a model's teacher-forced rewrites go wrong: for each held-out edit task, the first
rewrite positions whose top token is not the reference token, with the text before them, the
reference token and its probability, and the token the model prefers. v4's misses were mostly
in copied text, on tokens that never occur in the training rows ("NetworkX", "multigraph"),
which the model gave probability ~0 even where the file it was copying had them (v5 run,
train/README.md).

    PYTHONPATH=app python train/copy_misses.py --model app/strata/models/strata-tiny \
        --tasks tasks.jsonl.gz --kinds unchanged,delete_function --per-kind 6

With --copy-bias B, a position is wrong when greedy decoding under `strata edit`'s copy bias of
B misses it (copy_bias.py's rule), and each task's first miss is put in one of four classes:
the copy token is right and the model beats it by more than B ("model overrides the copy");
the copy token is wrong, the model had the right token first and the bias pulled it off ("bias
pulls off a change"); the copy token is wrong and the model prefers it anyway ("model follows a
wrong copy"); anything else ("model's own error"). A summary line counts them.
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

import copy_bias  # noqa: E402
import copy_index  # noqa: E402
import make_rows  # noqa: E402
from strata import prompts  # noqa: E402


def misses(m, bias: float) -> list[int]:
    """The rows of copy_bias.margins() that greedy decoding under the bias gets wrong."""
    ref, rival = copy_bias.scores(m, bias)
    return (ref <= rival).nonzero()[0].tolist()


def first_miss_class(m, bias: float, bad: list[int] | None = None) -> tuple[int, str, float] | None:
    """copy_bias.margins() rows of a rewrite -> (row, class, how far the reference is behind) of
    its first miss under the bias, None when greedy gets every row; `bad`: its misses() where the
    caller has them already."""
    import numpy as np

    bad = misses(m, bias) if bad is None else bad
    if not bad:
        return None
    ref, rival = copy_bias.scores(m, bias)
    copy = m[:, 3] + bias
    i = bad[0]
    if m[i, 1] > 0:
        return i, "model overrides the copy", float(m[i, 2] - ref[i])
    if m[i, 0] > max(m[i, 2], m[i, 3]):
        return i, "bias pulls off a change", float(copy[i] - m[i, 0])
    if np.isfinite(m[i, 3]) and m[i, 3] > m[i, 0]:
        return i, "model follows a wrong copy", float(rival[i] - m[i, 0])
    return i, "model's own error", float(rival[i] - m[i, 0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True, help="an exported Hugging Face folder")
    ap.add_argument("--tasks", type=Path, required=True, help="file_tasks.py output (.jsonl.gz)")
    ap.add_argument("--kinds", default="unchanged", help="comma list of edit kinds")
    ap.add_argument("--per-kind", type=int, default=6)
    ap.add_argument("--show", type=int, default=4, help="wrong positions shown per task")
    ap.add_argument("--copy-bias", type=float, default=0.0,
                    help="judge greedy decoding under strata edit's copy bias of this size and class each task's first miss")
    args = ap.parse_args()
    import collections
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    kinds, seen, classes = args.kinds.split(","), {}, collections.Counter()
    skip = copy_index.special_ids(tok)
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
        note = ""
        if args.copy_bias:
            at, copies, margins = copy_bias.rewrite_margins(logits, enc.ids, m > 0, skip)
            bad = misses(margins, args.copy_bias)
            first = first_miss_class(margins, args.copy_bias, bad)
            wrong = [int(at[i]) for i in bad]
            classes[first[1] if first else "exact"] += 1
            if first:
                copy = int(copies[first[0]])
                note = f"; first miss: {first[1]} (behind by {first[2]:.2f}), copy token {tok.decode([copy]) if copy >= 0 else None!r}"
        print(f"== {t['kind']} {t['path']} {t['instruction']!r}: {int((m > 0).sum())} rewrite tokens, {len(wrong)} wrong{note}")
        for w in wrong[:args.show]:
            want, got = enc.ids[w + 1], int(pred[w])
            before = tok.decode(enc.ids[max(start + 1, w - 15):w + 1])[-60:]
            kind = "changed" if m[w] == 2 else "copied"
            print(f"   @{w - start} {kind}: {before!r} -> want {tok.decode([want])!r} ({probs[w, want]:.2f}),"
                  f" got {tok.decode([got])!r} ({probs[w, got]:.2f})")
    if args.copy_bias:
        print(f"first misses at copy bias {args.copy_bias:g}: " + ", ".join(f"{k} {v}" for k, v in classes.most_common()))


if __name__ == "__main__":
    main()
