"""End-to-end T=1 decode and window costs of two or more engine builds, side by side.

For each round and build, a fresh process loads the checkpoint, prefills 64 random ids, and times
T=1 steps over benchlib's fixed random token stream (best of 3 passes: wall ms and process CPU ms
per token); with --windows it also times benchlib.window_rounds (the procedure of
window_cost.py and vs_anchors.py: T = 1..16 from a restored 256-token prefix) and prints
cost(T)/cost(1) and its excess over the bytes floor. Builds alternate within each round (and the
order flips every round), so slow phases of a shared machine hit all of them; the summary gives
medians over rounds and each round's paired decode ratio to the first build.

    python bench/decode_ab.py MODEL_DIR build/dev-base build/dev-new [--threads 2] [--rounds 4]
        [--windows] [--busy] ["build/dev-new@STRATA_HUGE_PAGES=0"] [llama --gguf F --llama-python PY]

With --busy each process also times the same T=1 steps next to one competing busy process
(benchlib's, as in vs_anchors.py), each of its 3 passes right after a quiet one: the busy column
is the median of those passes (a best-of would pick the luckiest scheduling), busy / quiet that
over the quiet best, per process, and its median over rounds.

A build is a dev-build folder (scripts/dev-build.sh NAME), "installed", or "llama" (llama.cpp
on --gguf through --llama-python, as in vs_anchors.py); "@K=V,K2=V2" after a build sets
environment variables for its processes. With --threads 1 the windows are timed by CPU time
(immune to other processes taking the core, not to their memory traffic); read only ratios
that repeat across rounds on a loaded machine.

The quiet-machine options are benchlib's, as in vs_anchors.py: before each process wait up to
--wait-quiet s for the machine to quiet down; a process during which other processes used more
than --max-others cores is re-run (--retry-busy times), else marked busy and left out of the
medians and the paired ratios (all of a build's rounds busy: the medians use them all and say so).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _decode_and_windows(prefill, step, restore_point, window, accept, window_bytes, vocab, threads, steps, windows,
                        wrounds, busy=False) -> dict:
    sys.path.insert(0, HERE)
    import numpy as np

    import benchlib

    prefix, wids = benchlib.window_tokens(vocab)
    stream = benchlib.random_stream(vocab, steps + 20)

    def one_pass():
        prefill(prefix[:64])
        for t in stream[:20]:
            step(t)
        c0, w0 = time.process_time(), time.perf_counter()
        for t in stream[20:]:
            int(np.argmax(step(t)))
        return (time.perf_counter() - w0) / steps, (time.process_time() - c0) / steps

    best_w = best_c = float("inf")
    busy_w = []
    for _ in range(3):
        w, c = one_pass()
        best_w, best_c = min(best_w, w), min(best_c, c)
        if busy:
            with benchlib.busy_process():
                busy_w.append(one_pass()[0])
    out = {"dec_wall_ms": best_w * 1e3, "dec_cpu_ms": best_c * 1e3}
    if busy:
        out["busy_wall_ms"] = statistics.median(busy_w) * 1e3
    if windows:
        prefill(prefix)
        restore = restore_point()
        clock = time.process_time if threads == 1 else time.perf_counter
        r = benchlib.window_rounds(restore, window, accept, wids, wrounds, clock, window_bytes)
        out["cost_ms"] = {str(T): v for T, v in r["cost_ms"].items()}
        out["ratio"] = {str(T): v for T, v in r["ratio"].items()}
        out["excess"] = {str(T): v for T, v in r.get("excess", {}).items()}
    return out


def child_strata(model, threads, steps, windows, wrounds, busy=False) -> dict:
    sys.path.insert(0, HERE)
    import benchlib

    strata = benchlib.import_strata()
    eng = strata.load(model, threads=threads)

    def prefill(ids):
        eng.reset()
        eng.run(ids, last_only=True)
        eng.commit(len(ids))

    def step(t):
        out = eng.run([t])
        eng.commit(1)
        return out[0]

    def restore_point():
        st = eng.save_state()
        return lambda: eng.load_state(st)

    return _decode_and_windows(prefill, step, restore_point, eng.run, eng.commit,
                               lambda T: float(eng.last_telemetry().get("weight_bytes") or 0) or None,
                               eng.vocab_size, threads, steps, windows, wrounds, busy)


def child_llama(model, threads, steps, windows, wrounds, gguf, busy=False) -> dict:
    sys.path.insert(0, HERE)
    import vs_anchors

    ad = vs_anchors.LlamaAdapter(model, threads, gguf, "f32")

    def prefill(ids):
        ad.reset()
        ad.prefill(ids)

    def restore_point():
        snap = ad.snapshot()
        return lambda: ad.restore(snap)

    return _decode_and_windows(prefill, ad.step, restore_point, ad.window, ad.accept, None, ad.vocab, threads,
                               steps, windows, wrounds, busy)


def main() -> None:
    sys.path.insert(0, HERE)
    import benchlib

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("builds", nargs="+")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150, help="timed T=1 steps per pass")
    ap.add_argument("--windows", action="store_true", help="also time windows T = 1, 2, 4, 8, 16")
    ap.add_argument("--wrounds", type=int, default=6, help="window rounds per process")
    ap.add_argument("--busy", action="store_true", help="also time decode next to one competing busy process")
    ap.add_argument("--gguf", help="GGUF for the llama build")
    ap.add_argument("--llama-python", help="interpreter with llama-cpp-python (for the llama build)")
    ap.add_argument("--json-out")
    ap.add_argument("--child", choices=["strata", "llama"], help=argparse.SUPPRESS)
    benchlib.add_quiet_args(ap)
    a = ap.parse_args()
    if a.child:
        if a.child == "llama":
            out = child_llama(a.model, a.threads, a.steps, a.windows, a.wrounds, a.gguf, a.busy)
        else:
            out = child_strata(a.model, a.threads, a.steps, a.windows, a.wrounds, a.busy)
        print("RESULT " + json.dumps(out))
        return
    res = {b: [] for b in a.builds}
    for r in range(a.rounds):
        for b in (a.builds if r % 2 == 0 else a.builds[::-1]):
            path, _, extra = b.partition("@")
            exe, kind = sys.executable, "strata"
            if path == "llama":
                if not (a.gguf and a.llama_python):
                    sys.exit("decode_ab: the llama build needs --gguf and --llama-python")
                exe, kind, env = a.llama_python, "llama", dict(os.environ)
            else:
                env = benchlib.build_env(path)
            for kv in filter(None, extra.split(",")):
                k, _, v = kv.partition("=")
                env[k] = v
            load = os.getloadavg()[0]
            cmd = [exe, os.path.abspath(__file__), a.model, path, "--child", kind, "--threads", str(a.threads),
                   "--steps", str(a.steps), "--wrounds", str(a.wrounds)] + (["--windows"] if a.windows else []) \
                + (["--busy"] if a.busy else [])
            if a.gguf:
                cmd += ["--gguf", a.gguf]
            p, others, busy = benchlib.quiet_measure(
                lambda: subprocess.run(cmd, env=env, capture_output=True, text=True), a, f"round {r} {b}")
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                print(f"round {r} {b}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                continue
            d = json.loads(line[0][len("RESULT "):])
            d.update(load=load, others=others, busy=busy, round=r)
            res[b].append(d)
            print(f"round {r} {b}: load {load:.1f}, decode {d['dec_wall_ms']:.3f} ms wall, "
                  f"{d['dec_cpu_ms']:.3f} ms CPU"
                  + (f", busy {d['busy_wall_ms']:.3f} ms ({d['dec_wall_ms'] / d['busy_wall_ms']:.2f} of quiet)"
                     if "busy_wall_ms" in d else "")
                  + (f", others {others:.2f} cores" if others is not None else "")
                  + (" (busy)" if busy else ""), flush=True)
    print(f"\n{a.threads} thread(s), {a.rounds} rounds, medians; load average {min(d['load'] for v in res.values() for d in v):.1f}-"
          f"{max(d['load'] for v in res.values() for d in v):.1f}\n")
    others = [d["others"] for v in res.values() for d in v if d.get("others") is not None]
    if others:
        print(f"other processes used {min(others):.2f}-{max(others):.2f} cores during the processes\n")
    head = "| build | decode ms/token (wall) | decode ms/token (CPU) |"
    if a.busy:
        head += " next to 1 busy process, ms/token | busy / quiet tok/s [min-max over rounds] |"
    if a.windows:
        head += " cost(1) ms | cost(2/4/8/16)/cost(1) | over the bytes floor |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for b, ds in res.items():
        if not ds:
            continue
        quiet = [d for d in ds if not d["busy"]]
        if not quiet:
            print(f"(all rounds of {b} were busy: its medians use them all)")
        ds = quiet or ds
        row = (f"| {b} | {statistics.median(d['dec_wall_ms'] for d in ds):.3f} | "
               f"{statistics.median(d['dec_cpu_ms'] for d in ds):.3f} |")
        if a.busy:
            rat = [d["dec_wall_ms"] / d["busy_wall_ms"] for d in ds]
            row += (f" {statistics.median(d['busy_wall_ms'] for d in ds):.3f} | {statistics.median(rat):.2f} "
                    f"[{min(rat):.2f}-{max(rat):.2f}] |")
        if a.windows:
            ts = [T for T in ds[0]["ratio"] if T != "1"]
            rat = " / ".join(f"{statistics.median(d['ratio'][T] for d in ds):.2f}" for T in ts)
            ex = []
            for T in ts:
                v = [d["excess"][T] for d in ds if d.get("excess", {}).get(T) is not None]
                ex.append(f"{100 * statistics.median(v):+.0f}%" if v else "n/a")
            row += f" {statistics.median(d['cost_ms']['1'] for d in ds):.2f} | {rat} | {' / '.join(ex)} |"
        print(row)
    base = a.builds[0]
    for b in a.builds[1:]:
        def paired(quiet_only):
            by_round = {d["round"]: d for d in res[b] if not (quiet_only and d["busy"])}
            return [x["dec_wall_ms"] / by_round[x["round"]]["dec_wall_ms"] for x in res[base]
                    if not (quiet_only and x["busy"]) and x["round"] in by_round]
        rs = paired(True) or paired(False)  # every pair busy: pair them all
        if rs:
            print(f"\ndecode time {base} / {b} per round: " + " ".join(f"{v:.2f}" for v in rs)
                  + f" (median {statistics.median(rs):.2f})")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
