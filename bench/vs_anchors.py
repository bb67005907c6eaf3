"""strata side by side with llama.cpp (and optionally transformers) on the same checkpoint.

The anchors are random-weight qwen3_next / qwen3_moe checkpoints (the shape of
strata.testing.devmodel's "bench" preset) with an f32 GGUF copy for llama.cpp (bench/README.md).
This script runs every engine on them with one procedure, one worker process at a time, with the
same token ids:

  * prefill: 256 random prompt tokens in one call, logits for the last token only; tok/s
  * decode: 128 greedy T=1 steps after that prefill, one call per token; tok/s. Then the same
    number of T=1 steps over a fixed random token stream (greedy decode of a random model repeats
    a few tokens and so a few experts, which flatters MoE), once on the quiet machine and once
    next to one competing busy process (what a browser or a build does to a laptop)
  * cost(T), T = 1, 2, 4, 8, 16: one call that evaluates T new tokens with logits for all T rows,
    after a 256-token prefix restored from a saved state (the restore is not timed); T values
    interleaved, one warm-up round, median of the timed rounds; cost(T)/cost(1) is the median of
    the ratios paired within each round. This is benchlib.window_rounds, which window_cost.py
    runs too, on the same ids; for strata it also prints bytes(T)/bytes(1), the weight bytes
    each window touched (the engine's telemetry), and how far the cost ratio is over that floor
  * logits on 200 random ids in one call, compared with transformers (or, without it, with
    llama.cpp): relative L2 per position and argmax agreement, so the timings are known to
    compare the same computation

Each engine is measured --runs times (engines interleaved); cells are the median over runs
[min-max]. llama.cpp runs in its own interpreter (--llama-python, a venv with llama-cpp-python)
and transformers in --hf-python; an engine whose interpreter or package is missing is skipped
with a note, so the script runs anywhere strata does.

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/vs_anchors.py MODEL_DIR \\
        [--gguf MODEL_DIR/model-f32.gguf] [--llama-python VENV/bin/python] [--hf] \\
        [--threads 2] [--runs 2] [--json-out F] [--md-out F]
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import benchlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TS = benchlib.WINDOW_TS
PREFIX_LEN = benchlib.WINDOW_PREFIX
CHECK_LEN = 200
ENGINES = ("strata", "llama.cpp", "transformers")


# ---------------------------------------------------------------- engine adapters (worker side)
# Every adapter keeps a position and offers: reset(); prefill(tokens) -> last-row logits;
# step(token) -> logits row (a T=1 decode call, committed); window(tokens) -> (T, V) logits
# (the timed verification call); accept(n) (untimed bookkeeping after a window); snapshot() /
# restore(snap). Only numpy plus the engine's own package are imported, so a worker runs in any
# interpreter that has them.

class StrataAdapter:
    name = "strata"

    def __init__(self, model_dir: str, threads: int, gguf: str | None, kv: str):
        strata = benchlib.import_strata()
        self.eng = strata.load(model_dir, threads=threads)
        self.vocab = self.eng.vocab_size
        self.info = dict(benchlib.strata_info(strata), threads=self.eng.threads)

    def reset(self):
        self.eng.reset()

    def prefill(self, tokens):
        out = self.eng.run(tokens, last_only=True)
        self.eng.commit(len(tokens))
        return out[0]

    def step(self, token):
        out = self.eng.run([token])
        self.eng.commit(1)
        return out[0]

    def window(self, tokens):
        return self.eng.run(tokens)

    def accept(self, n):
        self.eng.commit(n)

    def snapshot(self):
        return self.eng.save_state()

    def restore(self, snap):
        self.eng.load_state(snap)

    def window_bytes(self, T):
        """The weight bytes the last window touched (the engine's telemetry): its bytes floor."""
        return float(self.eng.last_telemetry().get("weight_bytes") or 0) or None


class LlamaAdapter:
    """llama.cpp through llama-cpp-python's C bindings: llama_decode on a batch whose per-token
    logits flags ask for the last row (prefill) or every row (window)."""
    name = "llama.cpp"

    def __init__(self, model_dir: str, threads: int, gguf: str | None, kv: str, ubatch: int = 512,
                 flash_attn: bool = False):
        import ctypes

        import llama_cpp as L
        import numpy as np

        if not gguf or not os.path.exists(gguf):
            raise FileNotFoundError(f"no GGUF file {gguf!r} (give --gguf)")
        self.L, self.np, self.ctypes = L, np, ctypes
        self._quiet = L.llama_log_callback(lambda level, text, user: None)
        L.llama_log_set(self._quiet, ctypes.c_void_p(0))
        L.llama_backend_init()
        self.model = L.llama_model_load_from_file(gguf.encode(), L.llama_model_default_params())
        if not self.model:
            raise RuntimeError(f"{gguf}: llama.cpp could not load it")
        cp = L.llama_context_default_params()
        cp.n_ctx = 2048
        cp.n_batch, cp.n_ubatch = 512, ubatch
        cp.n_threads = cp.n_threads_batch = threads
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        kv_type = {"f16": L.GGML_TYPE_F16, "f32": L.GGML_TYPE_F32}[kv]
        cp.type_k = cp.type_v = kv_type
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            raise RuntimeError("llama_init_from_model failed")
        self.vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))
        self.batch = L.llama_batch_init(512, 0, 1)
        self.n = 0
        self.info = {"version": getattr(L, "__version__", "?"), "kv_cache": kv,
                     "flash_attn": "on" if flash_attn else "off", "n_ctx": 2048, "n_batch": 512,
                     "n_ubatch": ubatch, "threads": threads,
                     "system_info": L.llama_print_system_info().decode(errors="replace").strip()}

    def _decode(self, tokens, all_rows: bool):
        L, b, n = self.L, self.batch, len(tokens)
        b.n_tokens = n
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = self.n + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = 1 if (all_rows or i == n - 1) else 0
        rc = L.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        self.n += n
        rows = n if all_rows else 1
        ptr = L.llama_get_logits(self.ctx)
        return self.np.ctypeslib.as_array(ptr, shape=(rows * self.vocab,)).reshape(rows, self.vocab).copy()

    def reset(self):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)
        self.n = 0

    def prefill(self, tokens):
        return self._decode(tokens, False)[0]

    def step(self, token):
        return self._decode([token], False)[0]

    def window(self, tokens):
        return self._decode(tokens, True)

    def accept(self, n):
        pass

    def snapshot(self):
        size = self.L.llama_state_get_size(self.ctx)
        buf = (self.ctypes.c_uint8 * size)()
        got = self.L.llama_state_get_data(self.ctx, buf, size)
        return buf, got, self.n

    def restore(self, snap):
        buf, size, n = snap
        self.L.llama_state_set_data(self.ctx, buf, size)
        self.n = n


class TransformersAdapter:
    """transformers f32 with sdpa attention and its KV cache; the cache snapshot is a deepcopy."""
    name = "transformers"

    def __init__(self, model_dir: str, threads: int, gguf: str | None, kv: str):
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        torch.set_num_threads(threads)
        self.torch = torch
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                          attn_implementation="sdpa").eval()
        self.vocab = self.model.config.get_text_config().vocab_size
        self.cache = None
        self.info = {"torch": torch.__version__, "transformers": transformers.__version__, "threads": threads,
                     "attn": "sdpa"}

    def _forward(self, tokens, all_rows: bool):
        torch = self.torch
        with torch.no_grad():
            out = self.model(input_ids=torch.tensor([list(tokens)], dtype=torch.long), past_key_values=self.cache,
                             use_cache=True, logits_to_keep=0 if all_rows else 1)
        self.cache = out.past_key_values
        return out.logits[0].float().numpy()

    def reset(self):
        self.cache = None

    def prefill(self, tokens):
        return self._forward(tokens, False)[-1]

    def step(self, token):
        return self._forward([token], False)[-1]

    def window(self, tokens):
        return self._forward(tokens, True)

    def accept(self, n):
        pass

    def snapshot(self):
        return copy.deepcopy(self.cache)

    def restore(self, snap):
        self.cache = copy.deepcopy(snap)


ADAPTERS = {"strata": StrataAdapter, "llama.cpp": LlamaAdapter, "transformers": TransformersAdapter}


def measure(adapter, job: dict) -> dict:
    """The shared procedure; every engine goes through exactly these calls."""
    import numpy as np

    prefix, windows, check = job["prefix"], job["window"], job["check"]
    n_decode, repeats, rounds = job["decode"], job["repeats"], job["rounds"]
    clock = time.perf_counter
    res: dict = {"vocab": adapter.vocab}

    # warm-up: page in the weights, let thread pools spin up
    adapter.reset()
    tok = int(np.argmax(adapter.prefill(prefix)))
    for _ in range(8):
        tok = int(np.argmax(adapter.step(tok)))

    prefill_tps, decode_tps, greedy = [], [], None
    for r in range(repeats):
        adapter.reset()
        t = clock()
        last = adapter.prefill(prefix)
        prefill_tps.append(len(prefix) / (clock() - t))
        tok = int(np.argmax(last))
        out = [tok]
        t = clock()
        for _ in range(n_decode):
            tok = int(np.argmax(adapter.step(tok)))
            out.append(tok)
        decode_tps.append(n_decode / (clock() - t))
        if greedy is None:
            greedy = out
    res["prefill_tps"] = statistics.median(prefill_tps)
    res["decode_tps"] = statistics.median(decode_tps)
    res["prefill_tps_all"], res["decode_tps_all"] = prefill_tps, decode_tps
    res["greedy"] = greedy

    # T=1 over the fixed random stream: quiet, then next to one busy process (interleaved)
    stream = job["stream"]
    random_tps, busy_tps = [], []
    for r in range(job["busy_repeats"]):
        for busy in (False, True):
            adapter.reset()
            adapter.prefill(prefix)
            if busy:
                with benchlib.busy_process():
                    busy_tps.append(benchlib.time_forced(adapter.step, stream))
            else:
                random_tps.append(benchlib.time_forced(adapter.step, stream))
    res["decode_random_tps"] = statistics.median(random_tps)
    res["decode_busy_tps"] = statistics.median(busy_tps)
    res["decode_random_tps_all"], res["decode_busy_tps_all"] = random_tps, busy_tps

    adapter.reset()
    adapter.prefill(prefix)
    snap = adapter.snapshot()

    def window(tokens):
        logits = adapter.window(tokens)
        if logits.shape != (len(tokens), adapter.vocab):
            raise RuntimeError(f"window of {len(tokens)} returned logits of shape {logits.shape}")

    win = benchlib.window_rounds(lambda: adapter.restore(snap), window, adapter.accept, windows, rounds, clock,
                                 getattr(adapter, "window_bytes", None))
    res["cost_ms"] = {str(T): win["cost_ms"][T] for T in TS}
    res["cost_ms_all"] = {str(T): win["cost_ms_all"][T] for T in TS}
    res["cost_ratio"] = {str(T): win["ratio"][T] for T in TS}
    if "bytes" in win:
        res["window_bytes"] = {str(T): win["bytes"][T] for T in TS}

    if job.get("check_out"):
        adapter.reset()
        logits = adapter.window(check)
        adapter.accept(len(check))
        np.save(job["check_out"], np.ascontiguousarray(logits, dtype=np.float32), allow_pickle=False)
    res["info"] = adapter.info
    return res


def worker_main(engine: str, job_path: str, out_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    try:
        adapter = ADAPTERS[engine](job["model_dir"], job["threads"], job.get("gguf"), job["llama_kv"])
    except ImportError as e:
        _write_json(out_path, {"skipped": f"{engine} not importable in {sys.executable}: {e}"})
        return
    res = measure(adapter, job)
    res["python"] = sys.executable
    _write_json(out_path, res)


# ---------------------------------------------------------------- orchestrator


def _write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)



def _model_vocab(model_dir: str) -> tuple[int, str]:
    path = os.path.join(model_dir, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"{path}: cannot read the model config ({e})")
    text = cfg.get("text_config", cfg)
    if not isinstance(text.get("vocab_size"), int):
        sys.exit(f"{path}: no integer vocab_size")
    return text["vocab_size"], str(cfg.get("model_type", "?"))



def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _fmt(s: dict | None, digits: int) -> str:
    if not s:
        return "-"
    if s["n"] == 1:
        return f"{s['median']:.{digits}f}"
    return f"{s['median']:.{digits}f} [{s['min']:.{digits}f}-{s['max']:.{digits}f}]"


def _relative_l2(a, b):
    import numpy as np

    num = np.linalg.norm(a.astype(np.float64) - b.astype(np.float64), axis=1)
    den = np.maximum(np.linalg.norm(b.astype(np.float64), axis=1), 1e-30)
    return num / den


def compare_logits(paths: dict[str, str]) -> list[dict]:
    """Each engine against the reference (transformers if present, else llama.cpp)."""
    import numpy as np

    have = {e: np.load(p, allow_pickle=False) for e, p in paths.items() if os.path.exists(p)}
    ref = "transformers" if "transformers" in have else ("llama.cpp" if "llama.cpp" in have else None)
    rows = []
    if ref is None:
        return rows
    for e, a in have.items():
        if e == ref:
            continue
        b = have[ref]
        if a.shape != b.shape:
            rows.append({"engine": e, "reference": ref, "error": f"shape {a.shape} vs {b.shape}"})
            continue
        rel = _relative_l2(a, b)
        rows.append({"engine": e, "reference": ref, "positions": int(a.shape[0]), "last": float(rel[-1]),
                     "median": float(np.median(rel)), "max": float(rel.max()),
                     "argmax_agree": float(np.mean(a.argmax(1) == b.argmax(1)))})
    return rows


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n





def run_worker(engine: str, python: str, job: dict, tmp: str, run_idx: int, timeout: int) -> dict:
    job_path = os.path.join(tmp, f"job-{engine}-{run_idx}.json")
    out_path = os.path.join(tmp, f"out-{engine}-{run_idx}.json")
    _write_json(job_path, job)
    cmd = [python, os.path.abspath(__file__), "--worker", engine, job_path, out_path]
    load_before = os.getloadavg()
    busy0, own0 = benchlib.cpu_busy_s(), benchlib.children_cpu_s()
    t = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return {"skipped": f"interpreter {python} not found"}
    except subprocess.TimeoutExpired:
        return {"skipped": f"worker ran past {timeout} s"}
    wall = time.time() - t
    busy1, own1 = benchlib.cpu_busy_s(), benchlib.children_cpu_s()
    if p.returncode != 0 or not os.path.exists(out_path):
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"skipped": f"worker failed (exit {p.returncode}): {tail[0]}"}
    with open(out_path) as f:
        res = json.load(f)
    res["loadavg_before"] = list(load_before)
    res["loadavg_after"] = list(os.getloadavg())
    res["wall_s"] = wall
    # cores used by everything else while the worker ran (machine busy time minus the worker's own)
    if busy0 is not None and busy1 is not None and wall > 0:
        res["others_cores"] = max(0.0, ((busy1 - busy0) - (own1 - own0)) / wall)
    return res


def _cost_ratio(r: dict, T: int) -> float:
    """cost(T)/cost(1) of one run: the median of the per-round paired ratios (older JSON files
    have only the per-T medians)."""
    if "cost_ratio" in r:
        return r["cost_ratio"][str(T)]
    return r["cost_ms"][str(T)] / r["cost_ms"]["1"]


def summarize(per_run: dict[str, list[dict]]) -> dict[str, dict]:
    summ = {}
    for e, runs in per_run.items():
        ok = [r for r in runs if "skipped" not in r and not r.get("busy")]
        all_busy = not ok
        if not ok:
            ok = [r for r in runs if "skipped" not in r]
            if not ok:
                summ[e] = {"skipped": runs[0]["skipped"] if runs else "not run"}
                continue
        s = {"prefill_tps": _spread([r["prefill_tps"] for r in ok]),
             "decode_tps": _spread([r["decode_tps"] for r in ok]),
             "decode_random_tps": _spread([r["decode_random_tps"] for r in ok]),
             "decode_busy_tps": _spread([r["decode_busy_tps"] for r in ok]),
             "busy_over_quiet": _spread([r["decode_busy_tps"] / r["decode_random_tps"] for r in ok]),
             "cost1_ms": _spread([r["cost_ms"]["1"] for r in ok])}
        for T in TS[1:]:
            s[f"cost{T}_ratio"] = _spread([_cost_ratio(r, T) for r in ok])
            s[f"cost{T}_ms"] = _spread([r["cost_ms"][str(T)] for r in ok])
        if all(r.get("window_bytes", {}).get("1") for r in ok):
            s["bytes_ratio"] = {T: _spread([r["window_bytes"][str(T)] / r["window_bytes"]["1"] for r in ok])
                                for T in TS[1:]}
            s["excess"] = {T: _spread([_cost_ratio(r, T) / (r["window_bytes"][str(T)] / r["window_bytes"]["1"]) - 1
                                       for r in ok]) for T in TS[1:]}
        s["all_busy"] = all_busy
        summ[e] = s
    return summ


def vs_row(per_run: dict[str, list[dict]], a: str, b: str) -> dict | None:
    """Per-run ratios a/b (runs paired in order, both measured in the same round), then spread."""
    def usable(r):
        return "skipped" not in r and not r.get("busy")

    pairs = [(x, y) for x, y in zip(per_run.get(a, []), per_run.get(b, [])) if usable(x) and usable(y)]
    if not pairs:
        return None
    out = {"prefill": _spread([x["prefill_tps"] / y["prefill_tps"] for x, y in pairs]),
           "decode": _spread([x["decode_tps"] / y["decode_tps"] for x, y in pairs]),
           "decode_random": _spread([x["decode_random_tps"] / y["decode_random_tps"] for x, y in pairs]),
           "decode_busy": _spread([x["decode_busy_tps"] / y["decode_busy_tps"] for x, y in pairs])}
    for T in TS:
        out[f"cost{T}"] = _spread([x["cost_ms"][str(T)] / y["cost_ms"][str(T)] for x, y in pairs])
    return out


def markdown(meta: dict, summ: dict, ratios: dict, agree: list[dict], greedy: dict,
             per_run: dict[str, list[dict]]) -> str:
    L = []
    L.append(f"model `{meta['model_dir']}` ({meta['model_type']}), GGUF `{meta.get('gguf') or '-'}`, "
             f"{meta['threads']} threads, {meta['runs']} runs (engines interleaved; cell = median over runs "
             f"[min-max] without the runs on a busy machine, each run's value itself a median of {meta['repeats']} prefill/decode repeats and "
             f"{meta['rounds']} window rounds)")
    v = meta["versions"]
    if v.get("strata"):
        st = v["strata"]
        L.append(f"strata: {st['package']} ({st['git']}), engine {st['engine']}"
                 + (" (installed)" if st.get("installed") else ""))
    if v.get("llama.cpp"):
        L.append(f"llama.cpp: llama-cpp-python {v['llama.cpp']['version']}, KV cache {v['llama.cpp']['kv_cache']}, "
                 f"flash attention off, n_batch 512")
    if v.get("transformers"):
        L.append(f"transformers {v['transformers']['transformers']}, torch {v['transformers']['torch']}, sdpa")
    L.append(f"machine: {meta['cpu']}, {meta['nproc']} CPUs; load average during the runs "
             f"{meta['load_min']:.1f}-{meta['load_max']:.1f}" +
             (f"; other processes used {meta['others_cores_median']:.2f} cores (median over workers, max "
              f"{meta['others_cores_max']:.2f}) while the engines ran" if meta["others_cores_max"] is not None else ""))
    L.append("")
    L.append("| engine | prefill 256 tok/s | decode T=1 greedy tok/s | decode T=1 random tok/s | "
             "random, 1 busy process | busy / quiet | cost(1) ms | cost(2)/cost(1) | cost(4)/cost(1) | "
             "cost(8)/cost(1) | cost(16)/cost(1) |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    notes = []
    for e in ENGINES:
        s = summ.get(e)
        if s is None:
            continue
        if "skipped" in s:
            notes.append(f"{e}: skipped ({s['skipped']})")
            continue
        label = e + (f" (KV {meta['llama_kv']})" if e == "llama.cpp" else "")
        if s.get("all_busy"):
            label += " (busy machine in every run)"
        L.append(f"| {label} | {_fmt(s['prefill_tps'], 0)} | {_fmt(s['decode_tps'], 0)} | "
                 f"{_fmt(s['decode_random_tps'], 0)} | {_fmt(s['decode_busy_tps'], 0)} | {_fmt(s['busy_over_quiet'], 2)} | "
                 f"{_fmt(s['cost1_ms'], 2)} | {_fmt(s['cost2_ratio'], 2)} | {_fmt(s['cost4_ratio'], 2)} | "
                 f"{_fmt(s['cost8_ratio'], 2)} | {_fmt(s['cost16_ratio'], 2)} |")
    floors = [(e, summ[e]) for e in ENGINES if e in summ and "excess" in summ[e]]
    for e, s in floors:
        L.append("")
        L.append(f"{e}: bytes(T)/bytes(1), the weight bytes window T touched over those of T=1 (the engine's "
                 "telemetry), and cost(T)/cost(1) over that floor:")
        L.append("")
        L.append("| T | cost(T)/cost(1) | bytes(T)/bytes(1) | over the floor |")
        L.append("|---|---|---|---|")
        for T in TS[1:]:
            ex = s["excess"][T]
            L.append(f"| {T} | {_fmt(s[f'cost{T}_ratio'], 2)} | {_fmt(s['bytes_ratio'][T], 2)} | "
                     f"{ex['median']:+.0%} [{ex['min']:+.0%} to {ex['max']:+.0%}] |")
    if ratios:
        L.append("")
        L.append("| strata / other (same run) | prefill tok/s | decode greedy | decode random | decode busy | "
                 "cost(1) | cost(2) | cost(4) | cost(8) | cost(16) |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for other, r in ratios.items():
            L.append(f"| vs {other} | {_fmt(r['prefill'], 2)} | {_fmt(r['decode'], 2)} | {_fmt(r['decode_random'], 2)} | "
                     f"{_fmt(r['decode_busy'], 2)} | {_fmt(r['cost1'], 2)} | {_fmt(r['cost2'], 2)} | "
                     f"{_fmt(r['cost4'], 2)} | {_fmt(r['cost8'], 2)} | {_fmt(r['cost16'], 2)} |")
        L.append("")
        L.append("(tok/s ratios above 1 and cost ratios below 1 favour strata.)")
    if agree:
        L.append("")
        L.append(f"Logits on {CHECK_LEN} random ids in one call, relative L2 per position:")
        L.append("")
        L.append("| engine | reference | last | median | max | argmax agree |")
        L.append("|---|---|---|---|---|---|")
        for a in agree:
            if "error" in a:
                L.append(f"| {a['engine']} | {a['reference']} | {a['error']} | | | |")
            else:
                L.append(f"| {a['engine']} | {a['reference']} | {a['last']:.2e} | {a['median']:.2e} | "
                         f"{a['max']:.2e} | {a['argmax_agree']:.3f} |")
    if greedy:
        L.append("")
        L.append("Greedy decode, identical leading tokens (of " + str(meta["decode"] + 1) + "): " +
                 ", ".join(f"{k} {v}" for k, v in greedy.items()))
    L.append("")
    L.append("Per run (other processes = cores used by the rest of the machine while that worker ran; runs "
             f"above {meta['max_others']} cores were re-run up to {meta['retry_busy']} times):")
    L.append("")
    for e in ENGINES:
        for i, r in enumerate(per_run.get(e, [])):
            if "skipped" in r:
                continue
            c = r["cost_ms"]
            q = {T: _cost_ratio(r, T) for T in TS[1:]}
            L.append(f"- {e} run {i + 1}: prefill {r['prefill_tps']:.0f} tok/s, decode {r['decode_tps']:.1f} tok/s "
                     f"(random {r['decode_random_tps']:.1f}, busy {r['decode_busy_tps']:.1f}), "
                     f"cost(1) {c['1']:.2f} ms, cost(2/4/8/16)/cost(1) {q[2]:.2f} / {q[4]:.2f} / "
                     f"{q[8]:.2f} / {q[16]:.2f}, other processes {r.get('others_cores', float('nan')):.2f} cores, "
                     f"load {r['loadavg_before'][0]:.1f}->{r['loadavg_after'][0]:.1f}"
                     + (" (busy machine: left out of the medians)" if r.get("busy") else "")
                     + (f"; {len(r['busy_attempts'])} earlier busy attempt(s) discarded" if r.get("busy_attempts") else ""))
    for n in notes:
        L.append("")
        L.append(f"Note: {n}")
    return "\n".join(L) + "\n"


def rerender(path: str, max_others: float, md_out: str | None) -> None:
    with open(path) as f:
        data = json.load(f)
    per_run, meta = data["runs"], data["meta"]
    for runs in per_run.values():
        for r in runs:
            if "skipped" not in r:
                r["busy"] = r.get("others_cores", 0.0) > max_others
    meta["max_others"] = max_others
    meta.setdefault("retry_busy", 0)
    summ = summarize(per_run)
    for e, s in data["summary"].items():
        if "skipped" in s and e not in per_run:
            summ[e] = s
    ratios = {o: r for o in ("llama.cpp", "transformers") if (r := vs_row(per_run, "strata", o))}
    md = markdown(meta, summ, ratios, data["logits"], data["greedy_common_prefix"], per_run)
    print(md)
    if md_out:
        with open(md_out, "w") as f:
            f.write(md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir", nargs="?", help="checkpoint folder (config.json + *.safetensors)")
    ap.add_argument("--gguf", help="GGUF of the same weights for llama.cpp (default MODEL_DIR/model-f32.gguf)")
    ap.add_argument("--llama-python", help="interpreter with llama-cpp-python (llama.cpp skipped without it)")
    ap.add_argument("--llama-kv", choices=["f16", "f32"], default="f32",
                    help="llama.cpp KV cache type: f32 (default) computes what strata and transformers do; f16 is "
                         "llama.cpp's own default and the anchors' benchmark setting")
    ap.add_argument("--hf", action="store_true", help="also run transformers")
    ap.add_argument("--hf-once", action="store_true",
                    help="run transformers in the first run only (its logits are the reference; it is slow)")
    ap.add_argument("--hf-python", default=sys.executable, help="interpreter with torch + transformers")
    ap.add_argument("--no-strata", action="store_true", help="anchors only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2, help="full rounds over the engines")
    ap.add_argument("--repeats", type=int, default=5, help="prefill/decode repeats per run (transformers: 3)")
    ap.add_argument("--rounds", type=int, default=14, help="timed window rounds per T")
    ap.add_argument("--decode", type=int, default=128, help="greedy T=1 steps per repeat")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per worker")
    ap.add_argument("--busy-repeats", type=int, default=2,
                    help="random-stream decode repeats, quiet and next to a busy process, per run")
    benchlib.add_quiet_args(ap)
    ap.add_argument("--json-out")
    ap.add_argument("--md-out")
    ap.add_argument("--worker", nargs=3, metavar=("ENGINE", "JOB", "OUT"), help=argparse.SUPPRESS)
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker_main(*sys.argv[2:5])
        return
    ap.add_argument("--from-json", metavar="FILE",
                    help="re-render the tables of an earlier --json-out (with this --max-others) and exit")
    args = ap.parse_args()
    if args.from_json:
        rerender(args.from_json, args.max_others, args.md_out)
        return
    if not args.model_dir:
        ap.error("give a model folder (or --from-json)")

    import numpy as np

    model_dir = os.path.abspath(args.model_dir)
    vocab, model_type = _model_vocab(model_dir)
    gguf = os.path.abspath(args.gguf) if args.gguf else os.path.join(model_dir, "model-f32.gguf")

    engines: dict[str, str] = {}
    notes: dict[str, str] = {}
    if not args.no_strata:
        engines["strata"] = sys.executable
    if not args.llama_python:
        notes["llama.cpp"] = "no --llama-python given"
    elif not os.path.exists(gguf):
        notes["llama.cpp"] = f"no GGUF at {gguf} (give --gguf)"
    else:
        engines["llama.cpp"] = args.llama_python
    if args.hf:
        engines["transformers"] = args.hf_python

    tmp = tempfile.mkdtemp(prefix="strata-vs-anchors-")
    job = {"model_dir": model_dir, "gguf": gguf, "threads": args.threads, "llama_kv": args.llama_kv,
           "prefix": benchlib.window_tokens(vocab)[0], "window": benchlib.window_tokens(vocab)[1],
           "check": np.random.default_rng(0).integers(0, vocab, CHECK_LEN).tolist(),
           "stream": benchlib.random_stream(vocab, args.decode),
           "decode": args.decode, "rounds": args.rounds, "busy_repeats": args.busy_repeats}
    per_run: dict[str, list[dict]] = {e: [] for e in engines}
    check_paths: dict[str, str] = {}
    loads = [os.getloadavg()[0]]
    others: list[float] = []
    for run_idx in range(args.runs):
        for e, py in engines.items():
            if e == "transformers" and args.hf_once and run_idx > 0:
                continue
            j = dict(job, repeats=args.repeats if e != "transformers" else min(args.repeats, 3))
            if run_idx == 0:
                j["check_out"] = check_paths[e] = os.path.join(tmp, f"check-{e.replace('.', '')}.npy")
            print(f"[run {run_idx + 1}/{args.runs}] {e} ...", file=sys.stderr, flush=True)
            retired: list[dict] = []
            for attempt in range(args.retry_busy + 1):
                if args.wait_quiet > 0:
                    benchlib.wait_for_quiet(args.wait_quiet, args.quiet_cores)
                res = run_worker(e, py, j, tmp, run_idx, args.timeout)
                if "skipped" in res:
                    print(f"  skipped: {res['skipped']}", file=sys.stderr)
                    break
                loads += [res["loadavg_before"][0], res["loadavg_after"][0]]
                if "others_cores" in res:
                    others.append(res["others_cores"])
                busy = res.get("others_cores", 0.0) > args.max_others
                print(f"  prefill {res['prefill_tps']:.0f} tok/s, decode {res['decode_tps']:.1f} tok/s "
                      f"(random {res['decode_random_tps']:.1f}, busy {res['decode_busy_tps']:.1f}), "
                      f"cost(1) {res['cost_ms']['1']:.2f} ms, load {res['loadavg_after'][0]:.1f}, "
                      f"other processes {res.get('others_cores', float('nan')):.2f} cores"
                      + (" (busy machine)" if busy else ""), file=sys.stderr)
                if not busy:
                    break
                res["busy"] = True
                if attempt < args.retry_busy:
                    retired.append(res)
            if retired:
                res["busy_attempts"] = retired
            per_run[e].append(res)

    summ = summarize(per_run)
    for e, n in notes.items():
        summ[e] = {"skipped": n}
    ratios = {}
    for other in ("llama.cpp", "transformers"):
        r = vs_row(per_run, "strata", other)
        if r:
            ratios[other] = r
    agree = compare_logits(check_paths)
    greedy = {}
    firsts = {e: next((r["greedy"] for r in rs if "greedy" in r), None) for e, rs in per_run.items()}
    names = [e for e in ENGINES if firsts.get(e)]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            greedy[f"{a} vs {b}"] = _common_prefix(firsts[a], firsts[b])
    meta = {"model_dir": model_dir, "model_type": model_type, "gguf": gguf if "llama.cpp" in engines else None,
            "threads": args.threads, "runs": args.runs, "repeats": args.repeats, "rounds": args.rounds,
            "decode": args.decode, "llama_kv": args.llama_kv, "cpu": benchlib.cpu_name(), "nproc": os.cpu_count(),
            "load_min": min(loads), "load_max": max(loads),
            "max_others": args.max_others, "retry_busy": args.retry_busy,
            "others_cores_max": max(others) if others else None,
            "others_cores_median": statistics.median(others) if others else None,
            "versions": {e: next((r["info"] for r in rs if "info" in r), None) for e, rs in per_run.items()},
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    md = markdown(meta, summ, ratios, agree, greedy, per_run)
    print(md)
    if args.md_out:
        with open(args.md_out, "w") as f:
            f.write(md)
    if args.json_out:
        _write_json(args.json_out, {"meta": meta, "summary": summ, "strata_over": ratios, "logits": agree,
                                    "greedy_common_prefix": greedy, "runs": per_run})


if __name__ == "__main__":
    main()
