"""strata and llama.cpp on the same GGUF files (Q8_0, Q4_K_M, Q6_K ... of the anchor models).

For every file, each engine runs in its own worker process, engines interleaved within a run,
with the same token ids and calls (vs_anchors.py's engine adapters): prefill, greedy T=1 decode tok/s, window
cost(T) for T = 1, 2, 4, 8 after a restored prefix, and logits on random ids. The table gives
medians over --runs [min-max] and, per file, the ratios strata / llama.cpp from the same run.
It also reports how close the two engines' logits are on the same file (relative L2, argmax
agreement), for how many T=1 steps from an empty cache their logits are bit-identical, and the
common prefix of their greedy outputs.

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/gguf_vs_llama.py \\
        ANCHORS/qwen3next-tiny/model-q8_0.gguf ANCHORS/qwen3next-tiny/model-q4_k_m.gguf \\
        --llama-python VENV/bin/python [--threads 2] [--runs 3] [--md-out F]

--cpu-time (with --threads 1) times with the calling thread's CPU clock instead of the wall clock:
both engines then compute on that one thread, and the numbers hold on a busy machine, where
wall-clock ratios (above all of 2-thread runs, whose thread pools wait on each other) swing.

llama.cpp is not a test dependency (it takes long to build): this comparison lives here.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import vs_anchors  # noqa: E402 - the shared adapters and measurement procedure


TS = (1, 2, 4, 8)
STEPS = 24  # T=1 steps compared logit for logit


def measure(adapter, job: dict) -> dict:
    """prefill tok/s, greedy T=1 decode tok/s, window cost(T) after a restored prefix, logits on
    check ids: the same calls for every engine (the adapters of vs_anchors.py)."""
    import numpy as np

    clock = time.thread_time if job.get("cpu_time") else time.perf_counter
    prefix = job["prefix"]
    adapter.reset()  # warm-up: page the weights in, start the thread pools
    tok = int(np.argmax(adapter.prefill(prefix)))
    for _ in range(8):
        tok = int(np.argmax(adapter.step(tok)))
    adapter.reset()
    t = clock()
    tok = int(np.argmax(adapter.prefill(prefix)))
    res = {"prefill_tps": len(prefix) / (clock() - t)}
    greedy = [tok]
    t = clock()
    for _ in range(job["decode"]):
        tok = int(np.argmax(adapter.step(tok)))
        greedy.append(tok)
    res["decode_tps"] = job["decode"] / (clock() - t)
    res["greedy"] = greedy
    adapter.reset()
    adapter.prefill(prefix)
    snap = adapter.snapshot()
    costs: dict[int, list[float]] = {T: [] for T in TS}
    for r in range(job["rounds"] + 1):  # T values interleaved, round 0 is a warm-up
        for T in TS:
            adapter.restore(snap)
            t = clock()
            adapter.window(job["window"][:T])
            dt = clock() - t
            adapter.accept(T)
            if r:
                costs[T].append(dt)
    res["cost_ms"] = {str(T): statistics.median(costs[T]) * 1e3 for T in TS}
    if job.get("check_out"):
        adapter.reset()
        logits = adapter.window(job["check"])
        adapter.accept(len(job["check"]))
        np.save(job["check_out"], np.ascontiguousarray(logits, dtype=np.float32), allow_pickle=False)
        adapter.reset()  # the same ids one at a time from an empty cache: T=1 logits per step
        steps = [adapter.step(t) for t in job["check"][:STEPS]]
        np.save(job["check_out"] + ".steps.npy", np.ascontiguousarray(steps, dtype=np.float32), allow_pickle=False)
    return res


def worker(engine: str, job_path: str, out_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    cls = vs_anchors.ADAPTERS[engine]
    # strata.load takes the .gguf itself; llama.cpp gets it as its GGUF
    adapter = cls(job["gguf"], job["threads"], job["gguf"], job["llama_kv"])
    with open(out_path, "w") as f:
        json.dump(measure(adapter, job), f)


def run_worker(python: str, engine: str, job: dict, tmp: str, tag: str) -> dict:
    job_path, out_path = os.path.join(tmp, f"job-{tag}.json"), os.path.join(tmp, f"out-{tag}.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    env = dict(os.environ)
    r = subprocess.run([python, os.path.abspath(__file__), "--worker", engine, job_path, out_path],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    with open(out_path) as f:
        return json.load(f)


def spread(values):
    return f"{statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", nargs="*")
    ap.add_argument("--llama-python", metavar="VENV/bin/python",
                    help="interpreter of a venv with llama-cpp-python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prefix", type=int, default=256)
    ap.add_argument("--decode", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time with the thread CPU clock (needs --threads 1): steady on a busy machine")
    ap.add_argument("--md-out")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    if not args.gguf:
        ap.error("give at least one .gguf file")
    if not args.llama_python:  # not required of --worker runs, which get no other arguments
        ap.error("the following arguments are required: --llama-python")
    if args.cpu_time and args.threads != 1:
        ap.error("--cpu-time measures one thread: give --threads 1")
    import numpy as np

    lines = ["| file | engine | prefill tok/s | decode T=1 tok/s | cost(1) ms | cost(2)/cost(1) | cost(4)/cost(1) "
             "| cost(8)/cost(1) |", "|---|---|---|---|---|---|---|---|"]
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in args.gguf:
            path = os.path.abspath(path)
            sys.path.insert(0, os.path.join(os.path.dirname(HERE), "app"))
            from strata.gguf import open_gguf, spec_from_metadata

            vocab = spec_from_metadata(open_gguf(path))["vocab_size"]
            rng = np.random.default_rng(args.seed)
            job = {"gguf": path, "threads": args.threads, "llama_kv": "f32", "decode": args.decode, "repeats": 1,
                   "cpu_time": args.cpu_time,
                   "rounds": args.rounds, "prefix": rng.integers(0, vocab, args.prefix).tolist(),
                   "window": rng.integers(0, vocab, max(TS)).tolist(),
                   "check": rng.integers(0, vocab, 64).tolist()}
            res: dict[str, list[dict]] = {"strata": [], "llama.cpp": []}
            for run in range(args.runs):
                for engine, python in (("strata", sys.executable), ("llama.cpp", args.llama_python)):
                    j = dict(job, check_out=os.path.join(tmp, f"check-{engine}.npy") if run == 0 else None)
                    out = run_worker(python, engine, j, tmp, f"{engine}-{run}")
                    if "error" in out:
                        sys.exit(f"{engine} on {path}: {out['error']}")
                    res[engine].append(out)
            name = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
            for engine, outs in res.items():
                c = [o["cost_ms"] for o in outs]
                lines.append(f"| {name} | {engine} | {spread([o['prefill_tps'] for o in outs])} | "
                             f"{spread([o['decode_tps'] for o in outs])} | {spread([x['1'] for x in c])} | " +
                             " | ".join(f"{statistics.median([x[str(T)] / x['1'] for x in c]):.2f}" for T in (2, 4, 8)) +
                             " |")
            ratio_dec = [s["decode_tps"] / l["decode_tps"] for s, l in zip(res["strata"], res["llama.cpp"])]
            ratio_pre = [s["prefill_tps"] / l["prefill_tps"] for s, l in zip(res["strata"], res["llama.cpp"])]
            a = np.load(os.path.join(tmp, "check-strata.npy"))
            b = np.load(os.path.join(tmp, "check-llama.cpp.npy"))
            rel = float(np.median(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))
            agree = float((a.argmax(1) == b.argmax(1)).mean())
            sa = np.load(os.path.join(tmp, "check-strata.npy.steps.npy"))
            sb = np.load(os.path.join(tmp, "check-llama.cpp.npy.steps.npy"))
            same = next((i for i in range(len(sa)) if not np.array_equal(sa[i], sb[i])), len(sa))
            step_rel = float(np.median(np.linalg.norm(sa - sb, axis=1) / np.linalg.norm(sb, axis=1)))
            g1, g2 = res["strata"][0]["greedy"], res["llama.cpp"][0]["greedy"]
            common = next((i for i, (x, y) in enumerate(zip(g1, g2)) if x != y), min(len(g1), len(g2)))
            notes.append(f"- {name}: strata/llama.cpp decode {statistics.median(ratio_dec):.2f} "
                         f"[{min(ratio_dec):.2f}-{max(ratio_dec):.2f}], prefill {statistics.median(ratio_pre):.2f}; "
                         f"logits on 64 ids: relative L2 {rel:.2e}, argmax agreement {agree:.2f}; T=1 steps from an "
                         f"empty cache: bit-identical logits for the first {same} of {len(sa)}, relative L2 "
                         f"{step_rel:.2e}; greedy outputs "
                         f"agree for {common} of {len(g1)} tokens")
    clock = "thread CPU time, 1 thread" if args.cpu_time else f"wall clock, {args.threads} threads"
    text = "\n".join([f"Timed by {clock}; median of {args.runs} [min-max].", ""] + lines + [""] + notes)
    print(text)
    if args.md_out:
        with open(args.md_out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
