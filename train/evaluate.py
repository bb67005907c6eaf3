"""Evaluate strata-tiny on held-out packages (build_data.py holds out whole distributions and
standard-library packages: no file of theirs, nor any edit or chat made from one, is trained on).

1. Whole-file edits: the tasks of file_tasks.py on held-out files of 2-10k characters (per
   kind), greedy decoding of edit_prompt(...) until <|endoftext|>. Reported per kind: exact
   match (the whole rewritten file, character for character, and the model stopped by
   itself), the share of outputs that parse with `ast`, and for "unchanged" also the mean
   line-level similarity to the original (difflib ratio), which shows how close misses are.
2. Bits per byte on held-out Python files: each file with <|endoftext|> in front, cut into
   windows of --bpb-window tokens that overlap by one token, so each token is predicted once.
3. Chat transcripts: a few conversations about held-out functions, greedy, until <|im_end|>.

    python train/evaluate.py --model app/strata/models/strata-tiny --tasks tasks.jsonl.gz \
        --heldout .devdata/corpus/heldout.jsonl.gz --out /tmp/ev
    python train/evaluate.py --ckpt run1 --tok tok ...      # a train.py checkpoint
"""
from __future__ import annotations

import argparse
import ast
import difflib
import gzip
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "app"))
import chat_data  # noqa: E402
from rewrite_tasks import iter_corpus  # noqa: E402
from strata import prompts  # noqa: E402


# bf16 autocast on the GPU unless --f32 (v7: strata computes in f32 from the bf16 weights, so f32
# logits are what its users get; a near-tie can go the other way under bf16)
BF16_ON_GPU = True


def _autocast(device):
    return torch.autocast(device_type="cuda" if str(device).startswith("cuda") else "cpu",
                          dtype=torch.bfloat16, enabled=BF16_ON_GPU and str(device).startswith("cuda"))


def parses(text: str) -> bool:
    try:
        ast.parse(text)
        return True
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False


@torch.no_grad()
def bits_per_byte(model, tokenizer, rows, device, window, batch=8):
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    windows, total_bytes = [], 0
    for row in rows:
        ids = [eos] + tokenizer.encode(row["text"]).ids
        total_bytes += len(row["text"].encode("utf-8"))
        for start in range(0, len(ids) - 1, window - 1):
            windows.append(ids[start:start + window])
    windows.sort(key=len)
    nll, n_tok = 0.0, 0
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
        nll += float((lp * m[:, 1:]).sum())
        n_tok += int(m[:, 1:].sum())
    return {"bits_per_byte": nll / math.log(2) / total_bytes, "files": len(rows), "bytes": total_bytes,
            "tokens": n_tok, "window": window}


@torch.no_grad()
def generate(model, tokenizer, prompt_texts, device, max_new, stop_id, batch=128, max_time=None):
    """Left-padded batched greedy generation with transformers' generate; returns
    (continuation up to, not including, the first stop token, stopped by itself)."""
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    encoded = [tokenizer.encode(t).ids for t in prompt_texts]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
    results = [None] * len(encoded)
    t0 = time.time()
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        width = max(len(encoded[i]) for i in idx)
        x = torch.full((len(idx), width), eos, dtype=torch.long)
        m = torch.zeros((len(idx), width), dtype=torch.long)
        for j, i in enumerate(idx):
            x[j, width - len(encoded[i]):] = torch.tensor(encoded[i])
            m[j, width - len(encoded[i]):] = 1
        limit = max_new(idx) if callable(max_new) else max_new
        left = None if max_time is None else max(5.0, max_time - (time.time() - t0))
        with _autocast(device):
            out = model.generate(input_ids=x.to(device), attention_mask=m.to(device), max_new_tokens=limit,
                                 eos_token_id=[eos, stop_id], pad_token_id=eos, do_sample=False,
                                 max_time=left)
        for j, i in enumerate(idx):
            new = out[j, width:].tolist()
            stopped = stop_id in new or eos in new
            cut = min([new.index(t) for t in (stop_id, eos) if t in new], default=len(new))
            results[i] = (tokenizer.decode(new[:cut], skip_special_tokens=False), stopped)
    return results


def load_tasks(path: Path, per_kind: int, skip_per_kind: int = 0):
    """The first per_kind tasks of each kind (after the first skip_per_kind of each)."""
    tasks, count = [], {}
    with gzip.open(path, "rt") as f:
        for line in f:
            t = json.loads(line)
            count[t["kind"]] = count.get(t["kind"], 0) + 1
            if skip_per_kind < count[t["kind"]] <= skip_per_kind + per_kind:
                tasks.append(t)
    return tasks


class StrataEngine:
    """Greedy generation with strata itself (the engine users get, suffix drafting on), one
    prompt at a time, each bounded by max_new tokens and a time budget."""

    def __init__(self, folder: Path, threads: int | None):
        from strata.generate import Generator

        self.gen = Generator.from_path(folder, threads=threads)
        self.tokens = 0
        self.seconds = 0.0

    def __call__(self, prompt_text: str, max_new: int, stop_id: int, seconds: float,
                 copy_bias: float = 0.0) -> tuple[str, bool]:
        from strata.settings import GenerationSettings

        self.gen.reset()
        settings = GenerationSettings(max_new=max_new, temperature=0.0, draft="suffix", copy_bias=copy_bias)
        t0 = time.time()
        out, reason = [], ""
        for ev in self.gen.stream(self.gen.encode(prompt_text), settings, should_stop=lambda: time.time() - t0 > seconds):
            out.extend(ev.tokens)
            reason = ev.stop_reason or reason
        self.tokens += len(out)
        self.seconds += time.time() - t0
        stopped = stop_id in out or reason == "eos"
        cut = out.index(stop_id) if stop_id in out else len(out)
        return self.gen.decode(out[:cut]), stopped


def eval_edits(model, tokenizer, tasks, device, max_time, log, gen_batch=128, engine=None, task_seconds=120.0,
               edit_cap=False, copy_bias=0.0):
    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    t0 = time.time()
    targets = [len(tokenizer.encode(t["rewritten"]).ids) for t in tasks]
    texts = [prompts.edit_prompt(t["filename"], t["original"], t["instruction"]) for t in tasks]
    if engine is None:
        gens = generate(model, tokenizer, texts, device, max_new=lambda idx: max(targets[i] for i in idx) + 64,
                        stop_id=eos, max_time=max_time, batch=gen_batch)
    else:
        gens = []
        for i, (text, n) in enumerate(zip(texts, targets)):
            # edit_cap: the limit `strata edit` itself sets, so a rewrite longer than the right one
            # runs to its end as it would for a user
            cap = n + 64
            if edit_cap:
                from strata.edit import rewrite_token_limit

                cap = max(cap, rewrite_token_limit(len(tokenizer.encode(tasks[i]["original"]).ids)))
            gens.append(engine(text, cap, eos, task_seconds, copy_bias))
            log(f"  task {i + 1}/{len(texts)} {tasks[i]['kind']}: exact {gens[-1][1] and gens[-1][0] == tasks[i]['rewritten']}"
                f" ({engine.tokens / max(engine.seconds, 1e-9):.0f} tok/s so far)")
    per_kind, samples = {}, []
    for t, (text, stopped) in zip(tasks, gens):
        ok = stopped and text == t["rewritten"]
        k = per_kind.setdefault(t["kind"], {"tasks": 0, "exact": 0, "parse": 0, "stopped": 0, "similarity": 0.0})
        k["tasks"] += 1
        k["exact"] += int(ok)
        k["parse"] += int(parses(text))
        k["stopped"] += int(stopped)
        if t["kind"] == "unchanged":
            k["similarity"] += difflib.SequenceMatcher(None, t["original"].splitlines(), text.splitlines(),
                                                       autojunk=False).ratio()
        samples.append({"kind": t["kind"], "path": t["path"], "instruction": t["instruction"], "exact": ok,
                        "stopped": stopped, "parses": parses(text), "chars": len(t["original"]),
                        "output": text if not ok else None})
    for k in per_kind.values():
        n = k["tasks"]
        k["rate"] = k["exact"] / n
        k["parse_rate"] = k["parse"] / n
        k["similarity"] = k["similarity"] / n if k["similarity"] else None
    n = sum(k["tasks"] for k in per_kind.values())
    res = {"per_kind": per_kind, "tasks": n,
           "overall": sum(k["exact"] for k in per_kind.values()) / max(n, 1),
           "parse_rate": sum(k["parse"] for k in per_kind.values()) / max(n, 1),
           "files_chars": [min(len(t["original"]) for t in tasks), max(len(t["original"]) for t in tasks)],
           "seconds": round(time.time() - t0, 1)}
    if engine is not None:
        res["engine"] = {"name": "strata", "draft": "suffix", "copy_bias": copy_bias, "tokens": engine.tokens,
                         "tokens_per_s": round(engine.tokens / max(engine.seconds, 1e-9), 1)}
    log(f"edits: overall {res['overall']:.3f}, parse {res['parse_rate']:.3f}, "
        + ", ".join(f"{k} {v['rate']:.2f}" for k, v in sorted(per_kind.items())) + f" ({res['seconds']}s)")
    return res, samples


@torch.no_grad()
def eval_forced(model, tokenizer, tasks, device, log, rows_path=None, copy_biases=()):
    """Teacher-forced exact match: one forward pass over prompt + reference rewrite +
    <|endoftext|> per task; a task counts as exact when the model's top token is the reference
    token at every position of the rewrite and at its end. Greedy decoding reproduces the
    reference exactly when (ties and a different tokenization of the same text aside) this holds,
    so it measures greedy exact match at the cost of one prefill instead of a generation. Also
    reported: the share of the rewrite's tokens predicted right, and of its changed tokens
    (make_rows.change_marks, the tokens that carry the edit). With rows_path, each task's row is
    written there as soon as it is done, so a run stopped by a time limit keeps the tasks it did.
    copy_biases: also count, per bias, the tasks greedy decoding gets exact under `strata edit`'s
    copy bias of that size (copy_bias.py; the row's `copy_exact` lists the biases it passes)."""
    import copy_bias
    import copy_index
    import make_rows

    eos = tokenizer.token_to_id(prompts.ENDOFTEXT)
    skip = copy_index.special_ids(tokenizer)
    per_kind, rows, t0 = {}, [], time.time()
    sink = open(rows_path, "w", encoding="utf-8") if rows_path else None
    for n, t in enumerate(tasks):
        prompt = prompts.edit_prompt(t["filename"], t["original"], t["instruction"])
        enc = tokenizer.encode(prompts.edit_example(t["filename"], t["original"], t["instruction"], t["rewritten"]))
        marks = make_rows.change_marks(enc.offsets, len(prompt), make_rows.changed_spans(t["original"], t["rewritten"]))
        ids = torch.tensor([enc.ids], device=device)
        with _autocast(device):
            logits = model(input_ids=ids[:, :-1]).logits[0]
        right = (logits.argmax(-1) == ids[0, 1:]).cpu()
        m = torch.from_numpy(marks[1:].astype("int64"))
        rew, chg = m > 0, m == 2
        exact = bool(right[rew].all()) and enc.ids[-1] == eos
        k = per_kind.setdefault(t["kind"], {"tasks": 0, "exact": 0, "token_acc": 0.0, "changed": 0, "changed_right": 0})
        k["tasks"] += 1
        k["exact"] += int(exact)
        k["token_acc"] += float(right[rew].float().mean())
        k["changed"] += int(chg.sum())
        k["changed_right"] += int(right[chg].sum())
        first = int(torch.nonzero(rew & ~right)[0]) - int(torch.nonzero(rew)[0]) if not exact else None
        rows.append({"kind": t["kind"], "path": t["path"], "exact": exact, "first_wrong": first,
                     "changed_wrong": int(chg.sum() - right[chg].sum()), "changed": int(chg.sum())})
        if copy_biases:
            _, _, m = copy_bias.rewrite_margins(logits, enc.ids, rew, skip)
            ok = [b for b in copy_biases if enc.ids[-1] == eos and copy_bias.exact_under(m, b)]
            rows[-1]["copy_exact"] = ok
            for b in ok:
                k.setdefault("copy_exact", {}).setdefault(str(b), 0)
                k["copy_exact"][str(b)] += 1
        if sink:
            sink.write(json.dumps(rows[-1]) + "\n")
            sink.flush()
        if (n + 1) % 20 == 0:
            log(f"  forced {n + 1}/{len(tasks)}: {sum(r['exact'] for r in rows)} exact ({time.time() - t0:.0f}s)")
    if sink:
        sink.close()
    for k in per_kind.values():
        k["rate"] = k["exact"] / k["tasks"]
        k["token_acc"] /= k["tasks"]
        k["changed_acc"] = k["changed_right"] / max(k["changed"], 1)
    n = len(rows)
    res = {"per_kind": per_kind, "tasks": n, "overall": sum(r["exact"] for r in rows) / max(n, 1),
           "changed_acc": sum(k["changed_right"] for k in per_kind.values()) / max(sum(k["changed"] for k in per_kind.values()), 1),
           "seconds": round(time.time() - t0, 1)}
    log(f"forced: overall {res['overall']:.3f} ({sum(r['exact'] for r in rows)}/{n}), changed tokens right "
        f"{res['changed_acc']:.3f}, " + ", ".join(f"{k} {v['exact']}" for k, v in sorted(per_kind.items())))
    if copy_biases:
        res["copy_exact"] = {str(b): sum(b in r["copy_exact"] for r in rows) for b in copy_biases}
        log("forced with strata edit's copy bias: " + ", ".join(f"bias {b}: {v}/{n}" for b, v in res["copy_exact"].items()))
    return res, rows


def chat_prompts(heldout_rows, n, seed=5):
    """Conversations about held-out functions (the first user turn of chat_data's shapes) and a
    few general ones."""
    rng = random.Random(seed)
    convs = [[{"role": "user", "content": "What does `os.path.join` do?"}],
             [{"role": "user", "content": "Write a Python function `is_even(n)` that returns whether n is even."}]]
    rows = [r for r in heldout_rows if r["path"].endswith(".py")]
    rng.shuffle(rows)
    for row in rows:
        if len(convs) >= n:
            break
        cands = chat_data.candidates(row["text"])
        if not cands:
            continue
        node, source, summary, doc = rng.choice(cands)
        mod = chat_data.module_name(row["path"])
        q = rng.choice((f"What does `{node.name}` in `{mod}` do?",
                        f"What arguments does `{node.name}` take?\n\n```python\n{source.rstrip()}\n```",
                        f"Explain this function:\n\n```python\n{source.rstrip()}\n```",
                        f"Write a Python function `{chat_data.signature(node)}` that does this: {summary}"))
        convs.append([{"role": "user", "content": q}])
    return convs


def eval_chat(model, tokenizer, convs, device, engine=None):
    im_end = tokenizer.token_to_id(prompts.IM_END)
    texts = []
    for c in convs:
        texts.append("".join(f"{prompts.IM_START}{m['role']}\n{m['content']}{prompts.IM_END}\n" for m in c)
                     + f"{prompts.IM_START}assistant\n")
    if engine is None:
        gens = generate(model, tokenizer, texts, device, max_new=256, stop_id=im_end, batch=64)
    else:
        gens = [engine(t, 256, im_end, 60.0) for t in texts]
    return [{"messages": c, "reply": g[0], "stopped": g[1]} for c, g in zip(convs, gens)]


def load_model(args, device):
    from tokenizers import Tokenizer
    from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

    import train as T

    T.patch_experts()  # same function, one matrix product instead of a loop over experts
    if args.model:
        model = Qwen3NextForCausalLM.from_pretrained(args.model, dtype=torch.float32)
        tokenizer = Tokenizer.from_file(str(args.model / "tokenizer.json"))
    else:
        config = Qwen3NextConfig.from_json_file(str(args.ckpt / "config.json"))
        model = Qwen3NextForCausalLM(config)
        T.load_checkpoint(model, args.ckpt)
        tokenizer = Tokenizer.from_file(str(args.tok / "tokenizer.json"))
    return model.to(device).eval(), tokenizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", type=Path, help="an exported Hugging Face folder")
    ap.add_argument("--ckpt", type=Path, help="a train.py output folder (config.json + ckpt_a/b)")
    ap.add_argument("--tok", type=Path, help="tokenizer folder (with --ckpt)")
    ap.add_argument("--tasks", type=Path, required=True)
    ap.add_argument("--heldout", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--per-kind", type=int, default=20)
    ap.add_argument("--skip-per-kind", type=int, default=0, help="leave out the first N tasks of each kind")
    ap.add_argument("--bpb-files", type=int, default=300)
    ap.add_argument("--bpb-window", type=int, default=8192)
    ap.add_argument("--chats", type=int, default=8)
    ap.add_argument("--max-time", type=float, default=None, help="seconds for all edit generations")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: edits,bpb,chat")
    ap.add_argument("--forced", action="store_true",
                    help="edits teacher-forced (eval_forced: one forward pass per task) instead of generated")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--f32", action="store_true", help="no bf16 autocast on the GPU (float32 throughout, as on the CPU)")
    ap.add_argument("--gen-batch", type=int, default=128, help="prompts per transformers generate() call")
    ap.add_argument("--engine", choices=("transformers", "strata"), default="transformers",
                    help="generate with transformers (batched) or with strata itself (drafting on; needs --model)")
    ap.add_argument("--threads", type=int, default=None, help="strata engine threads")
    ap.add_argument("--task-seconds", type=float, default=120.0, help="strata engine: time budget per generation")
    ap.add_argument("--edit-cap", action="store_true",
                    help="strata engine: let each rewrite run to `strata edit`'s own limit (2x the file's tokens + 64), "
                         "not the right answer's length + 64")
    ap.add_argument("--copy-bias", type=float, default=0.0,
                    help="strata engine: the copy bias of the edits (strata edit's default: strata.edit.EDIT_COPY_BIAS)")
    ap.add_argument("--copy-biases", default="",
                    help="with --forced: also count the tasks exact under strata edit's copy bias of these sizes "
                         "(a comma list, e.g. 2)")
    args = ap.parse_args()
    try:
        args.copy_biases = [float(b) for b in args.copy_biases.split(",") if b.strip()]
    except ValueError:
        raise SystemExit(f"--copy-biases: a comma list of numbers, not {args.copy_biases!r}")
    if args.copy_bias and args.engine != "strata":
        raise SystemExit("--copy-bias needs --engine strata")
    global BF16_ON_GPU
    BF16_ON_GPU = not args.f32
    if args.engine == "strata" and not args.model:
        raise SystemExit("--engine strata needs --model (an exported folder)")
    args.out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, args.skip.split(",")))

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    if args.device == "cuda" or args.forced:
        import train as T

        T.choose_gdn(log, "auto", args.device)
    model, tokenizer = load_model(args, args.device)
    results = {"model": str(args.model or args.ckpt), "engine": args.engine,
               "math": "bf16 autocast" if BF16_ON_GPU and str(args.device).startswith("cuda") else "f32"}
    engine = StrataEngine(args.model, args.threads) if args.engine == "strata" else None
    heldout = list(iter_corpus(args.heldout))
    if args.forced:
        tasks = load_tasks(args.tasks, args.per_kind, args.skip_per_kind)
        results["forced"], _ = eval_forced(model, tokenizer, tasks, args.device, log, args.out / "forced_tasks.jsonl",
                                           args.copy_biases)
        (args.out / "eval.json").write_text(json.dumps(results, indent=1))
    elif "edits" not in skip:
        tasks = load_tasks(args.tasks, args.per_kind)
        results["edits"], samples = eval_edits(model, tokenizer, tasks, args.device, args.max_time, log,
                                               args.gen_batch, engine, args.task_seconds, args.edit_cap,
                                               args.copy_bias)
        (args.out / "edit_samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
        (args.out / "eval.json").write_text(json.dumps(results, indent=1))
    if "bpb" not in skip:
        code = [r for r in heldout if r["path"].endswith(".py")][:args.bpb_files]
        results["heldout_bpb"] = bits_per_byte(model, tokenizer, code, args.device, args.bpb_window)
        log(f"bpb {json.dumps(results['heldout_bpb'])}")
        (args.out / "eval.json").write_text(json.dumps(results, indent=1))
    if "chat" not in skip:
        results["chat"] = eval_chat(model, tokenizer, chat_prompts(heldout, args.chats), args.device, engine)
        for c in results["chat"][:3]:
            log(f"chat: {c['messages'][-1]['content'][:80]!r} -> {c['reply'][:200]!r}")
    (args.out / "eval.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
