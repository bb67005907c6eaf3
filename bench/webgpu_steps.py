"""Where a decode step's time goes, step by step, against the window-cost rounds of
bench/webgpu_decode.py: each step's wall time split into the backend's host encoding, the
waiting submit (submit to completion: GPU time and the wait) and the rest (the engine's host
work, the logits' copy into NumPy, Python), from engine.backend_counters() around every call.

    python bench/webgpu_steps.py DIR [--warm-prompt 256] [--tokens 32] [--windows 12] [--label NAME]
                                     [--out RESULTS.jsonl]

Phases, in this order, on one engine (bench/webgpu_decode.py's procedure first):
  warm-up      the --warm-prompt prefill (the engine's first pass: its time and submits are
               reported as warm_prompt_*), a reset, the 16-token prompt and 4 steps, a reset
  decode       the prompt, then --tokens greedy T=1 steps (argmax of each step's logits)
  window       --windows T=1 windows of random ids (run 1, commit 1), as the window-cost rounds
  decode-again a reset, the prompt and --tokens greedy steps once more
  fixed        --tokens steps of one fixed id without looking at the logits
  early=N      with --early-ab N,M,...: greedy steps with STRATA_WEBGPU_EARLY_FIRST=N (a window's
               first batch submitted after N dispatches; "48" is the default), the values
               alternated in --ab-rounds rounds of --ab-steps steps (the backend reads the
               variable at every wait: one untimed step after each switch)
Per phase: mean and median wall ms and the mean split, and every step's wall ms. With
STRATA_WEBGPU_PROFILE=1 also the GPU span per step (first to last timestamp of its submits).
Prints one JSON line (what = "steps"; appended to --out).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "app"))
sys.path.insert(0, HERE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--warm-prompt", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--early-ab", default="", help="STRATA_WEBGPU_EARLY_FIRST values to alternate, e.g. 48,8")
    ap.add_argument("--ab-rounds", type=int, default=6)
    ap.add_argument("--ab-steps", type=int, default=8)
    ap.add_argument("--label", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import numpy as np

    import strata
    from webgpu_decode import emit, prompt_ids

    eng = strata.load(args.dir, backend="webgpu", threads=1)
    vocab = eng.vocab_size

    def prefill(ids):
        out = eng.run(ids, last_only=True)
        eng.commit(len(ids))
        return out[0]

    steps: dict[str, list] = {}

    def timed(phase, fn):
        c0 = eng.backend_counters()
        t = time.perf_counter()
        r = fn()
        wall = time.perf_counter() - t
        c1 = eng.backend_counters()
        d = {k: c1[k] - c0.get(k, 0.0) for k in ("encode_s", "run_s", "submits", "early_submits", "dispatches",
                                                  "bind_groups_made", "gpu_span_us") if k in c1}
        steps.setdefault(phase, []).append({"wall": wall, **d})
        return r

    def step(tok):
        out = eng.run([tok])
        eng.commit(1)
        return out[0]

    prompt = prompt_ids(vocab, 16)
    t = time.perf_counter()
    first = {}
    if args.warm_prompt:  # the engine's first pass: no scratch arena yet, every expert uploaded
        c0 = eng.backend_counters()
        prefill(prompt_ids(vocab, args.warm_prompt, seed=2))
        c1 = eng.backend_counters()
        first = {"warm_prompt_s": time.perf_counter() - t,
                 **{f"warm_prompt_{k}": c1[k] - c0.get(k, 0.0) for k in ("submits", "early_submits", "dispatches",
                                                                         "encode_s", "run_s") if k in c1}}
        eng.reset()
    prefill(prompt)
    for tok in prompt[:4]:
        step(tok)
    eng.reset()
    warmup_s = time.perf_counter() - t

    def decode(phase):
        tok = int(np.argmax(prefill(prompt)))
        for _ in range(args.tokens):
            tok = timed(phase, lambda: int(np.argmax(step(tok))))

    decode("decode")
    rng = np.random.default_rng(5)
    for _ in range(args.windows):
        ids = [int(rng.integers(0, vocab))]
        timed("window", lambda: (eng.run(ids), eng.commit(1)))
    eng.reset()
    decode("decode-again")
    for _ in range(args.tokens):
        timed("fixed", lambda: step(prompt[0]))
    values = [v for v in args.early_ab.split(",") if v]
    tok = prompt[0]
    for _ in range(args.ab_rounds if values else 0):
        for v in values:
            os.environ["STRATA_WEBGPU_EARLY_FIRST"] = v
            tok = int(np.argmax(step(tok)))  # this window's wait reads the new value
            for _ in range(args.ab_steps):
                tok = timed(f"early={v}", lambda: int(np.argmax(step(tok))))
    os.environ.pop("STRATA_WEBGPU_EARLY_FIRST", None)

    phases = {}
    for phase, rows in steps.items():
        walls = [r["wall"] for r in rows]
        mean = {k: statistics.fmean(r.get(k, 0.0) for r in rows) for k in rows[0] if k != "wall"}
        p = {"n": len(rows), "mean_ms": 1e3 * statistics.fmean(walls), "median_ms": 1e3 * statistics.median(walls),
             "encode_ms": 1e3 * mean.get("encode_s", 0.0), "wait_ms": 1e3 * mean.get("run_s", 0.0),
             "other_ms": 1e3 * (statistics.fmean(walls) - mean.get("encode_s", 0.0) - mean.get("run_s", 0.0)),
             "per_step": {k: v for k, v in mean.items() if k not in ("encode_s", "run_s")},
             "wall_ms": [round(1e3 * w, 3) for w in walls]}
        if "gpu_span_us" in mean:
            p["gpu_span_ms"] = [round(r.get("gpu_span_us", 0.0) * 1e-3, 3) for r in rows]
        phases[phase] = p
        print(f"{phase:13s} mean {p['mean_ms']:7.2f} ms  median {p['median_ms']:7.2f}  encode {p['encode_ms']:6.2f}  "
              f"wait {p['wait_ms']:6.2f}  other {p['other_ms']:6.2f}  {p['per_step']}", file=sys.stderr)
    if first:
        print(f"first pass ({args.warm_prompt} tokens) {first['warm_prompt_s']:.2f} s, "
              f"{first.get('warm_prompt_submits', 0):.0f} submits + {first.get('warm_prompt_early_submits', 0):.0f} early",
              file=sys.stderr)
    emit({"what": "steps", "model": args.label, "warm_prompt": args.warm_prompt, "warmup_s": warmup_s, **first,
          "profile": os.environ.get("STRATA_WEBGPU_PROFILE", ""), "phases": phases}, args.out)


if __name__ == "__main__":
    main()
