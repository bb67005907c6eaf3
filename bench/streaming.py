#!/usr/bin/env python3
"""Expert streaming benchmark.

Builds a synthetic MoE pack of several GB on disk (random weights, realistic shape: many layers,
>= 128 experts, top-k 8), then in one run measures:

  * the raw uncached read rate of that disk (O_DIRECT reads of the same file, same block size =
    one expert blob, same blobs, same number of threads as strata's IO pool, by plain C++ threads
    with no cache and no checksum; measured before and after strata, averaged; a Python reader
    and dd are printed too) against strata's cold-read rate through the store, for two patterns:
    whole layers in file order, and per-token unions (top-k random experts per layer, one layer
    at a time as the engine asks);
  * the engine decoding over the pack at expert caches of 10/25/50/100 % of the expert bytes,
    for T=1 windows and for drafted windows (root + 3 random drafts, keep drawn with a 0.7
    per-draft acceptance), in both IO modes: tokens/s, hit rate, bytes read per token, achieved
    read rate, union per layer and extra cold experts per window;
  * read-ahead on/off and LRU vs LFU at 25 %.

Speeds are compared as ratios inside this one run (the machines are noisy); each engine row
waits for a quiet machine first and records the cores other processes used ("others"), with
the quiet-machine options every bench/ script takes (bench/benchlib.py). The pack is
deleted afterwards unless --keep.

    PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python bench/streaming.py [--quick]
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

import numpy as np

import benchlib

benchlib.import_strata()  # installed, or a checkout: PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME
from strata import config as strata_config  # noqa: E402
from strata import pack  # noqa: E402


def synth_config(layers: int, experts: int, top_k: int, hidden: int, inter: int, vocab: int) -> dict:
    """A qwen3_next-shaped config: Gated DeltaNet with a full-attention layer every 4th."""
    return {
        "model_type": "qwen3_next",
        "architectures": ["Qwen3NextForCausalLM"],
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * inter,
        "moe_intermediate_size": inter,
        "shared_expert_intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 8,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_conv_kernel_dim": 4,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.25,
        "tie_word_embeddings": False,
    }


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even


def synth_dense(cfg: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    spec = strata_config.normalize(cfg)
    out = {}
    for name, shape in strata_config.required_tensors(spec, experts=False).items():
        hf = name if name == "lm_head.weight" else "model." + name
        if len(shape) == 1:
            out[hf] = (rng.standard_normal(shape) * 0.05).astype(np.float32)
        else:
            fan_in = shape[-1]
            out[hf] = to_bf16_bits(rng.standard_normal(shape, dtype=np.float32) / np.sqrt(fan_in))
    return out


def build_pack(dst: str, args) -> str:
    cfg = synth_config(args.layers, args.experts, args.top_k, args.hidden, args.inter, args.vocab)
    rng = np.random.default_rng(0)
    dense = synth_dense(cfg, rng)
    n = 3 * args.hidden * args.inter
    # one pool of valid bf16 values; each blob is a window at its own offset (distinct bytes, fast)
    pool = to_bf16_bits(rng.standard_normal(n + 65536, dtype=np.float32) / np.sqrt(args.hidden)).tobytes()

    def blob(li: int, e: int) -> bytes:
        off = 2 * ((li * 7919 + e * 104729) % 65536)
        return pool[off:off + 2 * n]

    t0 = time.monotonic()
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty() and time.monotonic() - last[0] > 0.2:
            last[0] = time.monotonic()
            sys.stderr.write(f"\rwriting pack {done / total * 100:5.1f}%")

    pack.write_synthetic_pack(dst, cfg, dense, layers=list(range(args.layers)), num_experts=args.experts,
                              hidden=args.hidden, inter=args.inter, dtype="bf16", blob=blob, progress=progress)
    if sys.stderr.isatty():
        sys.stderr.write("\n")
    info = pack.read_pack(dst)
    print(f"pack: {args.layers} layers x {args.experts} experts x {pack.human_bytes(info.ex['stride'])} = "
          f"{pack.human_bytes(info.expert_bytes)} of experts, top-{args.top_k}; written in "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    return dst


def drop_cache(path: str) -> None:
    if not hasattr(os, "posix_fadvise"):  # macOS: no per-file drop; reads are uncached anyway
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _direct_ok(path: str) -> bool:
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_DIRECT))
        return True
    except (OSError, AttributeError):
        return False


def raw_read_rate_native(info: pack.PackInfo, blobs: list[int], threads: int) -> float:
    """Same as raw_read_rate, in C++ threads (no GIL, no cache, no checksum)."""
    from strata import _engine

    ex = info.ex
    drop_cache(info.experts_path)
    offsets = [ex["data_offset"] + b * ex["stride"] for b in blobs]
    n, dt = _engine.raw_read(info.experts_path, offsets, ex["stride"], threads, _direct_ok(info.experts_path))
    return n / dt


def raw_read_rate(info: pack.PackInfo, blobs: list[int], threads: int) -> float:
    """Uncached reads of exactly these blobs (whole stride each) by `threads` threads pulling from
    one queue: the disk's rate for strata's block size, file and access pattern."""
    ex = info.ex
    drop_cache(info.experts_path)
    direct = _direct_ok(info.experts_path)
    nxt = [0]
    lock = threading.Lock()
    total = [0] * threads

    def worker(i: int) -> None:
        fd = os.open(info.experts_path, os.O_RDONLY | (os.O_DIRECT if direct else 0))
        buf = mmap.mmap(-1, ex["stride"])  # page-aligned
        try:
            while True:
                with lock:
                    j = nxt[0]
                    nxt[0] += 1
                if j >= len(blobs):
                    return
                off = ex["data_offset"] + blobs[j] * ex["stride"]
                total[i] += os.preadv(fd, [buf], off)
                if not direct and hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(fd, off, ex["stride"], os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(total) / (time.monotonic() - t0)


def dd_read_rate(info: pack.PackInfo, first_blob: int, n_blobs: int) -> float | None:
    """A second raw baseline for contiguous ranges: GNU dd with O_DIRECT, one blob per read."""
    import subprocess

    ex = info.ex
    if not shutil.which("dd") or not _direct_ok(info.experts_path):
        return None
    drop_cache(info.experts_path)
    cmd = ["dd", f"if={info.experts_path}", "of=/dev/null", f"bs={ex['stride']}", f"count={n_blobs}",
           f"skip={ex['data_offset'] + first_blob * ex['stride']}", "iflag=direct,skip_bytes"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True)
    if r.returncode != 0:
        return None
    return n_blobs * ex["stride"] / (time.monotonic() - t0)


def store_read_rate(info: pack.PackInfo, groups: list[tuple[int, list[int]]], io_mode: str,
                    threads: int) -> float:
    """strata's cold-read rate through the store: each (pack layer, experts) group is one layer's
    acquire (all of it in flight, then wait), nothing cached beforehand."""
    ex = info.ex
    drop_cache(info.experts_path)
    st = pack.open_expert_store(info, cache_bytes=ex["num_experts"] * ex["stride"], io_mode=io_mode,
                                io_threads=threads, prefault=True)
    t0 = time.monotonic()
    for ordinal, experts in groups:
        st.acquire_release(ex["layers"][ordinal], experts, [])
    dt = time.monotonic() - t0
    return st.drain_telemetry()["bytes_read"] / dt


def read_rates(info: pack.PackInfo, threads: int, modes: list[str], top_k: int, quick: bool) -> dict:
    """Raw vs strata on two access patterns, raw measured before and after (mean) to damp noise:
    whole layers in file order, and per-token unions (top-k random experts per layer)."""
    ex = info.ex
    L, E = ex["num_layers"], ex["num_experts"]
    rng = random.Random(1)
    seq = [(o, list(range(E))) for o in range(min(L, 4))]
    tokens = 2 if quick else 8
    rnd = [(o, sorted(rng.sample(range(E), top_k))) for _ in range(tokens) for o in range(L)]
    out = {}
    for name, groups in (("layers", seq), ("token_unions", rnd)):
        blobs = [o * E + e for o, experts in groups for e in experts]
        raw1 = raw_read_rate_native(info, blobs, threads)
        rates = {m: store_read_rate(info, groups, m, threads) for m in modes}
        raw2 = raw_read_rate_native(info, blobs, threads)
        out[name] = {"raw": (raw1 + raw2) / 2, "raw_runs": [raw1, raw2], **rates}
        out[name]["raw_python"] = raw_read_rate(info, blobs, threads)
        if name == "layers":  # contiguous: dd (one thread, one blob per read) as a cross-check.
            # It runs last, right after the same blobs were read, so on a VM whose disk is a host
            # file it may be served partly from the host's cache: printed, not used as the baseline.
            out[name]["raw_dd"] = dd_read_rate(info, 0, len(blobs))
    out["raw_mode"] = "O_DIRECT" if _direct_ok(info.experts_path) else "buffered+DONTNEED"
    return out


def run_engine(path: str, *, cache: str, io_mode: str, drafted: bool, windows: int, warmup: int,
               readahead: bool = False, eviction: str = "lru", io_threads: int = 4, seed: int = 0,
               routing: str = "off") -> dict:
    info = pack.read_pack(path)
    drop_cache(info.experts_path)
    # prefault: first touch of fresh memory runs at 50-400 MiB/s on some VMs (slower than the
    # disk); touching the slots up front keeps that one-time cost out of the IO numbers
    eng = pack.load_pack(path, expert_cache=cache, io_mode=io_mode, readahead=readahead, eviction=eviction,
                         io_threads=io_threads, prefault=True, routing=routing)
    rng = random.Random(seed)
    vocab = eng.vocab_size
    prompt = [rng.randrange(vocab) for _ in range(8)]
    logits = eng.run(prompt)
    eng.commit(len(prompt))
    root = int(np.argmax(logits[-1]))
    agg = {k: 0 for k in ("hits", "cold_misses", "bytes_read", "prefetch_issued", "prefetch_used",
                          "prefetch_wasted", "prefetched_bytes", "extra_cold", "tokens", "windows")}
    agg.update(late_wait_us=0.0, run_us=0.0, union=0, union_layers=0)
    t_start = None
    for w in range(warmup + windows):
        if w == warmup:
            t_start = time.monotonic()
        drafts = [rng.randrange(vocab) for _ in range(3)] if drafted else []
        logits = eng.run([root] + drafts)
        t = eng.last_telemetry()
        keep = 1
        while keep <= len(drafts) and rng.random() < 0.7:
            keep += 1
        eng.commit(keep)
        root = int(np.argmax(logits[keep - 1]))
        if w < warmup:
            continue
        for k in ("hits", "cold_misses", "bytes_read", "prefetch_issued", "prefetch_used", "prefetch_wasted",
                  "prefetched_bytes", "extra_cold"):
            agg[k] += int(t[k])
        agg["late_wait_us"] += float(t["late_wait_us"])
        agg["run_us"] += float(t["run_us"])
        agg["union"] += sum(t["union_per_layer"])
        agg["union_layers"] += len(t["union_per_layer"])
        agg["tokens"] += keep
        agg["windows"] += 1
    wall = time.monotonic() - t_start
    slots = t["cache_slots_total"]
    looked = agg["hits"] + agg["cold_misses"]
    return {
        "cache": cache, "io_mode": eng.expert_store.io_mode, "drafted": drafted, "readahead": readahead,
        "routing": routing, "approximate": pack.routing_is_approximate(pack.parse_routing(routing)),
        "eviction": eviction, "slots": slots, "wall_s": wall,
        "tok_s": agg["tokens"] / wall if wall else 0.0,
        "hit_rate": agg["hits"] / looked if looked else 0.0,
        "bytes_per_token": agg["bytes_read"] / max(agg["tokens"], 1),
        "read_rate": agg["bytes_read"] / wall if wall else 0.0,
        "late_wait_share": agg["late_wait_us"] / 1e6 / wall if wall else 0.0,
        "union_per_layer": agg["union"] / max(agg["union_layers"], 1),
        "extra_cold_per_window": agg["extra_cold"] / max(agg["windows"], 1),
        **{k: agg[k] for k in ("tokens", "windows", "hits", "cold_misses", "bytes_read", "prefetch_issued",
                               "prefetch_used", "prefetch_wasted")},
    }


def fmt_row(r: dict) -> str:
    mib = 1 << 20
    return (f"| {r['io_mode']:<17} | {r['cache']:>5} | {'T=4 drafted' if r['drafted'] else 'T=1':<11} | "
            f"{'on' if r['readahead'] else 'off':<3} | {r['eviction']} | {r['tok_s']:7.2f} | "
            f"{r['hit_rate'] * 100:5.1f}% | {r['bytes_per_token'] / mib:8.1f} | {r['read_rate'] / mib:7.0f} | "
            f"{r['late_wait_share'] * 100:5.1f}% | {r['union_per_layer']:5.1f} | {r['extra_cold_per_window']:6.1f} | "
            f"{r['routing']}{' (approx.)' if r['approximate'] else ''} | "
            + (f"{r['others_cores']:.2f}" if r.get("others_cores") is not None else "?")
            + (" (busy)" if r.get("busy") else "") + " |")


HEADER = ("| IO mode           | cache | window      | RA  | evict | tok/s   | hits   | MiB/token | MiB/s   "
          "| wait  | union | xcold  | routing | others |\n"
          "|-------------------|-------|-------------|-----|-------|---------|--------|-----------|---------"
          "|-------|-------|--------|---------|--------|")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="where to build the pack (default: a temp dir)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--inter", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--windows", type=int, default=16, help="measured windows per configuration")
    ap.add_argument("--warmup", type=int, default=6, help="unmeasured windows first (cache fills)")
    ap.add_argument("--io-threads", type=int, default=4)
    ap.add_argument("--caches", default="0.10,0.25,0.50,1.0")
    ap.add_argument("--modes", default="direct,page_cache")
    ap.add_argument("--quick", action="store_true", help="a small pack and few windows (smoke test)")
    ap.add_argument("--extras-only", action="store_true",
                    help="only the read-ahead / LFU / MoCE rows at 25 %% (skip the cache x mode matrix)")
    ap.add_argument("--keep", action="store_true", help="keep the pack afterwards")
    ap.add_argument("--out", default=None, help="write every result as JSON here")
    benchlib.add_quiet_args(ap)
    args = ap.parse_args(argv)
    if args.quick:
        args.layers, args.experts, args.hidden, args.inter, args.windows, args.warmup = 4, 128, 256, 128, 4, 2
    # a kill must still delete the multi-GB pack: turn SIGTERM into an exit that runs `finally`
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = args.dir or tempfile.mkdtemp(prefix="strata-streaming-bench-")
    path = os.path.join(root, "bench.strata")
    results: dict = {"args": vars(args), "runs": []}
    try:
        if not pack.is_pack(path):
            build_pack(path, args)
        info = pack.read_pack(path)
        benchlib.wait_for_quiet(args.wait_quiet, args.quiet_cores)
        rates = read_rates(info, args.io_threads, args.modes.split(","), args.top_k, args.quick)
        results["read_rates"] = rates
        mib = 1 << 20
        for name, what in (("layers", "whole layers, file order"),
                           ("token_unions", f"per-layer top-{args.top_k} unions, random")):
            r = rates[name]
            line = ", ".join(f"{m} {r[m] / mib:.0f} MiB/s = {r[m] / r['raw'] * 100:.0f}%"
                             for m in args.modes.split(","))
            dd = f", python {r['raw_python'] / mib:.0f}"
            dd += f", dd {r['raw_dd'] / mib:.0f}" if r.get("raw_dd") else ""
            print(f"cold reads, {what}: raw {rates['raw_mode']} {r['raw'] / mib:.0f} MiB/s "
                  f"(runs {r['raw_runs'][0] / mib:.0f}/{r['raw_runs'][1] / mib:.0f}{dd}); strata {line}", flush=True)
        print(HEADER, flush=True)
        configs = []
        for mode in ([] if args.extras_only else args.modes.split(",")):
            for c in args.caches.split(","):
                for drafted in (False, True):
                    configs.append(dict(cache=c, io_mode=mode, drafted=drafted))
        configs += [dict(cache="0.25", io_mode="direct", drafted=False, readahead=True),
                    dict(cache="0.25", io_mode="direct", drafted=True, readahead=True),
                    dict(cache="0.25", io_mode="direct", drafted=False, eviction="lfu"),
                    dict(cache="0.25", io_mode="direct", drafted=True, eviction="lfu"),
                    # cache-aware routing (approximate): compare with the plain 25 % rows
                    dict(cache="0.25", io_mode="direct", drafted=False, routing="protect=2,bonus=2"),
                    dict(cache="0.25", io_mode="direct", drafted=True, routing="protect=2,bonus=2"),
                    dict(cache="0.25", io_mode="direct", drafted=True, routing="hard-budget")]
        if args.extras_only:
            configs[:0] = [dict(cache="0.25", io_mode="direct", drafted=False),
                           dict(cache="0.25", io_mode="direct", drafted=True)]
        for c in configs:
            r, others, busy = benchlib.quiet_measure(
                lambda c=c: run_engine(path, windows=args.windows, warmup=args.warmup, io_threads=args.io_threads,
                                       **c), args, f"cache {c['cache']} {c['io_mode']}")
            r["others_cores"], r["busy"] = others, busy
            results["runs"].append(r)
            print(fmt_row(r), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
            if not args.dir:
                shutil.rmtree(root, ignore_errors=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
