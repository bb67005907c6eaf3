"""Suffix drafting + multi-token verification: how much faster, and still identical.

    python bench/spec_decode.py --drafter-only                 # model-free: drafts a known stream would accept
    python bench/spec_decode.py --model PATH                   # real outputs: drafting off vs on, same run
    python bench/spec_decode.py --model PATH --forced          # outputs forced to the recorded answers (any model)

Workloads are the recorded sessions in sessions/workloads/ (edit sessions built from real source
files, and a prose chat) and, with `--workloads sessions/workloads build/workloads-real`, the
real-file workloads of `bench/make_workloads.py --real` (edits and free continuations of modules
of installed packages the bundled model never saw). For each turn the prompt is the edit or chat
prompt of strata.prompts (a continuation's prompt is the first part of the file, and it runs to
its max_new without stopping at an end token), and the recorded answer is what a model that
copies well would write (a continuation's: the rest of the file).

The issue-13 drafting table (README, bench/README.md):

    python bench/make_workloads.py --real
    python bench/spec_decode.py --model MODEL --workloads sessions/workloads build/workloads-real \
        --only prose real- --threads 1 --clock cpu --repeat 5 --max-new 2048 --wait-quiet 0
    # drafts that fail: the same at --temperature 1 --seed 1 --only prose continue --repeat 9 --max-new 256
    # the controller's ceiling (an oracle that writes the recorded answers): add --forced

Timing: each window is timed with everything the decoder does for it (drafter, controller, run,
commit); `--clock cpu` uses this process's CPU time, which with `--threads 1` other processes
cannot inflate. Each workload runs `--repeat` adjacent off/on pairs; "speedup" is the median of
the pairs' ratios (a slow drift of a busy machine cancels within a pair), tok/s the fastest run
of each mode, "with prefill" the ratio with the prefill (and the drafter's indexing of the
prompt) counted.

- drafter-only: feed prompt + answer as a known token stream; at each window ask the drafter, count
  how many draft tokens match the stream, advance by that plus one. Reports tokens per window for the
  baseline rule (3 drafts), the baseline rule with 15, and the suffix drafter with 15.
- model: run the model with drafting off and on (adaptive, or --max-draft K), same prompts, same
  run; tokens/s over decode time, speedup, acceptance, mean keep, T histogram, identical output.
- forced: like model, but each output token is forced to the recorded answer (the model still runs
  every window, so time is real): the speed of a model that writes the answer, on any checkpoint
  (a random one included). Identical output is then by construction; the lossless check is the
  model mode and the test suite.

Tokens come from the model's tokenizer.json (or --tokenizer FOLDER); without one, UTF-8 bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import benchlib

ROOT = Path(__file__).resolve().parents[1]
strata = benchlib.import_strata()  # installed, or a checkout: PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME

from strata import prompts  # noqa: E402
from strata.session_format import read_session_file  # noqa: E402


@dataclass
class Turn:
    prompt: str
    answer: str     # the recorded output, end token included


@dataclass
class Workload:
    name: str
    kind: str       # edit | chat | continue
    turns: list[Turn]
    max_new: int | None = None  # the most tokens a model writes per turn on its own (continue)


def load_continuation(path: Path) -> Workload:
    """A `strata-workload` continuation (bench/make_workloads.py --real): the prompt is the first
    part of a file, the answer its rest; no end token (a continuation stops at max_new)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
        if obj.get("format") != "strata-workload" or obj.get("kind") != "continue":
            raise ValueError("not a strata-workload continuation")
        return Workload(path.stem, "continue", [Turn(str(obj["prompt"]), str(obj["answer"]))], int(obj["max_new"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{path}: {exc}") from None


def load_workloads(folders: list[Path], only: list[str] | None) -> list[Workload]:
    out = []
    paths = sorted(p for f in folders for p in [*f.glob("*.jsonl"), *f.glob("*.json")])
    for path in paths:
        if only and not any(o in path.stem for o in only):
            continue
        if path.suffix == ".json":
            out.append(load_continuation(path))
            continue
        rec = read_session_file(path)
        turns = []
        messages: list[dict[str, str]] = []
        for t in rec.turns:
            if rec.kind == "edit":
                turns.append(Turn(prompts.edit_prompt(t.file_path or "", t.file_content or "", t.instruction or ""),
                                  t.output + prompts.ENDOFTEXT))
            else:
                messages.append({"role": "user", "content": t.input})
                text = "".join(f"{prompts.IM_START}{m['role']}\n{m['content']}{prompts.IM_END}\n" for m in messages)
                turns.append(Turn(text + f"{prompts.IM_START}assistant\n", t.output + prompts.IM_END))
                messages.append({"role": "assistant", "content": t.output})
        out.append(Workload(path.stem, rec.kind, turns))
    return out


class ByteTokens:
    """UTF-8 bytes as token ids (no tokenizer); special tokens as their text's bytes."""
    name = "utf-8 bytes"
    eos_ids: list[int] = []

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


def tokenizer_for(folder: Path | None):
    from strata.tokenizer import Tokenizer

    tok = Tokenizer.from_folder(folder) if folder else None
    if tok is None:
        return ByteTokens()
    tok.name = f"{folder.name}/tokenizer.json"
    return tok


# ---------------------------------------------------------------------------------------------
def drafter_stats(workloads: list[Workload], tok, min_match: int) -> list[dict]:
    import strata._engine as E

    configs = [("baseline@3", lambda: E.BaselineDrafter(3), 3), ("baseline@15", lambda: E.BaselineDrafter(15), 15),
               ("suffix@15", E.SuffixDrafter, 15)]
    rows = []
    for w in workloads:
        row = {"workload": w.name, "tokens": 0}
        for name, make, k in configs:
            d = make()
            windows = drafted = accepted = tokens = 0
            for t in w.turns:  # one session: later turns see earlier ones
                d.append(tok.encode(t.prompt))
                target = tok.encode(t.answer)
                p = 0
                while p < len(target):
                    draft, _ = d.propose(min(k, len(target) - p - 1), min_match) if len(target) - p > 1 else ([], 0)
                    n = 0
                    while n < len(draft) and draft[n] == target[p + n]:
                        n += 1
                    step = min(n + 1, len(target) - p)
                    d.append(target[p:p + step])
                    p += step
                    windows += 1
                    drafted += len(draft)
                    accepted += n
                tokens += len(target)
            row["tokens"] = tokens
            row[name] = tokens / windows if windows else 0.0
            row[name + " acc"] = accepted / drafted if drafted else 0.0
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------------
def run_turns(engine, w: Workload, tok, *, drafter: str, max_draft, min_match: int, forced: bool,
              max_new: int, clock=time.perf_counter, sampling: dict | None = None, copy_bias: float = 0.0) -> dict:
    """One session's turns on a fresh decoder: decode-time tokens/s and window stats.

    Each window is timed from the end of the previous window's callback to the start of its own
    by `clock` (the wall clock, or this process's CPU time with --clock cpu), so a window's time
    holds everything the decoder did for it: the drafter's lookup and indexing, the controller,
    run and commit. The prefill (and the first token) is timed apart."""
    import strata._engine as E

    dec = E.Decoder(engine)
    sampling = sampling or {}
    stats: list[dict] = []
    outputs = []
    last = [0.0]

    def on_window(toks, st):
        st["cost_s"] = clock() - last[0]
        stats.append(st)
        last[0] = clock()

    wall0 = time.perf_counter()
    for t in w.turns:
        dec.reset()
        ids = tok.encode(t.prompt)
        cap = min(max_new, w.max_new) if w.max_new else max_new
        target = tok.encode(t.answer)[:cap]
        kw = dict(max_new=len(target) if forced else cap, drafter=drafter, max_draft=max_draft,
                  # a free continuation runs to max_new: a small model may end a file early
                  min_match=min_match, stop_ids=None if w.kind == "continue" else tok.eos_ids or None, **sampling)
        if w.kind == "edit" and copy_bias:  # as strata edit runs a rewrite; chat and run do not copy
            kw["copy_bias"] = copy_bias
        if forced:
            kw["forced"] = target
        if len(ids) + kw["max_new"] > engine.context_limit:
            raise SystemExit(f"{w.name}: prompt of {len(ids)} tokens + {kw['max_new']} new passes the context "
                             f"limit {engine.context_limit}; lower --max-new")
        last[0] = clock()
        res = dec.generate(ids, callback=on_window, **kw)
        outputs.append(res["tokens"])
    wall = time.perf_counter() - wall0
    windows = [s for s in stats if s["T"] > 0]
    prefill_s = sum(s["cost_s"] for s in stats if s["T"] == 0)
    tokens = sum(s["emitted"] for s in stats)
    decode_s = sum(s["cost_s"] for s in windows)
    drafted = sum(s["n_drafted"] for s in windows)
    accepted = sum(s["n_accept"] for s in windows)
    return {
        "tokens": tokens, "decode_s": decode_s, "prefill_s": prefill_s, "wall_s": wall,
        "tok_s": tokens / decode_s if decode_s else 0.0,
        "acceptance": accepted / drafted if drafted else 0.0,
        "mean_keep": statistics.fmean(s["keep"] for s in windows) if windows else 0.0,
        "t_hist": dict(sorted(Counter(s["T"] for s in windows).items())),
        "outputs": outputs, "windows": len(windows),
        "cost_us": dec.controller_state()["cost_us"],
        "window_us_by_T": _by_T(windows),
    }


def _by_T(windows: list[dict]) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for s in windows:
        out.setdefault(s["T"], []).append(s["cost_s"] * 1e6)
    return out


def robust_speedup(off: dict, on: dict) -> float:
    """Speedup with every window priced at the median cost of its T in this run (both runs'
    windows pooled): the same windows, but a busy machine's spikes do not decide the ratio."""
    pooled: dict[int, list[float]] = {}
    for r in (off, on):
        for T, xs in r["window_us_by_T"].items():
            pooled.setdefault(T, []).extend(xs)
    med = {T: statistics.median(xs) for T, xs in pooled.items()}
    t_off = sum(med[T] * len(xs) for T, xs in off["window_us_by_T"].items())
    t_on = sum(med[T] * len(xs) for T, xs in on["window_us_by_T"].items())
    return (t_off / off["tokens"]) / (t_on / on["tokens"]) if t_on and off["tokens"] and on["tokens"] else 0.0


def model_bench(args, workloads, tok) -> list[dict]:
    from strata import pack as _pack

    path = str(args.model)
    if _pack.is_pack(path):
        engine = _pack.load_pack(path, threads=args.threads)
    else:
        engine = strata.load(path, threads=args.threads, backend=args.backend)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    sampling = {"temperature": args.temperature, "seed": args.seed} if args.temperature > 0 else {}
    rows = []
    for w in workloads:
        best: dict[str, dict] = {}
        pairs: list[float] = []   # on/off tokens/s of each adjacent pair of runs
        others: list[float] = []
        any_busy = False
        for _ in range(args.repeat):
            pair: dict[str, float] = {}
            for label, drafter, k in (("off", "none", None), ("on", args.drafter, args.max_draft)):
                def once(drafter=drafter, k=k):
                    return run_turns(engine, w, tok, drafter=drafter, max_draft=k, min_match=args.min_match,
                                     forced=args.forced, max_new=args.max_new, clock=clock,
                                     sampling=sampling, copy_bias=args.copy_bias)
                r, o, busy = benchlib.quiet_measure(once, args, f"{w.name} drafting {label}")
                if o is not None:
                    others.append(o)
                any_busy |= busy
                pair[label] = r["tok_s"]
                if label not in best or r["decode_s"] < best[label]["decode_s"]:
                    best[label] = r
            if pair["off"]:
                pairs.append(pair["on"] / pair["off"])
        off, on = best["off"], best["on"]
        rows.append({
            "workload": w.name, "kind": w.kind, "tokens": on["tokens"], "off_tok_s": off["tok_s"], "on_tok_s": on["tok_s"],
            # the median over adjacent off/on pairs: a slow drift of a busy machine cancels in a pair
            "speedup": statistics.median(pairs) if pairs else 0.0,
            "speedup_best": on["tok_s"] / off["tok_s"] if off["tok_s"] else 0.0,
            "speedup_pairs": pairs,
            "speedup_median_cost": robust_speedup(off, on),
            # prefill (and the drafter's indexing of the prompt) included
            "speedup_end_to_end": ((on["tokens"] / (on["decode_s"] + on["prefill_s"])) /
                                   (off["tokens"] / (off["decode_s"] + off["prefill_s"])))
            if off["tokens"] and on["decode_s"] + on["prefill_s"] else 0.0,
            "acceptance": on["acceptance"], "mean_keep": on["mean_keep"], "t_hist": on["t_hist"],
            "identical": off["outputs"] == on["outputs"], "prefill_s": on["prefill_s"],
            "others_cores_max": max(others) if others else None, "busy": any_busy,
            "cost_T1_ms": on["cost_us"][0] / 1e3, "cost_T4_over_T1": on["cost_us"][3] / on["cost_us"][0] if on["cost_us"][0] else 0.0,
        })
        print(f"  {w.name}: {rows[-1]['speedup']:.2f}x ({rows[-1]['speedup_median_cost']:.2f}x at median costs)",
              file=sys.stderr)
    return rows


def fmt_hist(h: dict) -> str:
    return " ".join(f"{k}:{v}" for k, v in h.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="checkpoint folder or strata pack")
    ap.add_argument("--tokenizer", type=Path, help="folder with tokenizer.json (default: the model's)")
    ap.add_argument("--workloads", type=Path, nargs="+", default=[ROOT / "sessions" / "workloads"],
                    help="folders of workloads (sessions/workloads; build/workloads-real from make_workloads.py --real)")
    ap.add_argument("--only", nargs="*", help="workload names containing one of these")
    ap.add_argument("--drafter-only", action="store_true", help="only the model-free drafter statistics")
    ap.add_argument("--forced", action="store_true", help="force outputs to the recorded answers")
    ap.add_argument("--drafter", default="suffix", choices=["suffix", "baseline"])
    ap.add_argument("--max-draft", type=int, default=None, help="fixed draft length (default: adaptive)")
    ap.add_argument("--min-match", type=int, default=4)
    ap.add_argument("--max-new", type=int, default=1024, help="most tokens per turn")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration; the fastest counts")
    ap.add_argument("--temperature", type=float, default=0.0, help="sample at this temperature (0: greedy)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--copy-bias", type=float, default=None,
                    help="the copy bias of edit turns (default: strata edit's; 0: off); other turns run without")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="time windows by the wall clock, or by this process's CPU time (with --threads 1 that "
                         "is immune to other processes taking the core: use it on a busy machine)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--backend", default="cpu", choices=["cpu", "webgpu", "auto"], help="compute backend")
    ap.add_argument("--results", type=Path, help="append one JSON line per workload (bench/webgpu_decode.py table)")
    ap.add_argument("--label", default=None, help="the model's name in --results")
    benchlib.add_quiet_args(ap)
    args = ap.parse_args(argv)
    if args.copy_bias is None:
        from strata.edit import EDIT_COPY_BIAS

        args.copy_bias = EDIT_COPY_BIAS

    workloads = load_workloads(args.workloads, args.only)
    if not workloads:
        hint = " (build the real-file ones with: python bench/make_workloads.py --real)" \
            if any(not f.is_dir() for f in args.workloads) else ""
        print(f"no workloads in {' '.join(map(str, args.workloads))}{hint}", file=sys.stderr)
        return 2
    tok = tokenizer_for(args.tokenizer or args.model)
    result: dict = {"tokens": tok.name}

    rows = drafter_stats(workloads, tok, args.min_match)
    result["drafter"] = rows
    print(f"## Model-free drafting ({tok.name}; tokens per window when every correct draft is kept)\n")
    print("| workload | tokens | baseline@3 | baseline@15 | suffix@15 | suffix acceptance |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['tokens']} | {r['baseline@3']:.2f} | {r['baseline@15']:.2f} | "
              f"{r['suffix@15']:.2f} | {r['suffix@15 acc']:.2f} |")

    if not args.drafter_only:
        if args.model is None:
            print("\n(--model not given: skipping the timed runs)", file=sys.stderr)
        else:
            mode = "forced to the recorded answers" if args.forced else "the model's own output"
            if args.temperature > 0 and not args.forced:
                mode += f", sampled at temperature {args.temperature} (seed {args.seed})"
            ctl = f"max-draft {args.max_draft}" if args.max_draft is not None else "adaptive"
            if args.copy_bias and not args.forced:
                mode += f", edits with copy bias {args.copy_bias:g}"
            print(f"\n## Drafting off vs on ({args.model.name}, {mode}, {args.drafter} drafter, {ctl})\n")
            mrows = model_bench(args, workloads, tok)
            result["model"] = mrows
            print(f"{args.clock} clock, {args.repeat} interleaved off/on pair(s): speedup is the median of the pairs' "
                  "ratios, tok/s the fastest run of each mode\n")
            print("| workload | tokens | off tok/s | on tok/s | speedup | speedup (median cost/T) | with prefill "
                  "| acceptance | mean keep | T histogram | identical | other processes (max cores) |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|:---:|---:|")
            for r in mrows:
                o = r["others_cores_max"]
                print(f"| {r['workload']} | {r['tokens']} | {r['off_tok_s']:.1f} | {r['on_tok_s']:.1f} | "
                      f"{r['speedup']:.2f}x | {r['speedup_median_cost']:.2f}x | {r['speedup_end_to_end']:.2f}x | "
                      f"{r['acceptance']:.2f} | "
                      f"{r['mean_keep']:.2f} | {fmt_hist(r['t_hist'])} | {'yes' if r['identical'] else 'NO'} | "
                      + (f"{o:.2f}" if o is not None else "?") + (" (busy)" if r["busy"] else "") + " |")
            if args.results:
                with open(args.results, "a") as f:
                    for r in mrows:
                        f.write(json.dumps({"what": "spec", "model": args.label, "backend": args.backend,
                                            "mode": "forced" if args.forced else "model",
                                            **{k: r[k] for k in ("workload", "tokens", "off_tok_s", "on_tok_s",
                                                                 "speedup", "acceptance", "mean_keep",
                                                                 "identical")}}) + "\n")
            print()
            for kind, label in (("chat", "prose"), ("continue", "free continuation"), ("edit", "edits")):
                xs = [r for r in mrows if r["kind"] == kind]
                if xs:
                    sp = [max(r["speedup"], 1e-9) for r in xs]
                    print(f"{label}: speedup min {min(sp):.2f}x, geometric mean {statistics.geometric_mean(sp):.2f}x "
                          f"over {len(xs)} workload(s); identical output: "
                          f"{'all' if all(r['identical'] for r in xs) else 'NO'}")
            c = mrows[0]
            print(f"\nwindow cost T=1: {c['cost_T1_ms']:.2f} ms; estimated cost(4)/cost(1) = {c['cost_T4_over_T1']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
