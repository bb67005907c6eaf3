"""Evaluate strata-tiny on held-out data (files whose content hash put them in the held-out
split; no text of theirs was trained on).

1. bits per byte on held-out Python files: every file is tokenized with <|endoftext|> in front
   and cut into windows of 1024 tokens that overlap by one token, so each token of the file is
   predicted exactly once (context resets at window starts); bpb = total NLL in bits / UTF-8
   bytes of the files.
2. function-header completions: the file up to and including a held-out function's `def` line
   (last 2000 characters, without the header's final newline) is the prompt; a sample (temperature 0.8, top-p 0.95, at most 160 new
   tokens) is cut where the body ends (first non-blank line indented at or left of the `def`),
   a line cut off by the token limit is dropped, and the header + body is parsed with `ast`.
   Reported: share that parses with a non-empty body.
3. rewrite exact match: held-out rewrite tasks (train/rewrite_tasks.py on the held-out files),
   greedy decoding of edit_prompt(...) until <|endoftext|>; exact string equality with the
   mechanically rewritten file, per edit kind.

    python train/evaluate.py --model app/strata/models/strata-tiny --data .devdata --out /tmp/ev
"""
from __future__ import annotations

import argparse
import ast
import gzip
import json
import math
import random
import sys
import textwrap
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "app"))
from strata import prompts  # noqa: E402

WINDOW = 1024


def _autocast(device):
    return torch.autocast(device_type="cuda" if str(device).startswith("cuda") else "cpu",
                          dtype=torch.bfloat16, enabled=str(device).startswith("cuda"))


def heldout_code(data: Path, limit: int):
    rows = []
    with gzip.open(data / "corpus" / "heldout.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            if row["path"].endswith(".py"):
                rows.append(row)
    return rows[:limit]


@torch.no_grad()
def bits_per_byte(model, tokenizer, rows, device, batch=16):
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    windows, total_bytes = [], 0
    for row in rows:
        ids = [eos] + tokenizer.encode(row["text"]).ids
        total_bytes += len(row["text"].encode("utf-8"))
        for start in range(0, len(ids) - 1, WINDOW - 1):
            windows.append(ids[start:start + WINDOW])
    windows.sort(key=len)
    nll = 0.0
    n_tok = 0
    for i in range(0, len(windows), batch):
        chunk = windows[i:i + batch]
        width = max(len(w) for w in chunk)
        x = torch.full((len(chunk), width), eos, dtype=torch.long)
        m = torch.zeros((len(chunk), width), dtype=torch.bool)
        for j, w in enumerate(chunk):
            x[j, :len(w)] = torch.tensor(w)
            m[j, :len(w)] = True
        x, m = x.to(device), m.to(device)
        with _autocast(device):
            logits = model(input_ids=x).logits
        lp = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                             reduction="none").view(len(chunk), -1)
        valid = m[:, 1:]
        nll += float((lp * valid).sum())
        n_tok += int(valid.sum())
    return {"bits_per_byte": nll / math.log(2) / total_bytes, "files": len(rows), "bytes": total_bytes,
            "tokens": n_tok, "nll_per_token": nll / n_tok}


@torch.no_grad()
def generate(model, tokenizer, prompt_texts, device, max_new_tokens, sample=False, batch=160, seed=0):
    """Left-padded batched generation with transformers' generate; returns decoded continuations
    (up to, not including, the first <|endoftext|>) and whether each stopped by itself."""
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    encoded = [tokenizer.encode(t).ids for t in prompt_texts]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    results = [None] * len(encoded)
    torch.manual_seed(seed)
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        width = max(len(encoded[i]) for i in idx)
        x = torch.full((len(idx), width), eos, dtype=torch.long)
        m = torch.zeros((len(idx), width), dtype=torch.long)
        for j, i in enumerate(idx):
            x[j, width - len(encoded[i]):] = torch.tensor(encoded[i])
            m[j, width - len(encoded[i]):] = 1
        limit = max_new_tokens(idx) if callable(max_new_tokens) else max_new_tokens
        kwargs = dict(do_sample=True, temperature=0.8, top_p=0.95, top_k=0) if sample else dict(do_sample=False)
        with _autocast(device):
            out = model.generate(input_ids=x.to(device), attention_mask=m.to(device), max_new_tokens=limit,
                                 eos_token_id=eos, pad_token_id=eos, **kwargs)
        for j, i in enumerate(idx):
            new = out[j, width:].tolist()
            stopped = eos in new
            if stopped:
                new = new[:new.index(eos)]
            results[i] = (tokenizer.decode(new, skip_special_tokens=False), stopped)
    return results


def header_prompts(rows, limit, seed=0):
    rng = random.Random(seed)
    out = []
    for row in rows:
        text = row["text"]
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.splitlines(keepends=True)
        cands = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.body and n.body[0].lineno == n.lineno + 1 and len(n.body) >= 1
                 and lines[n.lineno - 1].rstrip().endswith(":")]
        rng.shuffle(cands)
        for n in cands[:2]:
            # The prompt stops before the header's newline: in training a newline that starts an
            # indented line is one token with the indentation, so a prompt ending in a bare
            # newline would ask for an unindented line.
            prefix = "".join(lines[:n.lineno]).rstrip("\n")
            if len(prefix) > 2000:
                cut = prefix.find("\n", len(prefix) - 2000)
                prefix = prefix[cut + 1:]
            out.append({"path": row["path"], "prompt": prefix, "indent": n.col_offset})
    rng.shuffle(out)
    return out[:limit]


def completion_parses(prompt: str, indent: int, completion: str, stopped: bool):
    lines = (prompt.splitlines()[-1] + completion).splitlines(keepends=True)
    if not stopped and lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]  # cut off by the token limit
    if not lines:
        return False, ""
    header, body = lines[0], []
    for line in lines[1:]:
        if line.strip() and (len(line) - len(line.lstrip(" "))) <= indent:
            break
        body.append(line)
    if not any(line.strip() for line in body):
        return False, ""
    func = textwrap.dedent(header + "".join(body))
    try:
        ast.parse(func)
        return True, func
    except (SyntaxError, ValueError):
        return False, func


def load_tasks(data: Path, per_kind: int):
    tasks, count = [], {}
    with gzip.open(data / "heldout_tasks.jsonl.gz", "rt") as f:
        for line in f:
            t = json.loads(line)
            if count.get(t["kind"], 0) < per_kind:
                count[t["kind"]] = count.get(t["kind"], 0) + 1
                tasks.append(t)
    return tasks


def run_all(model, tokenizer, data: Path, out: Path, device, per_kind=40, n_headers=200, n_files=400,
            log=print):
    t0 = time.time()
    results = {}
    samples = []
    rows = heldout_code(data, n_files)
    results["heldout_bpb"] = bits_per_byte(model, tokenizer, rows, device)
    log(f"held-out bpb: {json.dumps(results['heldout_bpb'])} ({time.time() - t0:.0f}s)")
    (out / "eval.json").write_text(json.dumps(results, indent=1))

    t1 = time.time()
    tasks = load_tasks(data, per_kind)
    targets = [tokenizer.encode(t["rewritten"]).ids for t in tasks]
    gens = generate(model, tokenizer,
                    [prompts.edit_prompt(t["filename"], t["original"], t["instruction"]) for t in tasks],
                    device, max_new_tokens=lambda idx: max(len(targets[i]) for i in idx) + 24)
    per_kind_res = {}
    for t, (text, stopped) in zip(tasks, gens):
        ok = stopped and text == t["rewritten"]
        k = per_kind_res.setdefault(t["kind"], {"tasks": 0, "exact": 0})
        k["tasks"] += 1
        k["exact"] += int(ok)
        if sum(1 for s in samples if s.get("kind") == t["kind"]) < 3:
            samples.append({"kind": t["kind"], "instruction": t["instruction"], "exact": ok,
                            "original": t["original"], "expected": t["rewritten"], "output": text})
    for k in per_kind_res.values():
        k["rate"] = k["exact"] / k["tasks"]
    n = sum(k["tasks"] for k in per_kind_res.values())
    results["rewrite_exact_match"] = {"per_kind": per_kind_res, "tasks": n,
                                      "overall": sum(k["exact"] for k in per_kind_res.values()) / max(n, 1)}
    log(f"rewrite exact match: {json.dumps(results['rewrite_exact_match'])} ({time.time() - t1:.0f}s)")
    (out / "eval.json").write_text(json.dumps(results, indent=1))

    t2 = time.time()
    heads = header_prompts(rows, n_headers)
    gens = generate(model, tokenizer, [h["prompt"] for h in heads], device, max_new_tokens=160, sample=True)
    good = 0
    for h, (text, stopped) in zip(heads, gens):
        ok, func = completion_parses(h["prompt"], h["indent"], text, stopped)
        good += ok
        if sum(1 for s in samples if s.get("task") == "header") < 8:
            samples.append({"task": "header", "path": h["path"], "parses": ok, "function": func})
    results["header_completion_parse_rate"] = {"prompts": len(heads), "parse": good,
                                               "rate": good / max(len(heads), 1),
                                               "sampling": "temperature 0.8, top-p 0.95, 160 tokens"}
    log(f"header completions: {json.dumps(results['header_completion_parse_rate'])} ({time.time() - t2:.0f}s)")
    results["eval_seconds"] = round(time.time() - t0, 1)
    (out / "eval.json").write_text(json.dumps(results, indent=1))
    with open(out / "samples.jsonl", "w") as f:
        for s in samples:
            f.write(json.dumps(s) + "\n")
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--data", type=Path, default=Path(".devdata"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-kind", type=int, default=40)
    ap.add_argument("--headers", type=int, default=200)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM

    model = Qwen3NextForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(args.device).eval()
    tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    args.out.mkdir(parents=True, exist_ok=True)
    run_all(model, tokenizer, args.data, args.out, args.device, args.per_kind, args.headers)


if __name__ == "__main__":
    main()
