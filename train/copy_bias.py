"""Teacher-forced exact match of whole-file edits under the copy bias, for every bias at once
(docs/decoding.md, "Copy bias"). One forward pass per task over prompt + reference rewrite gives
the logits at every position; the copy bias's predictor (copy_index.py, the engine's rule in
Python, over the prompt) gives the token it would boost there. With bias b, greedy decoding writes
the reference exactly when, at every position of the rewrite and at its end, the reference token
wins after b is added to the predicted token's logit, so one pass scores every b. The pass is
evaluate.py's teacher-forced one (`evaluate.py --forced --copy-biases` reports the same counts);
this script prints them as a table per edit kind.

    python train/copy_bias.py --model app/strata/models/strata-tiny \\
        --tasks tasks.jsonl.gz --biases 0,1,1.5,2,2.5,3,4,8 [--out sweep.json]

Runs on the CPU (about 1.5 s a task for strata-tiny on 2 cores). Greedy ties (exactly equal
logits) are counted as misses.
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
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))
from copy_index import CopyIndex  # noqa: E402


def rewrite_copies(ids: list[int], first: int, skip=()) -> list[int]:
    """The copy bias's token for each position p >= first - 1 of ids (what the bias boosts when
    ids[p + 1] is predicted), the source being ids[:first] (the prompt); -1 for tokens in skip
    (strata passes the control tokens: copy_index.special_ids)."""
    return CopyIndex(ids[:first]).predictions(ids[:-1], first, skip)


def margins(logits: torch.Tensor, refs: torch.Tensor, copies: torch.Tensor) -> np.ndarray:
    """Per predicted position (rows of logits): the reference token's logit, whether the copy
    token is the reference, the best logit of any token but those two, the copy token's logit."""
    rows = torch.arange(len(refs), device=logits.device)
    has = copies >= 0
    c = copies.clamp(min=0)
    lt = logits[rows, refs]
    lc = torch.where(has, logits[rows, c], torch.full_like(lt, -torch.inf))
    masked = logits.clone()
    masked[rows, refs] = -torch.inf
    masked[rows[has], c[has]] = -torch.inf
    return torch.stack([lt, (has & (c == refs)).to(lt.dtype), masked.max(-1).values, lc], 1).float().cpu().numpy()


def rewrite_margins(logits: torch.Tensor, ids: list[int], rewrite: torch.Tensor,
                    skip=()) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """margins() at a teacher-forced rewrite's positions: logits are the model's over ids[:-1]
    (one row per position), rewrite marks the positions whose next token belongs to the rewrite;
    -> (those positions, their copy tokens (rewrite_copies), their margins rows)."""
    at = torch.nonzero(rewrite)[:, 0]
    copies = torch.tensor(rewrite_copies(ids, int(at[0]) + 1, skip))[at - int(at[0])]
    refs = torch.tensor(ids[1:])[at]
    dev = logits.device
    return at, copies, margins(logits[at.to(dev)].float(), refs.to(dev), copies.to(dev))


def scores(m: np.ndarray, bias: float) -> tuple[np.ndarray, np.ndarray]:
    """Per margins() row under the bias: the reference token's score and the best score of any
    other token (the copy token's with the bias added); greedy writes the reference where the
    first is above the second (ties count as misses)."""
    ref = m[:, 0] + bias * m[:, 1]
    rival = np.maximum(m[:, 2], np.where(m[:, 1] > 0, -np.inf, m[:, 3] + bias))
    return ref, rival


def exact_under(m: np.ndarray, bias: float) -> bool:
    """Greedy with the copy bias writes the reference at every one of these positions (ties
    count as misses)."""
    ref, rival = scores(m, bias)
    return bool((ref > rival).all())


def main() -> None:
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM

    import evaluate
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
    # evaluate.py's teacher-forced pass, which scores each bias with margins() and exact_under()
    res, _ = evaluate.eval_forced(model, tokenizer, tasks, "cpu", lambda msg: print(msg, flush=True),
                                  copy_biases=biases)
    table = {b: {k: [v.get("copy_exact", {}).get(str(b), 0), v["tasks"]] for k, v in res["per_kind"].items()}
             for b in biases}
    kinds = sorted({t["kind"] for t in tasks})
    print("bias  exact  " + "  ".join(kinds))
    for b in biases:
        print(f"{b:4g}  {sum(v[0] for v in table[b].values()):5d}  "
              + "  ".join(f"{table[b].get(k, [0])[0]:>{len(k)}d}" for k in kinds))
    if args.out:
        args.out.write_text(json.dumps({str(b): table[b] for b in biases}, indent=1))


if __name__ == "__main__":
    main()
