"""End-to-end T=1 decode on one random checkpoint: strata's webgpu and cpu backends against
transformers (CUDA eager where there is a GPU), for the H200 measurement of bench/h200_webgpu.sh.

    python bench/webgpu_decode.py make DIR [--preset bench|a3b] [--dtype bfloat16] [--repeat-experts]
                                           [--set key=value ...]
    python bench/webgpu_decode.py make-gguf DIR OUT.gguf [--mix Q4_K_M|Q5_K_M|Q8_0|Q6_K|IQ4_XS]
    python bench/webgpu_decode.py strata DIR|FILE.gguf --backend webgpu|cpu [--tokens 64] [--max-seconds S]
                                           [--window-cost 4,8] [--warm-prompt N] [--label NAME]
    python bench/webgpu_decode.py hf DIR [--device cuda] [--tokens 64] [--max-seconds S] [--label NAME]
    python bench/webgpu_decode.py ceiling            # torch copy bandwidth and cuBLAS f16 matvec
    python bench/webgpu_decode.py table RESULTS.jsonl

Each measuring subcommand prints one JSON line (and appends it to --out). Procedure, the same
for every engine: a fixed random prompt of --prompt-len ids in one call (last row only), then
--tokens greedy T=1 calls, one per token; a warm-up pass of the prompt and 4 steps first
(pipelines compiled, weights uploaded), then more greedy steps until --warm-seconds (default
0.5) of steps have run, then a reset and the timed pass. --max-seconds stops
the timed pass early (the result says how many tokens it got), so a slow backend still reports.
Runs in its own process per engine so that a hang is bounded by the caller's `timeout`.

Why --warm-seconds: the GPU raises its clocks only after some time under load. On the H200
(bench/webgpu_steps.py, 2026-12-03) the first 7-13 steps after the 80B-A3B shape's warm-up
(a long, host-bound prefill) took 6.8-10.5 ms each on the GPU's side, then 3.1 ms: with 4
warm-up steps a 32-token timed pass was half low-clock steps and read 6.4 ms per token. It
says nothing about the engine; --warm-seconds 0 measures that cold start.

strata also reports the weight bytes a T=1 step touches (the engine's window telemetry: every
dense weight once, the chosen experts once) over the step time, and with --window-cost the
median time of windows of T rows (run T tokens, commit 1) against T=1: cost(T)/cost(1).
--repeat-experts writes one random block for every expert of a shape (a timing model of many
gigabytes in seconds; routing stays random); --set overrides preset fields (small rehearsals).

Quantized weights: `make-gguf` converts a checkpoint folder made by `make` into a GGUF file in
the mix llama.cpp's quantizer gives (Q4_K_M: Q4_K with Q6_K for attention v, ffn_down and the
output head, Q5_0 where rows are not whole 256-blocks, the router F32; Q5_K_M alike with Q5_K /
Q5_1; Q8_0; Q6_K), with the tests' GGUF writer (tests/gguf_helpers.py; needs the `gguf` package;
meant for the anchor-size models, it holds the model in memory as f32). `strata FILE.gguf
--backend webgpu|cpu` then times it like a folder (T=1 decode, --window-cost for cost(T)).
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
    warm = warm_steps(step, tok, args.warm_seconds)
    warmup_s = clock() - t
    return {"warmup_s": warmup_s, "warm_steps": warm, "prompt": prompt, **timed_pass(prefill, step, prompt, args)}


def warm_steps(step, tok: int, seconds: float) -> int:
    """Greedy T=1 steps from tok: at least 4, then on until `seconds` of them have run (the
    GPU's clocks up, see the module's doc); returns how many ran."""
    import numpy as np

    t = time.perf_counter()
    n = 0
    while n < 4 or time.perf_counter() - t < seconds:
        tok = int(np.argmax(step(tok)))
        n += 1
    return n


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

    overrides = {}
    for kv in args.set or []:
        k, _, v = kv.partition("=")
        overrides[k] = int(v)
    blocks: dict = {}

    def repeated(name, shape):
        if ".mlp.experts." not in name:
            return None
        if shape not in blocks:
            import numpy as np

            rng = np.random.default_rng(len(blocks))
            a = rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(shape[-1]))
            u = a.view(np.uint32).astype(np.uint64)
            bits = (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2") if args.dtype == "bfloat16"
                    else a.astype("<f2" if args.dtype == "float16" else "<f4"))
            blocks[shape] = bits.tobytes()
        return blocks[shape]

    t = time.perf_counter()
    write_random_model(args.dir, arch=args.arch, seed=0, preset=args.preset, dtype=args.dtype,
                       tensor_bytes=repeated if args.repeat_experts else None, **overrides)
    size = sum(os.path.getsize(os.path.join(args.dir, f)) for f in os.listdir(args.dir))
    emit({"what": "make", "model": args.label or args.preset, "dir": args.dir, "arch": args.arch,
          "preset": args.preset, "dtype": args.dtype, "set": overrides, "bytes": size,
          "seconds": time.perf_counter() - t}, args.out)


# llama.cpp-like mixes: (main format, {GGUF name regex: format}, fallback for rows of 32-multiples)
GGUF_MIXES = {
    "Q4_K_M": ("Q4_K", {r"attn_v|ffn_down|^output\.": "Q6_K"}, "Q5_0"),
    "Q5_K_M": ("Q5_K", {r"attn_v|ffn_down|^output\.": "Q6_K"}, "Q5_1"),
    "Q6_K": ("Q6_K", {}, "Q8_0"),
    "Q8_0": ("Q8_0", {}, "F16"),
    "IQ4_XS": ("IQ4_XS", {r"^output\.": "Q6_K"}, "Q5_0"),  # our quantizer (gguf_helpers), not llama.cpp's search
}


def cmd_make_gguf(args) -> None:
    sys.path.insert(0, os.path.join(REPO, "app"))
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from gguf_helpers import write_gguf

    qtype, qtype_for, fallback = GGUF_MIXES[args.mix]
    t = time.perf_counter()
    write_gguf(args.dir, args.gguf, qtype=qtype, qtype_for=qtype_for, fallback=fallback, keep_f32=r"ffn_gate_inp")
    emit({"what": "make-gguf", "model": args.label or os.path.basename(args.gguf), "dir": args.dir, "mix": args.mix,
          "bytes": os.path.getsize(args.gguf), "seconds": time.perf_counter() - t}, args.out)


def rows_exact(eng, sizes: list[int], vocab: int) -> dict:
    """For each T: a window of T random ids, its first row kept (commit 1), then ids 1..T-1 one
    per call from there; True where rows 1..T-1 of the window equal those T=1 logits bit for bit."""
    import numpy as np

    rng = np.random.default_rng(7)
    out = {}
    for T in sizes:
        ids = [int(i) for i in rng.integers(0, vocab, T)]
        win = np.array(eng.run(ids))
        eng.commit(1)
        same = True
        for t in range(1, T):
            one = np.array(eng.run([ids[t]]))
            eng.commit(1)
            same = same and np.array_equal(win[t], one[0])
        out[str(T)] = bool(same)
    return out


def window_costs(eng, sizes: list[int], vocab: int, budget_s: float = 6.0) -> dict:
    """Median seconds of a window of T rows (run T tokens, commit 1: the drafts rejected), T in sizes."""
    import statistics

    import numpy as np

    rng = np.random.default_rng(5)
    out = {}
    for T in sizes:
        times = []
        t_end = time.perf_counter() + budget_s / max(1, len(sizes))
        while len(times) < 3 or (len(times) < 12 and time.perf_counter() < t_end):
            ids = [int(i) for i in rng.integers(0, vocab, T)]
            t = time.perf_counter()
            eng.run(ids)
            eng.commit(1)
            times.append(time.perf_counter() - t)
        out[T] = statistics.median(times[1:] if len(times) > 3 else times)
    return out


def cmd_strata(args) -> None:
    sys.path.insert(0, os.path.join(REPO, "app"))
    import numpy as np

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
    if args.warm_prompt:  # routes through (nearly) every expert, so none is uploaded while timed
        prefill(prompt_ids(vocab, args.warm_prompt, seed=2))
        eng.reset()
    warm = warm_steps(step, int(np.argmax(prefill(prompt))), args.warm_seconds)
    warmup_s = clock() - t
    touched = eng.last_telemetry().get("weight_bytes", 0)  # a T=1 step's weights (dense + its experts)
    eng.reset()
    res = timed_pass(prefill, step, prompt, args)
    info = {"backend": getattr(eng, "backend", args.backend), "threads": threads, "warm_steps": warm,
            "step_weight_bytes": touched,
            "weight_gb_s": touched * res["tok_s"] / 1e9 if touched else None}
    counters = eng.backend_counters()
    if args.backend == "webgpu":
        from strata import webgpu

        try:
            info["adapter"] = webgpu.describe(webgpu.backend_adapter())["device"]
        except Exception as exc:  # the timing above stands; the name is only for the report
            info["adapter"] = f"? ({exc})"
    # the decode line first: a window-cost pass cut short by the caller's timeout loses only itself
    emit({"what": f"strata-{args.backend}", "model": args.label, "load_s": load_s, "warmup_s": warmup_s, **info,
          **res}, args.out)
    if args.window_cost:
        sizes = sorted({1, *[int(x) for x in args.window_cost.split(",")]})
        c0 = eng.backend_counters()
        costs = window_costs(eng, sizes, vocab)
        c1 = eng.backend_counters()
        exact = rows_exact(eng, [T for T in sizes if T > 1], vocab)
        emit({"what": "window-cost", "model": args.label, "backend": args.backend,
              "rows_equal_serial": exact,
              "window_cost_s": {str(T): c for T, c in costs.items()},
              "window_cost_ratio": {str(T): c / costs[1] for T, c in costs.items()},
              "counters_before": c0, "counters_after": c1, "counters_at_decode_end": counters}, args.out)


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
    emit({"what": f"transformers-{device}-{args.dtype}", "model": args.label, "dtype": args.dtype, "attn": "eager", "load_s": load_s,
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
        out.append(f"wgsl matmul {r['format']} {r['shape'][0]}x{r['shape'][1]} ({r['weight_bytes'] / 2**20:.0f} MiB)"
                   f"{' x=' + r['xload'] if 'xload' in r else ''}: "
                   f"T1 {r['gb_per_s_t1']:.4g} GB/s | {ts}")
    for r in by.get("ceiling", []):
        if "skipped" in r:
            out.append(f"torch ceiling: skipped ({r['skipped']})")
            continue
        extra = " ".join(f"{k.split('_', 3)[-1]}={v:.1f}" for k, v in r.items() if k.startswith("cublas") and k.endswith("_us"))
        out.append(f"torch copy {r['copy_gb_s']:.4g} GB/s (read+write); cuBLAS f16 us: {extra}")
    models = []
    for r in rows:
        if r.get("what", "").startswith(("strata-", "transformers-")) and r.get("model") not in models:
            models.append(r.get("model"))
    copy = next((r["copy_gb_s"] for r in by.get("ceiling", []) if "copy_gb_s" in r), None)
    read_bw = copy  # bytes moved per second by a device copy: the rate the card reads at

    def agreement(a: list, b: list) -> str:
        n = min(len(a), len(b))
        same = next((i for i in range(n) if a[i] != b[i]), n)
        return f"EQUAL over {n} tokens" if same == n else f"first {same} of {n} tokens agree"

    for model in models:
        dec = {}
        for what in sorted(by, key=lambda w: (not w.startswith("strata-webgpu"), not w.startswith("strata"), w)):
            if not what.startswith(("strata-", "transformers-")):
                continue
            for r in by[what]:
                if r.get("model") != model:
                    continue
                dec[what] = r
                extra = f" adapter={r['adapter']}" if "adapter" in r else ""
                extra += f" threads={r['threads']}" if "threads" in r else ""
                if r.get("weight_gb_s"):
                    extra += f" | weights {r['step_weight_bytes'] / 1e6:.0f} MB/step = {r['weight_gb_s']:.1f} GB/s"
                    if read_bw:
                        extra += f" = {100 * r['weight_gb_s'] / read_bw:.0f}% of the read bandwidth"
                out.append(f"[{model}] decode {what:24s} {r['tok_s']:9.2f} tok/s ({r['decode_tokens']} tok in "
                           f"{r['decode_s']:.2f} s; prefill {r['prefill_s']:.3f} s, load {r['load_s']:.1f} s){extra}")
        for r in by.get("window-cost", []):
            if r.get("model") == model:
                wc = " ".join(f"T{T}={1e3 * r['window_cost_s'][T]:.2f}ms({x:.2f}x)"
                              for T, x in r["window_cost_ratio"].items())
                out.append(f"[{model}] window cost strata-{r['backend']} (run T, commit 1): {wc}")
                if "rows_equal_serial" in r:
                    ex = " ".join(f"T{T}={'yes' if v else 'NO'}" for T, v in r["rows_equal_serial"].items())
                    out.append(f"[{model}] window rows bit-identical to serial decoding: {ex}")
        cpu, gpu = dec.get("strata-cpu"), dec.get("strata-webgpu")
        if gpu and cpu:
            out.append(f"[{model}] greedy strata webgpu vs cpu: {agreement(gpu['greedy'], cpu['greedy'])}")
        for what, r in dec.items():
            if what.startswith("transformers-") and (cpu or gpu):
                ref = cpu or gpu
                out.append(f"[{model}] greedy {what} vs strata {ref['what'][7:]}: {agreement(r['greedy'], ref['greedy'])}")
        hf = next((r for w, r in dec.items() if w.startswith("transformers-cuda-bfloat16")), None) or next(
            (r for w, r in dec.items() if w.startswith("transformers-") and w.endswith("bfloat16")), None)
        if hf and gpu:
            out.append(f"[{model}] decode speed strata webgpu / transformers {hf['what'][13:]}: "
                       f"{gpu['tok_s'] / hf['tok_s']:.3f}x")
        if hf and cpu:
            out.append(f"[{model}] decode speed strata cpu / transformers {hf['what'][13:]}: {cpu['tok_s'] / hf['tok_s']:.3f}x")
    for r in by.get("spec", []):
        out.append(f"[{r.get('model')}] drafting {r['mode']} on {r['backend']} ({r['workload']}): off {r['off_tok_s']:.1f} "
                   f"tok/s, on {r['on_tok_s']:.1f} tok/s, speedup {r['speedup']:.2f}x, acceptance "
                   f"{r['acceptance']:.2f}, identical output: {r['identical']}")
    for r in by.get("make-gguf", []):
        out.append(f"model {r.get('model')}: {r['mix']} GGUF of {r['dir']}, {r['bytes'] / 1e6:.0f} MB")
    for r in by.get("make", []):
        out.append(f"model {r.get('model')}: {r['arch']} preset={r['preset']} {r['dtype']} {r['bytes'] / 1e6:.0f} MB"
                   + (f" set={r['set']}" if r.get("set") else ""))
    print("\n".join(out) if out else "(no results)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    p.add_argument("--arch", default="qwen3_next")
    p.add_argument("--preset", default="bench")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--repeat-experts", action="store_true", help="one random block per expert shape")
    p.add_argument("--set", nargs="*", help="preset overrides key=value (integers)")
    p.add_argument("--label", default=None)
    for name in ("strata", "hf"):
        p = sub.add_parser(name)
        p.add_argument("dir")
        p.add_argument("--tokens", type=int, default=64)
        p.add_argument("--prompt-len", type=int, default=16)
        p.add_argument("--max-seconds", type=float, default=0.0)
        p.add_argument("--warm-seconds", type=float, default=0.5,
                       help="warm-up steps until this many seconds of them have run (the GPU's clocks up; 0: 4 steps)")
        p.add_argument("--label", default=None, help="the model's name in the results")
        if name == "strata":
            p.add_argument("--window-cost", default="", help="window sizes T to time against T=1, e.g. 4,8")
            p.add_argument("--warm-prompt", type=int, default=0,
                           help="a warm-up prefill of this many random tokens first (every expert uploaded)")
            p.add_argument("--backend", default="cpu", choices=("cpu", "webgpu"))
            p.add_argument("--threads", type=int, default=0)
        else:
            p.add_argument("--device", default="cuda")
            p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32", "float16"))
    p = sub.add_parser("make-gguf")
    p.add_argument("dir")
    p.add_argument("gguf")
    p.add_argument("--mix", default="Q4_K_M", choices=sorted(GGUF_MIXES))
    p.add_argument("--label", default=None)
    p = sub.add_parser("ceiling")
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=8192)
    p = sub.add_parser("table")
    p.add_argument("results")
    for p in sub.choices.values():
        if p.prog.split()[-1] != "table":
            p.add_argument("--out", default=None, help="append the JSON line to this file")
    args = ap.parse_args()
    {"make": cmd_make, "make-gguf": cmd_make_gguf, "strata": cmd_strata, "hf": cmd_hf, "ceiling": cmd_ceiling, "table": cmd_table}[args.cmd](args)


if __name__ == "__main__":
    main()
