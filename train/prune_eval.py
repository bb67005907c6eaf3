"""Teacher-forced held-out evaluation of one model under several tokenizers (prune_vocab.py's
pruned ones against the model's own), without redoing the work the tokenizers share.

evaluate.py --forced judges a task by one forward pass over the token ids of prompt + reference
rewrite; bits per byte by the ids of each held-out file. A pruned tokenizer changes those ids only
for the tasks and files that contain a pruned piece; for every other task the ids, hence the
logits (one task per forward pass, same model, same threads) and the result, are the same as under
the baseline tokenizer. So each task and file is evaluated (with evaluate.eval_forced and
evaluate.bits_per_byte) only under the first tokenizer that gives it its ids, and the results are
reused for the others. Bits per byte likewise: only the files whose ids some
tokenizer changes are evaluated (under every tokenizer); with --baseline-bpb (evaluate.py's
eval.json over the same files) the total is evaluate.py's with those files' share replaced.
The baseline's per-task rows may come from an earlier
`evaluate.py --forced` run of the same model and tasks (--baseline-rows, its forced_tasks.jsonl).
Results are kept in --cache (by a hash of the ids) as they come, so a run with --changed-only
(only the tasks and files whose ids a pruned tokenizer changes) can go beside the baseline's run,
and a second run with --baseline-rows then only adds them up.

    python train/prune_eval.py --model app/strata/models/strata-tiny --tok /tmp/tok1 --tok /tmp/tok2 \\
        --tasks tasks.jsonl.gz --heldout heldout.jsonl.gz --baseline-rows ev/forced_tasks.jsonl --out ev_pruned
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))
import evaluate as E  # noqa: E402
from rewrite_tasks import iter_corpus  # noqa: E402
from strata import prompts  # noqa: E402


def summarize(rows: list[dict]) -> dict:
    """evaluate.eval_forced's summary, from its per-task rows."""
    per_kind: dict = {}
    for r in rows:
        k = per_kind.setdefault(r["kind"], {"tasks": 0, "exact": 0, "changed": 0, "changed_right": 0})
        k["tasks"] += 1
        k["exact"] += int(r["exact"])
        k["changed"] += r["changed"]
        k["changed_right"] += r["changed"] - r["changed_wrong"]
    n = len(rows)
    return {"tasks": n, "exact": sum(int(r["exact"]) for r in rows),
            "per_kind": {k: v["exact"] for k, v in per_kind.items()},
            "changed_acc": sum(v["changed_right"] for v in per_kind.values()) / max(sum(v["changed"] for v in per_kind.values()), 1)}


def main() -> None:
    from tokenizers import Tokenizer

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, required=True, help="exported folder; its tokenizer is the baseline")
    ap.add_argument("--tok", type=Path, action="append", required=True, help="a pruned tokenizer folder (repeatable)")
    ap.add_argument("--tasks", type=Path, required=True)
    ap.add_argument("--heldout", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--baseline-rows", type=Path, help="forced_tasks.jsonl of evaluate.py --forced on the same tasks")
    ap.add_argument("--bpb-files", type=int, default=0, help="held-out files for bits per byte (0: skip)")
    ap.add_argument("--bpb-window", type=int, default=8192)
    ap.add_argument("--baseline-bpb", type=Path, help="eval.json of evaluate.py with bits per byte on the same files")
    ap.add_argument("--cache", type=Path, help="jsonl of results by ids hash, read and appended to")
    ap.add_argument("--changed-only", action="store_true",
                    help="evaluate only what a pruned tokenizer changes (no summary for the tokenizers)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    import train as T

    T.choose_gdn(log, "auto", "cpu")
    model, base_tok = E.load_model(argparse.Namespace(model=args.model), "cpu")
    tasks = E.load_tasks(args.tasks, args.per_kind)
    toks = [("baseline", base_tok)] + [(str(p), Tokenizer.from_file(str(p / "tokenizer.json"))) for p in args.tok]
    examples = [prompts.edit_example(t["filename"], t["original"], t["instruction"], t["rewritten"]) for t in tasks]
    code = [r for r in iter_corpus(args.heldout) if r["path"].endswith(".py")][:args.bpb_files]
    seen: dict[str, dict] = {}  # hash of an example's ids -> its row
    nll_seen: dict[str, float] = {}  # hash of a file's ids -> its nll in nats
    cache = []
    if args.cache and args.cache.is_file():
        for line in args.cache.read_text().splitlines():
            c = json.loads(line)
            (seen if c["what"] == "task" else nll_seen)[c["key"]] = c["value"]

    def remember(what, key, value):
        (seen if what == "task" else nll_seen)[key] = value
        if args.cache:
            with args.cache.open("a") as f:
                f.write(json.dumps({"what": what, "key": key, "value": value}) + "\n")

    def key_of(ids) -> str:
        return hashlib.sha256(json.dumps(list(ids)).encode()).hexdigest()

    base_keys = [key_of(base_tok.encode(ex).ids) for ex in examples]

    def file_keys(tok):
        eos = tok.token_to_id(prompts.ENDOFTEXT)
        return [key_of([eos] + tok.encode(r["text"]).ids) for r in code]

    base_fkeys = file_keys(base_tok)
    # bits per byte only where some tokenizer changes a file's ids (the others add the same to each)
    changed_files = sorted({i for _, tok in toks[1:] for i, k in enumerate(file_keys(tok)) if k != base_fkeys[i]})
    if args.baseline_rows:
        base_rows, count = [], {}
        for line in args.baseline_rows.read_text().splitlines():  # the first --per-kind of each kind, as load_tasks
            r = json.loads(line)
            count[r["kind"]] = count.get(r["kind"], 0) + 1
            if count[r["kind"]] <= args.per_kind:
                base_rows.append(r)
        if [(r["kind"], r["path"]) for r in base_rows] != [(t["kind"], t["path"]) for t in tasks]:
            raise SystemExit(f"{args.baseline_rows}: not the rows of these tasks")
        for k, r in zip(base_keys, base_rows):
            seen[k] = r
    results = {}
    for name, tok in toks[1:] if args.changed_only else toks:
        keys = [key_of(tok.encode(ex).ids) for ex in examples]
        todo = [i for i, k in enumerate(keys) if k not in seen and not (args.changed_only and k == base_keys[i])]
        log(f"{name}: {len(todo)} of {len(tasks)} tasks to run")
        t0 = time.time()
        for n, i in enumerate(todo):  # one at a time, so that the cache keeps what is done
            _, (row,) = E.eval_forced(model, tok, [tasks[i]], "cpu", lambda msg: None)
            remember("task", keys[i], row)
            if (n + 1) % 10 == 0:
                log(f"  {n + 1}/{len(todo)} ({time.time() - t0:.0f}s)")
        fkeys = file_keys(tok)
        for i in changed_files:
            if fkeys[i] not in nll_seen and not (args.changed_only and fkeys[i] == base_fkeys[i]):
                b = E.bits_per_byte(model, tok, [code[i]], "cpu", args.bpb_window)
                remember("file", fkeys[i], b["bits_per_byte"] * math.log(2) * b["bytes"])
        if args.changed_only:
            log(f"{name}: {len(todo)} tasks and {sum(k != bk for k, bk in zip(fkeys, base_fkeys))} files evaluated")
            continue
        rows = [seen[k] for k in keys]
        res = {"forced": summarize(rows), "tasks_with_other_ids": sum(k != b for k, b in zip(keys, base_keys))}
        if changed_files:
            nll = sum(nll_seen[fkeys[i]] for i in changed_files)
            nbytes = sum(len(code[i]["text"].encode("utf-8")) for i in changed_files)
            res["bpb_changed_files"] = {"bits_per_byte": nll / math.log(2) / nbytes, "files": len(changed_files),
                                        "bytes": nbytes, "files_with_other_ids": sum(fkeys[i] != base_fkeys[i] for i in changed_files)}
            if args.baseline_bpb:  # evaluate.py's bits per byte on the same files, the changed ones replaced
                base = json.loads(args.baseline_bpb.read_text())["heldout_bpb"]
                if base["files"] != len(code):
                    raise SystemExit(f"{args.baseline_bpb}: bits per byte over {base['files']} files, not {len(code)}")
                base_nll = sum(nll_seen[base_fkeys[i]] for i in changed_files)
                total = base["bits_per_byte"] * math.log(2) * base["bytes"] - base_nll + nll
                res["heldout_bpb"] = {"bits_per_byte": total / math.log(2) / base["bytes"], "files": len(code)}
        results[name] = res
        (args.out / f"forced_tasks_{len(results) - 1}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        log(f"{name}: {json.dumps(res)}")
        (args.out / "prune_eval.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
