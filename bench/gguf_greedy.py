"""Greedy agreement on GGUF files: strata against llama.cpp, and each engine against ITSELF.

Two engines that compute the same math with f32 arithmetic in different orders give logits that
differ in the last bits; whether greedy decoding then gives the same tokens for 64 steps depends
on how often the model's top-1 / top-2 logit gap is smaller than that difference. This script
measures both sides of that on the same file and the same token ids:

* every engine runs in several *variants* that change only the order of f32 operations, not the
  math: llama.cpp with 2 threads (the reference) or 1, the prompt in one batch or token by token,
  a smaller micro-batch (n_ubatch), flash attention on; strata with 2 threads or 1, the prompt in
  one call or token by token (strata's rows are batch invariant, so its variants must be
  bit-identical to each other), and a second process of the same configuration (run to run);
* each variant decodes greedily (the prompt's next token, then --steps T=1 steps) and, in a second
  pass, is forced along the llama.cpp reference's greedy tokens, so that all variants' logits can
  be compared step by step on the same inputs;
* for every pair the table gives: greedy tokens equal (common prefix, of steps+1), how many forced
  steps are bit-identical, the median and largest relative L2 of the logits, and at the first
  forced step whose argmax differs: the reference's top-1 minus top-2 margin there and how much
  the other variant moved that gap. The reference's margins along the path (median and the
  smallest) are printed per prompt: a greedy run survives 64 steps only if the logit differences
  stay below the smallest margins.

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/gguf_greedy.py \\
        ANCHORS/qwen3moe-tiny/model-q8_0.gguf ANCHORS/qwen3next-tiny/model-q8_0.gguf \\
        --llama-python VENV/bin/python [--prompts 16,256] [--steps 64] [--md-out F]
    # a trained model's real text instead of random ids: --text FILE --tokenizer tokenizer.json

Random prompts are NumPy default_rng(--seed) draws over the vocabulary, the first --prompts
lengths of one draw.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vs_anchors  # noqa: E402 - the engine adapters

# name -> (engine, options); the first of each engine is that engine's reference
VARIANTS = {
    "llama.cpp": ("llama.cpp", {}),
    "llama.cpp again": ("llama.cpp", {}),
    "llama.cpp 1 thread": ("llama.cpp", {"threads": 1}),
    "llama.cpp prompt token by token": ("llama.cpp", {"prompt": "tokens"}),
    "llama.cpp n_ubatch 16": ("llama.cpp", {"ubatch": 16}),
    "llama.cpp flash attention": ("llama.cpp", {"flash_attn": True}),
    "strata": ("strata", {}),
    "strata again": ("strata", {}),
    "strata 1 thread": ("strata", {"threads": 1}),
    "strata prompt token by token": ("strata", {"prompt": "tokens"}),
}
PAIRS = [("llama.cpp", v) for v in VARIANTS if v.startswith("llama.cpp ")] + \
        [("strata", v) for v in VARIANTS if v.startswith("strata ")] + [("llama.cpp", "strata")]


def run_variant(adapter, prompt: list[int], mode: str, steps: int, forced: list[int] | None):
    """(greedy tokens, logits along `forced` or along its own greedy path [steps+1, V])."""
    import numpy as np

    def start():
        adapter.reset()
        if mode == "tokens":
            for t in prompt[:-1]:
                adapter.step(t)
            return adapter.step(prompt[-1])
        return adapter.prefill(prompt)

    rows = [np.asarray(start(), np.float32)]
    greedy = [int(np.argmax(rows[0]))]
    for _ in range(steps):
        rows.append(np.asarray(adapter.step(greedy[-1]), np.float32))
        greedy.append(int(np.argmax(rows[-1])))
    if forced is not None and forced != greedy:
        rows = [np.asarray(start(), np.float32)]
        for t in forced[:-1]:
            rows.append(np.asarray(adapter.step(t), np.float32))
    return greedy, np.stack(rows)


def worker(job_path: str) -> None:
    import numpy as np

    with open(job_path) as f:
        job = json.load(f)
    o = job["options"]
    threads = o.get("threads", job["threads"])
    if job["engine"] == "llama.cpp":
        adapter = vs_anchors.LlamaAdapter(job["gguf"], threads, job["gguf"], "f32",
                                          ubatch=o.get("ubatch", 512), flash_attn=o.get("flash_attn", False))
    else:
        adapter = vs_anchors.StrataAdapter(job["gguf"], threads, job["gguf"], "f32")
    out = {}
    for key, prompt in job["prompts"].items():
        forced = job["forced"].get(key)
        greedy, logits = run_variant(adapter, prompt, o.get("prompt", "batch"), job["steps"], forced)
        np.save(f"{job['out']}-{key}.npy", logits, allow_pickle=False)
        out[key] = greedy
    with open(job["out"] + ".json", "w") as f:
        json.dump(out, f)


def launch(python: str, job: dict, tmp: str, tag: str) -> dict:
    job = dict(job, out=os.path.join(tmp, tag))
    path = os.path.join(tmp, tag + ".job.json")
    with open(path, "w") as f:
        json.dump(job, f)
    r = subprocess.run([python, os.path.abspath(__file__), "--worker", path], capture_output=True, text=True,
                       timeout=3600)
    if r.returncode != 0:
        sys.exit(f"{tag}: {(r.stderr.strip().splitlines() or ['failed'])[-1]}")
    with open(job["out"] + ".json") as f:
        return json.load(f)


def compare(ref_tokens, ref_logits, tokens, logits) -> dict:
    import numpy as np

    common = next((i for i, (x, y) in enumerate(zip(ref_tokens, tokens)) if x != y), len(ref_tokens))
    diff = np.linalg.norm(logits - ref_logits, axis=1) / np.linalg.norm(ref_logits, axis=1)
    same = next((i for i in range(len(logits)) if not np.array_equal(logits[i], ref_logits[i])), len(logits))
    a, b = ref_logits.argmax(1), logits.argmax(1)
    flips = np.nonzero(a != b)[0]
    res = {"greedy": common, "identical": same, "rel_med": float(np.median(diff)), "rel_max": float(diff.max()),
           "flips": int(len(flips)), "maxabs": float(np.abs(logits - ref_logits).max())}
    if len(flips):
        i = int(flips[0])
        r, o = ref_logits[i], logits[i]
        res["flip_step"] = i
        res["flip_margin"] = float(r[a[i]] - r[b[i]])  # the reference's gap between the two tokens
        res["flip_moved"] = float((r[a[i]] - r[b[i]]) - (o[a[i]] - o[b[i]]))
    return res


def margins(logits):
    import numpy as np

    top2 = np.sort(logits, axis=1)[:, -2:]
    return top2[:, 1] - top2[:, 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", nargs="*")
    ap.add_argument("--llama-python", metavar="VENV/bin/python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", default="16,256", help="prompt lengths (comma separated)")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--text", help="prompts from this text file instead of random ids (needs --tokenizer)")
    ap.add_argument("--tokenizer", help="tokenizer.json that --text is encoded with")
    ap.add_argument("--variants", help="comma-separated subset of: " + ", ".join(VARIANTS))
    ap.add_argument("--md-out")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if not args.gguf or not args.llama_python:
        ap.error("give .gguf files and --llama-python")
    if bool(args.text) != bool(args.tokenizer):
        ap.error("--text and --tokenizer go together")
    import numpy as np

    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "app"))
    from strata.gguf import open_gguf, spec_from_metadata

    lengths = [int(x) for x in args.prompts.split(",")]
    names = list(VARIANTS) if not args.variants else ["llama.cpp"] + [
        v.strip() for v in args.variants.split(",") if v.strip() != "llama.cpp"]
    for v in names:
        if v not in VARIANTS:
            ap.error(f"unknown variant {v!r}")
    if args.text:
        from tokenizers import Tokenizer

        with open(args.text, encoding="utf-8") as f:
            ids = Tokenizer.from_file(args.tokenizer).encode(f.read()).ids
        if len(ids) < max(lengths):
            sys.exit(f"{args.text}: {len(ids)} tokens, fewer than {max(lengths)}")
        source = f"the first N tokens of {os.path.basename(args.text)}"
    lines = [f"Greedy tokens: the prompt's next token and {args.steps} T=1 steps ({args.steps + 1} tokens); "
             f"logits compared along the llama.cpp reference's greedy path; {args.threads} threads unless named.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.gguf:
            path = os.path.abspath(path)
            if not args.text:
                vocab = spec_from_metadata(open_gguf(path))["vocab_size"]
                ids = np.random.default_rng(args.seed).integers(0, vocab, max(lengths)).tolist()
                source = f"random ids (default_rng({args.seed}))"
            prompts = {str(n): ids[:n] for n in lengths}
            job = {"gguf": path, "threads": args.threads, "steps": args.steps, "prompts": prompts, "forced": {}}
            greedy, logits = {}, {}
            for i, v in enumerate(names):
                engine, options = VARIANTS[v]
                python = args.llama_python if engine == "llama.cpp" else sys.executable
                forced = {} if i == 0 else {k: greedy["llama.cpp"][k] for k in prompts}
                greedy[v] = launch(python, dict(job, engine=engine, options=options, forced=forced), tmp, f"v{i}")
                logits[v] = {k: np.load(os.path.join(tmp, f"v{i}-{k}.npy")) for k in prompts}
            name = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
            for k in prompts:
                m = margins(logits["llama.cpp"][k])
                block = [f"**{name}**, prompt of {k} {source}: llama.cpp's top-1 minus top-2 logit along its "
                          f"greedy path: median {np.median(m):.3g}, smallest {m.min():.3g} "
                          f"({int((m < 1e-2).sum())} of {len(m)} steps below 0.01)", "",
                          "| reference | other | greedy tokens equal | first steps bit-identical | logits rel. L2 median "
                          "[max] | max abs diff | argmax flips | first flip: step, reference margin, gap moved by |",
                          "|---|---|---|---|---|---|---|---|"]
                for a, b in PAIRS:
                    if a not in greedy or b not in greedy:
                        continue
                    c = compare(greedy[a][k], logits[a][k], greedy[b][k], logits[b][k])
                    flip = (f"{c['flip_step']}, {c['flip_margin']:.3g}, {c['flip_moved']:.3g}"
                            if c["flips"] else "none")
                    block.append(f"| {a} | {b} | {c['greedy']} of {len(greedy[a][k])} | {c['identical']} of "
                                 f"{len(logits[a][k])} | {c['rel_med']:.2e} [{c['rel_max']:.2e}] | {c['maxabs']:.3g} | "
                                 f"{c['flips']} | {flip} |")
                block.append("")
                print("\n".join(block), flush=True)
                lines += block
    if args.md_out:
        with open(args.md_out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
