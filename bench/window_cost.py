"""Verification-window cost of the strata engine, and T=1 decode as users see it.

The windows are timed by benchlib.window_rounds, the very procedure bench/vs_anchors.py runs for
every engine, on the same ids (benchlib.window_tokens): a model of the anchor shape (by default a
random qwen3_next, ~145M parameters, f32), a 256-token prefix, then one call that evaluates T new
tokens with logits for all T rows, from the restored prefix state (the restore is not timed).
T values interleaved, one warm-up round; cost(T)/cost(1) is the median over rounds of the ratio
paired within each round, with its min-max.

Next to cost(T)/cost(1) it prints bytes(T)/bytes(1), the floor that reading weights sets: the
weight bytes a window touches (shared weights once, each distinct expert once), from the engine's
`weight_bytes` telemetry, or else computed from the window's expert union (`union_per_layer`)
and the checkpoint's tensor sizes ("n/a" when neither is available, e.g. a pack).

Decode: T=1 steps after the prefix, greedy (what a chat does; on a random model it repeats a few
tokens and so a few experts) and over a fixed random token stream (every step routes afresh), on
a quiet machine and with one competing busy process (a browser, a build) next to it, for each
--threads value. Prefill: the 256-token prefix in one call.

    python bench/window_cost.py [--model DIR] [--arch qwen3_next] [--threads 1,2] [--json-out F]

Runs against an installed strata or a dev build (PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import benchlib

strata = benchlib.import_strata()
from strata.testing.devmodel import write_random_model  # noqa: E402

TS = benchlib.WINDOW_TS
PREFIX = benchlib.WINDOW_PREFIX


def weight_bytes_model(path: str, config: dict):
    """bytes(window) from its telemetry: `weight_bytes` when the engine reports it, else dense
    weights + each layer's distinct experts x the bytes of one expert (None for a pack)."""
    from strata.safetensors_io import checkpoint_files, read_header

    try:
        files = checkpoint_files(path)
    except (strata.ModelError, OSError):  # a pack: only the engine's own figure will do
        files = []
    dense, expert_total, embed_row = 0, 0, 0
    for f in files:
        for name, info in read_header(f).items():
            if ".mlp.experts." in name:
                expert_total += info.nbytes
            elif name.endswith("embed_tokens.weight"):
                embed_row = info.nbytes // max(1, info.shape[0])
            else:
                dense += info.nbytes
    n_moe = sum(1 for m in config.get("layer_moe", []) if m) or config.get("num_layers", 0)
    n_exp = config.get("num_experts", 0)
    per_expert = expert_total / (n_moe * n_exp) if files and n_moe and n_exp else None

    def of(telemetry: dict, T: int):
        if telemetry.get("weight_bytes"):
            return float(telemetry["weight_bytes"])
        if per_expert is None or "union_per_layer" not in telemetry:
            return None
        return dense + T * embed_row + per_expert * sum(telemetry["union_per_layer"])
    return of


def macs_per_row(path: str, config: dict):
    """Multiply-adds of one window row's matrix products: every weight of two or more dimensions
    but the embedding (a gather; counted when it is the tied LM head) and the experts, plus top_k
    experts per MoE layer. The attention over the KV cells and the GDN recurrence are left out,
    so the floor it gives is a lower bound. None for a pack (no checkpoint headers)."""
    from strata.safetensors_io import checkpoint_files, read_header

    try:
        files = checkpoint_files(path)
    except (strata.ModelError, OSError):
        return None
    dense, experts, embed = 0, 0, 0
    for f in files:
        for name, info in read_header(f).items():
            n = int(np.prod(info.shape))
            if ".mlp.experts." in name:
                experts += n
            elif name.endswith("embed_tokens.weight"):
                embed = n
            elif len(info.shape) >= 2:
                dense += n
    n_exp, top_k = config.get("num_experts", 0), config.get("top_k", 0)
    # `experts` holds every MoE layer's n_exp experts; a row runs top_k of them in each layer
    routed = experts * top_k // n_exp if n_exp else 0
    return dense + routed + (embed if config.get("tie_word_embeddings") else 0)


def gemm_rate(threads: int) -> float | None:
    """The machine's f32 matrix-product rate on cached data, multiply-adds per second: numpy's
    BLAS (one thread each, in a child process so its thread count is set before it starts) on
    512 x 512 products, best of 5, times `threads`. An outside yardstick for the arithmetic floor:
    no engine can do a window's products faster than the core's GEMM rate."""
    code = ("import time, numpy as np\n"
            "a = np.random.rand(512, 512).astype(np.float32); b = a.copy(); best = 0\n"
            "for _ in range(5):\n"
            "    t = time.thread_time(); k = 0\n"
            "    while time.thread_time() - t < 0.2:\n"
            "        a @ b; k += 1\n"
            "    best = max(best, k * 512 ** 3 / (time.thread_time() - t))\n"
            "print(best)\n")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        return float(out.stdout.strip()) * threads
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def window_costs(eng, state, windows, rounds, bytes_of, clock=time.perf_counter):
    """benchlib.window_rounds, the procedure vs_anchors.py runs too, on this engine."""
    return benchlib.window_rounds(lambda: eng.load_state(state), eng.run, eng.commit, windows, rounds, clock,
                                  lambda T: bytes_of(eng.last_telemetry(), T))


def decode_runs(eng, prefix, stream, n_decode):
    """T=1 decode after the prefix: greedy and forced over the random stream; tok/s."""
    def step(tok):
        out = eng.run([tok])
        eng.commit(1)
        return out[0]

    def fresh():
        eng.reset()
        out = eng.run(prefix, last_only=True)
        eng.commit(len(prefix))
        return out[0]

    greedy, _ = benchlib.time_greedy(step, fresh(), n_decode)
    fresh()
    forced = benchlib.time_forced(step, stream[:n_decode])
    return greedy, forced


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="checkpoint folder or pack (default: generate the anchor-shaped random model)")
    ap.add_argument("--arch", default="qwen3_next", choices=["qwen3_next", "qwen3_5_moe", "qwen3_moe"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--threads", default=None,
                    help="comma-separated thread counts for decode (default: the engine's default)")
    ap.add_argument("--decode", type=int, default=128, help="T=1 decode steps timed per measurement")
    ap.add_argument("--runs", type=int, default=2, help="interleaved rounds of the decode measurements")
    ap.add_argument("--no-busy", action="store_true", help="skip decode next to a busy process")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="time windows by the wall clock, or by this process's CPU time (with --threads 1 that "
                         "is immune to other processes taking the core, which a busy shared machine needs)")
    ap.add_argument("--json-out")
    benchlib.add_quiet_args(ap)
    args = ap.parse_args()

    path = args.model
    if path is None:
        path = os.path.join(tempfile.gettempdir(), f"strata-bench-{args.arch}-{args.dtype}")
        if not os.path.exists(os.path.join(path, "config.json")):
            print(f"writing random {args.arch} model to {path} ...", file=sys.stderr)
            write_random_model(path, args.arch, seed=0, preset="bench", dtype=args.dtype)
    threads = [int(t) for t in args.threads.split(",")] if args.threads else [None]
    engines = {}
    for t in threads:
        e = strata.load(path, threads=t)
        engines[e.threads] = e
    eng = engines[max(engines)]  # prefill and windows with the most threads asked for
    V = eng.vocab_size
    prefix, windows = benchlib.window_tokens(V)
    stream = benchlib.random_stream(V, args.decode)
    bytes_of = weight_bytes_model(path, eng.config)
    info = benchlib.strata_info(strata)

    def prefill_once():
        eng.reset()
        t = time.perf_counter()
        eng.run(prefix, last_only=True)
        eng.commit(PREFIX)
        return time.perf_counter() - t

    prefill_once()  # warm-up: page the weights in
    prefill_s, others_p, busy_p = benchlib.quiet_measure(lambda: min(prefill_once() for _ in range(3)), args,
                                                         "prefill")
    for tok in windows[:8]:  # as in vs_anchors.py: a few T=1 steps before the windows
        eng.run([tok])
        eng.commit(1)
    prefill_once()
    state = eng.save_state()
    win, others_w, busy_w = benchlib.quiet_measure(
        lambda: window_costs(eng, state, windows, args.rounds, bytes_of,
                             time.process_time if args.clock == "cpu" else time.perf_counter), args, "windows")

    dec: dict[int, dict[str, list]] = {t: {"greedy": [], "random": [], "busy": [], "others": []} for t in engines}
    for e in engines.values():
        decode_runs(e, prefix, stream, 16)  # warm-up
    for _ in range(args.runs):
        for t, e in engines.items():
            (g, f), others, busy = benchlib.quiet_measure(lambda: decode_runs(e, prefix, stream, args.decode), args,
                                                          f"decode threads={t}")
            dec[t]["greedy"].append(g)
            dec[t]["random"].append(f)
            dec[t]["others"].append(others)
            if not args.no_busy:
                benchlib.wait_for_quiet(args.wait_quiet, args.quiet_cores)
                with benchlib.busy_process():
                    _, fb = decode_runs(e, prefix, stream, args.decode)
                dec[t]["busy"].append(fb)

    n_params = _param_count(path)
    med = win["cost_ms"]
    macs, rate = macs_per_row(path, eng.config), gemm_rate(eng.threads)
    arith_ms = {T: T * macs / rate * 1e3 for T in TS} if macs and rate else None
    print(f"model: {path} ({eng.config.get('arch')}, {n_params / 1e6:.0f}M parameters)" if n_params else
          f"model: {path} ({eng.config.get('arch')})")
    print(f"strata: {info['package']} ({info['git']}), engine {info['engine']}"
          + (" [installed]" if info["installed"] else ""))
    print(f"machine: {benchlib.cpu_name()}, {os.cpu_count()} CPUs; other processes used "
          + ", ".join(f"{k} {v:.2f}" for k, v in (("prefill", others_p), ("windows", others_w)) if v is not None)
          + " cores" + (" (busy machine)" if busy_p or busy_w else ""))
    print()
    print(f"prefill {PREFIX} tok/s (threads {eng.threads}): {PREFIX / prefill_s:.0f}")
    print()
    print(f"windows: threads {eng.threads}, {args.clock} clock")
    print("| T | cost(T) ms | cost(T)/cost(1) [min-max over rounds] | bytes(T) MB | bytes(T)/bytes(1) | over the floor "
          "| products at the GEMM rate, ms (/ cost(1)) |")
    print("|---|---|---|---|---|---|---|")
    b1 = win["bytes"][1]
    for T in TS:
        bt, ex = win["bytes"][T], win["excess"][T]
        arith = f"{arith_ms[T]:.2f} ({arith_ms[T] / med[1]:.2f})" if arith_ms else "n/a"
        print(f"| {T} | {med[T]:.2f} | {win['ratio'][T]:.2f} [{win['ratio_min'][T]:.2f}-{win['ratio_max'][T]:.2f}] | "
              + (f"{bt / 1e6:.1f} | {bt / b1:.2f} | {ex:+.0%} |" if bt and b1 else "n/a | n/a | n/a |")
              + f" {arith} |")
    if arith_ms:
        print(f"\n(products: {macs / 1e6:.1f}M multiply-adds a row; the GEMM rate, numpy's BLAS on cached f32 data, "
              f"{rate / 1e9:.1f}G/s for {eng.threads} thread(s). A window cannot cost less than its products at that "
              "rate, nor less than reading its weights; where the first exceeds the second, the bytes floor is "
              "out of reach.)")
    print()
    print(f"T=1 decode tok/s after a {PREFIX}-token prefix, {args.decode} steps, median of {args.runs} interleaved runs:")
    print()
    print("| threads | greedy | random stream | random stream, 1 busy process | busy / quiet |")
    print("|---|---|---|---|---|")
    for t, d in dec.items():
        g, f = statistics.median(d["greedy"]), statistics.median(d["random"])
        b = statistics.median(d["busy"]) if d["busy"] else None
        print(f"| {t} | {g:.0f} | {f:.0f} | " + (f"{b:.0f} | {b / f:.2f} |" if b else "- | - |"))
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump({"model": path, "strata": info, "prefill_tps": PREFIX / prefill_s,
                       "others_cores": {"prefill": others_p, "windows": others_w},
                       "windows": {k: {str(T): v for T, v in d.items()} for k, d in win.items()},
                       "macs_per_row": macs, "gemm_rate": rate,
                       "products_ms": {str(T): v for T, v in arith_ms.items()} if arith_ms else None,
                       "decode": {str(t): d for t, d in dec.items()},
                       "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}, fh, indent=1)


def _param_count(path: str) -> int:
    from strata.safetensors_io import checkpoint_files, read_header

    n = 0
    try:
        for f in checkpoint_files(path):
            for info in read_header(f).values():
                n += int(np.prod(info.shape))
    except Exception:
        return 0
    return n


if __name__ == "__main__":
    main()
