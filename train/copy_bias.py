"""Teacher-forced exact match of whole-file edits under the copy bias, for every bias at once
(docs/decoding.md, "Copy bias"). One forward pass per task over prompt + reference rewrite gives
the logits at every position; the copy bias's predictor (strata's own `CopyIndex`, over the
prompt) gives the token it would boost there. With bias b, greedy decoding writes the reference
exactly when, at every position of the rewrite and at its end, the reference token wins
after b is added to the predicted token's logit, so one pass scores every b.

    PYTHONPATH=app python train/copy_bias.py --model app/strata/models/strata-tiny \\
        --tasks tasks.jsonl.gz --biases 0,1,1.5,2,2.5,3,4,8 [--out sweep.json]

Runs on the CPU (about 1.5 s a task for strata-tiny on 2 cores). Greedy ties (exactly equal
logits) are counted as misses.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))
import make_rows  # noqa: E402
from strata import prompts  # noqa: E402


def task_margins(model, tokenizer, task, copy_index_cls):
    """Per rewrite position: (reference logit, predicted copy token is the reference, best
    logit of any other token than the reference and the copy token, the copy token's logit)."""
    prompt = prompts.edit_prompt(task["filename"], task["original"], task["instruction"])
    enc = tokenizer.encode(prompts.edit_example(task["filename"], task["original"], task["instruction"],
                                                task["rewritten"]))
    marks = make_rows.change_marks(enc.offsets, len(prompt), make_rows.changed_spans(task["original"], task["rewritten"]))
    ids = np.array(enc.ids)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([enc.ids[:-1]])).logits[0].float().numpy()
    rows = np.nonzero(marks[1:] > 0)[0]  # logits[p] predicts ids[p + 1]
    start = int(rows[0]) + 1  # the rewrite's first token; the prompt before it is the source
    copies = copy_index_cls(enc.ids[:start]).predictions(enc.ids[:-1], int(rows[0]) + 1)
    out = np.empty((len(rows), 4))
    for k, p in enumerate(rows):
        lg = logits[p].copy()
        ref, copy = int(ids[p + 1]), int(copies[int(p) + 1 - (int(rows[0]) + 1)])
        out[k, 0] = lg[ref]
        out[k, 1] = copy == ref
        out[k, 3] = lg[copy] if copy >= 0 else -np.inf
        lg[ref] = -np.inf
        if copy >= 0:
            lg[copy] = -np.inf
        out[k, 2] = lg.max()
    return out


def exact_under(m, bias):
    ref = m[:, 0] + bias * m[:, 1]
    rival = np.maximum(m[:, 2], np.where(m[:, 1] > 0, -np.inf, m[:, 3] + bias))
    return bool((ref > rival).all())


def main() -> None:
    from strata import _engine
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM

    import train as T

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, required=True, help="an exported Hugging Face folder")
    ap.add_argument("--tasks", type=Path, required=True, help="file_tasks.py output (jsonl.gz)")
    ap.add_argument("--biases", default="0,1,1.5,2,2.5,3,4,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, help="write the per-kind table as JSON")
    args = ap.parse_args()
    try:
        biases = [float(b) for b in args.biases.split(",")]
    except ValueError:
        raise SystemExit(f"--biases: a comma list of numbers, not {args.biases!r}")
    torch.set_num_threads(args.threads)
    T.patch_experts()
    model = Qwen3NextForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    with gzip.open(args.tasks, "rt") as f:
        tasks = [json.loads(line) for line in f]
    table = {b: {} for b in biases}
    t0 = time.time()
    for n, task in enumerate(tasks):
        m = task_margins(model, tokenizer, task, _engine.CopyIndex)
        for b in biases:
            k = table[b].setdefault(task["kind"], [0, 0])
            k[0] += exact_under(m, b)
            k[1] += 1
        if (n + 1) % 20 == 0:
            print(f"  {n + 1}/{len(tasks)} ({time.time() - t0:.0f}s)", flush=True)
    kinds = sorted({t["kind"] for t in tasks})
    print("bias  exact  " + "  ".join(kinds))
    for b in biases:
        print(f"{b:4g}  {sum(v[0] for v in table[b].values()):5d}  "
              + "  ".join(f"{table[b].get(k, [0])[0]:>{len(k)}d}" for k in kinds))
    if args.out:
        args.out.write_text(json.dumps({str(b): table[b] for b in biases}, indent=1))


if __name__ == "__main__":
    main()
