"""End-to-end T=1 decode on one random checkpoint: strata's webgpu and cpu backends against
transformers (CUDA eager where there is a GPU), for the H200 measurement of bench/h200_webgpu.sh.

    python bench/webgpu_decode.py make DIR [--preset bench] [--dtype bfloat16]
    python bench/webgpu_decode.py strata DIR --backend webgpu|cpu [--tokens 64] [--max-seconds S]
    python bench/webgpu_decode.py hf DIR [--device cuda] [--tokens 64] [--max-seconds S]
    python bench/webgpu_decode.py ceiling            # torch copy bandwidth and cuBLAS f16 matvec
    python bench/webgpu_decode.py table RESULTS.jsonl

Each measuring subcommand prints one JSON line (and appends it to --out). Procedure, the same
for every engine: a fixed random prompt of --prompt-len ids in one call (last row only), then
--tokens greedy T=1 calls, one per token; a warm-up pass of the prompt and 4 steps first
(pipelines compiled, weights uploaded), then a reset and the timed pass. --max-seconds stops
the timed pass early (the result says how many tokens it got), so a slow backend still reports.
Runs in its own process per engine so that a hang is bounded by the caller's `timeout`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def prompt_ids(vocab: int, n: int, seed: int = 1) -> list[int]:
    import numpy as np

    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def emit(result: dict, out: str | None) -> None:
    line = json.dumps(result)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def greedy_decode(prefill, step, vocab: int, args) -> dict:
    """prefill(ids) -> last-row logits, step(id) -> logits; returns timings and the greedy ids."""
    import numpy as np

    prompt = prompt_ids(vocab, args.prompt_len)
    clock = time.perf_counter
    t = clock()
    tok = int(np.argmax(prefill(prompt)))
    for _ in range(4):
        tok = int(np.argmax(step(tok)))
    warmup_s = clock() - t
    return {"warmup_s": warmup_s, "prompt": prompt, **timed_pass(prefill, step, prompt, args)}


def timed_pass(prefill, step, prompt, args) -> dict:
    import numpy as np

    clock = time.perf_counter
    t = clock()
    tok = int(np.argmax(prefill(prompt)))
    prefill_s = clock() - t
    out = [tok]
    t = clock()
    for _ in range(args.tokens):
        tok = int(np.argmax(step(tok)))
        out.append(tok)
        if args.max_seconds and clock() - t > args.max_seconds:
            break
    dt = clock() - t
    n = len(out) - 1
    return {"prefill_s": prefill_s, "decode_tokens": n, "decode_s": dt, "tok_s": n / dt, "greedy": out}


def cmd_make(args) -> None:
    sys.path.insert(0, os.path.join(REPO, "app"))
    from strata.testing.devmodel import write_random_model

    t = time.perf_counter()
    write_random_model(args.dir, arch=args.arch, seed=0, preset=args.preset, dtype=args.dtype)
    size = sum(os.path.getsize(os.path.join(args.dir, f)) for f in os.listdir(args.dir))
    emit({"what": "make", "dir": args.dir, "arch": args.arch, "preset": args.preset, "dtype": args.dtype,
          "bytes": size, "seconds": time.perf_counter() - t}, args.out)


def cmd_strata(args) -> None:
    sys.path.insert(0, os.path.join(REPO, "app"))
    import strata

    threads = args.threads or min(16, os.cpu_count() or 1)
    t = time.perf_counter()
    eng = strata.load(args.dir, backend=args.backend, threads=threads)
    load_s = time.perf_counter() - t

    def prefill(ids):
        out = eng.run(ids, last_only=True)
        eng.commit(len(ids))
        return out[0]

    def step(tok):
        out = eng.run([tok])
        eng.commit(1)
        return out[0]

    vocab = eng.vocab_size
    prompt = prompt_ids(vocab, args.prompt_len)
    clock = time.perf_counter
    t = clock()
    prefill(prompt)
    for tok in prompt[:4]:
        step(tok)
    warmup_s = clock() - t
    eng.reset()
    res = timed_pass(prefill, step, prompt, args)
    info = {"backend": getattr(eng, "backend", args.backend), "threads": threads}
    if args.backend == "webgpu":
        from strata import webgpu

        try:
            info["adapter"] = webgpu.describe(webgpu.backend_adapter())["device"]
        except Exception as exc:  # the timing above stands; the name is only for the report
            info["adapter"] = f"? ({exc})"
    emit({"what": f"strata-{args.backend}", "load_s": load_s, "warmup_s": warmup_s, **info, **res}, args.out)


def cmd_hf(args) -> None:
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        device = "cpu"
    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}[args.dtype]
    t = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.dir, dtype=dtype, attn_implementation="eager").to(device).eval()
    load_s = time.perf_counter() - t
    state = {"cache": None}

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def forward(ids):
        with torch.no_grad():
            out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long, device=device),
                        past_key_values=state["cache"], use_cache=True, logits_to_keep=1)
        state["cache"] = out.past_key_values
        logits = out.logits[0, -1].float().cpu().numpy()  # .cpu() synchronizes
        return logits

    def prefill(ids):
        state["cache"] = None
        return forward(ids)

    def step(tok):
        return forward([tok])

    vocab = model.config.get_text_config().vocab_size
    res = greedy_decode(prefill, step, vocab, args)
    sync()
    res.pop("prompt")
    emit({"what": f"transformers-{device}-{args.dtype}", "dtype": args.dtype, "attn": "eager", "load_s": load_s,
          "torch": torch.__version__, "transformers": transformers.__version__,
          "gpu": torch.cuda.get_device_name() if device == "cuda" else None, **res}, args.out)


def cmd_ceiling(args) -> None:
    """The card's own ceilings through torch: device-to-device copy (bytes read + written) and
    cuBLAS f16 matrix-vector products of the matmul probe's shape, median of CUDA-event timings."""
    import statistics

    import torch

    if not torch.cuda.is_available():
        emit({"what": "ceiling", "skipped": "no CUDA device"}, args.out)
        return

    def median_ms(fn, reps=20):
        for _ in range(3):
            fn()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)

    n = 1 << 30  # 2 GiB of f16 each way: far past the 60 MB L2
    src = torch.randn(n, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    copy_ms = median_ms(lambda: dst.copy_(src))
    copy_gbs = 2 * src.nbytes / (copy_ms * 1e-3) / 1e9
    del src, dst
    res = {"what": "ceiling", "gpu": torch.cuda.get_device_name(), "copy_gb_s": copy_gbs}
    rows, cols = args.rows, args.cols
    # rotate through enough matrices that the set is past L2, as the weights of a model would be
    k = max(1, (256 << 20) // (rows * cols * 2) + 1)
    ws = [torch.randn(rows, cols, device="cuda", dtype=torch.float16) for _ in range(k)]
    for t in (1, 4, 16):
        x = torch.randn(cols, t, device="cuda", dtype=torch.float16)
        ms = median_ms(lambda: [w @ x for w in ws]) / k
        res[f"cublas_f16_{rows}x{cols}_T{t}_us"] = ms * 1e3
        res[f"cublas_f16_{rows}x{cols}_T{t}_gb_s"] = rows * cols * 2 / (ms * 1e-3) / 1e9
    emit(res, args.out)


def cmd_table(args) -> None:
    """One compact table of everything the run measured (results.jsonl lines)."""
    rows = []
    with open(args.results) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    by = {}
    for r in rows:
        by.setdefault(r.get("what"), []).append(r)
    out = []
    for r in by.get("matmul", []):
        us, ratio = r["us"], r["cost_ratio"]
        ts = " ".join(f"T{t}={float(us[t]):.1f}us({ratio[t]:.2f}x)" for t in us)
        out.append(f"wgsl matmul {r['format']} {r['shape'][0]}x{r['shape'][1]} ({r['weight_bytes'] / 2**20:.0f} MiB): "
                   f"T1 {r['gb_per_s_t1']:.4g} GB/s | {ts}")
    for r in by.get("ceiling", []):
        if "skipped" in r:
            out.append(f"torch ceiling: skipped ({r['skipped']})")
            continue
        extra = " ".join(f"{k.split('_', 3)[-1]}={v:.1f}" for k, v in r.items() if k.startswith("cublas") and k.endswith("_us"))
        out.append(f"torch copy {r['copy_gb_s']:.4g} GB/s (read+write); cuBLAS f16 us: {extra}")
    dec = {}
    for what in sorted(by, key=lambda w: (not w.startswith("strata-webgpu"), not w.startswith("strata"), w)):
        if not what.startswith(("strata-", "transformers-")):
            continue
        for r in by[what]:
            dec[what] = r
            extra = f" adapter={r['adapter']}" if "adapter" in r else ""
            extra += f" threads={r['threads']}" if "threads" in r else ""
            out.append(f"decode {what:26s} {r['tok_s']:9.2f} tok/s ({r['decode_tokens']} tok in {r['decode_s']:.2f} s;"
                       f" prefill {r['prefill_s']:.3f} s, load {r['load_s']:.1f} s){extra}")

    def agreement(a: list, b: list) -> str:
        n = min(len(a), len(b))
        same = next((i for i in range(n) if a[i] != b[i]), n)
        return f"EQUAL over {n} tokens" if same == n else f"first {same} of {n} tokens agree"

    cpu, gpu = dec.get("strata-cpu"), dec.get("strata-webgpu")
    if gpu and cpu:
        out.append(f"greedy strata webgpu vs cpu: {agreement(gpu['greedy'], cpu['greedy'])}")
    for what, r in dec.items():
        if what.startswith("transformers-") and cpu:
            out.append(f"greedy {what} vs strata cpu: {agreement(r['greedy'], cpu['greedy'])}")
    hf = next((r for w, r in dec.items() if w.startswith("transformers-cuda-bfloat16")), None) or next(
        (r for w, r in dec.items() if w.startswith("transformers-") and w.endswith("bfloat16")), None)
    if hf and gpu:
        out.append(f"decode speed strata webgpu / transformers {hf['what'][13:]}: {gpu['tok_s'] / hf['tok_s']:.3f}x")
    if hf and cpu:
        out.append(f"decode speed strata cpu / transformers {hf['what'][13:]}: {cpu['tok_s'] / hf['tok_s']:.3f}x")
    for r in by.get("make", []):
        out.append(f"model: {r['arch']} preset={r['preset']} {r['dtype']} {r['bytes'] / 1e6:.0f} MB")
    print("\n".join(out) if out else "(no results)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    p.add_argument("--arch", default="qwen3_next")
    p.add_argument("--preset", default="bench")
    p.add_argument("--dtype", default="bfloat16")
    for name in ("strata", "hf"):
        p = sub.add_parser(name)
        p.add_argument("dir")
        p.add_argument("--tokens", type=int, default=64)
        p.add_argument("--prompt-len", type=int, default=16)
        p.add_argument("--max-seconds", type=float, default=0.0)
        if name == "strata":
            p.add_argument("--backend", default="cpu", choices=("cpu", "webgpu"))
            p.add_argument("--threads", type=int, default=0)
        else:
            p.add_argument("--device", default="cuda")
            p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    p = sub.add_parser("ceiling")
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=8192)
    p = sub.add_parser("table")
    p.add_argument("results")
    for p in sub.choices.values():
        if p.prog.split()[-1] != "table":
            p.add_argument("--out", default=None, help="append the JSON line to this file")
    args = ap.parse_args()
    {"make": cmd_make, "strata": cmd_strata, "hf": cmd_hf, "ceiling": cmd_ceiling, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    main()
