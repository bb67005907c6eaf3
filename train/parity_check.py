"""strata vs transformers greedy tokens on a few prompts (CPU).

strata decodes greedily (up to --max-new tokens or <|endoftext|>); transformers then runs one
forward pass over prompt + strata's tokens, and at every generated position its argmax must be
the token strata picked, so transformers' own greedy decode of the prompt gives the same
sequence. For the first --full prompts, transformers' generate() (greedy, with its cache) is
also run and compared token for token.

    PYTHONPATH=app python train/parity_check.py --model app/strata/models/strata-tiny --tasks tasks.jsonl.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "app"))
from strata import prompts  # noqa: E402

CODE_PROMPTS = [
    "import os\nimport sys\n\n\ndef main(argv):",
    "class Stack:\n    def __init__(self):",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"",
    "from collections import defaultdict\n\n\ndef group_by(items, key):",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--tasks", type=Path, required=True, help="held-out edit tasks (file_tasks.py output)")
    ap.add_argument("--rewrites", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--full", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import strata
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM

    tok = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    hf = Qwen3NextForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    eng = strata.load(args.model, threads=2)
    texts = list(CODE_PROMPTS)
    with gzip.open(args.tasks, "rt") as f:
        tasks = [json.loads(line) for line in f]
    seen = set()
    for t in tasks:
        if t["kind"] not in seen and len(seen) < args.rewrites:
            seen.add(t["kind"])
            texts.append(prompts.edit_prompt(t["filename"], t["original"], t["instruction"]))
    rows = []
    for n, text in enumerate(texts):
        ids = tok.encode(text).ids
        eng.reset()
        logits = eng.run(ids)
        eng.commit(len(ids))
        new = [int(np.argmax(logits[-1]))]
        while len(new) < args.max_new and new[-1] != 0:
            logits = eng.run([new[-1]])
            eng.commit(1)
            new.append(int(np.argmax(logits[-1])))
        with torch.no_grad():
            ref = hf(input_ids=torch.tensor([ids + new])).logits[0].numpy()
        choice = ref[len(ids) - 1:len(ids) - 1 + len(new)].argmax(-1).tolist()
        row = {"prompt_tokens": len(ids), "new_tokens": len(new), "same": choice == new,
               "first_difference": next((i for i, (a, b) in enumerate(zip(choice, new)) if a != b), None)}
        if n < args.full:
            with torch.no_grad():
                gen = hf.generate(torch.tensor([ids]), max_new_tokens=len(new), do_sample=False,
                                  eos_token_id=0, pad_token_id=0)[0, len(ids):].tolist()
            row["generate_same"] = gen == new
        rows.append(row)
        print(json.dumps(row), flush=True)
    summary = {"prompts": len(rows), "same": sum(r["same"] for r in rows),
               "generate_checked": sum("generate_same" in r for r in rows),
               "generate_same": sum(r.get("generate_same", False) for r in rows),
               "tokens_compared": sum(r["new_tokens"] for r in rows), "rows": rows}
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
