"""Loading a strata pack: the engine's dense weights from dense.safetensors, the experts streamed
through a resident cache by the native StreamingExpertStore."""
from __future__ import annotations

import os

from ..config import read_config, tensor_bounds
from ..errors import ModelError, UsageError
from ..model import build_engine
from .format import PackInfo, check_pack_matches, config_digest, is_gguf_pack, pack_tensor_table, read_pack
from .options import EVICTIONS, IO_MODES, parse_cache_size, parse_routing


def open_expert_store(info: PackInfo, *, cache_bytes: int | None = None, io_mode: str = "direct",
                      eviction: str = "lru", io_threads: int = 4, readahead: bool = False,
                      prefault: bool = False):
    """The native StreamingExpertStore over a pack's expert file."""
    from .. import _engine  # noqa: PLC0415 (native module)

    if io_mode not in IO_MODES:
        raise UsageError(f"--io-mode: {io_mode!r} is not one of {', '.join(IO_MODES)}")
    if eviction not in EVICTIONS:
        raise UsageError(f"--eviction: {eviction!r} is not one of {', '.join(EVICTIONS)}")
    ex = info.ex
    return _engine.StreamingExpertStore(
        info.experts_path, ex["data_offset"], ex["stride"], ex["blob_bytes"], ex["num_experts"],
        ex["hidden_size"], ex["moe_intermediate_size"], ex["dtype"], [int(x) for x in ex["layers"]],
        info.crcs, int(info.expert_bytes if cache_bytes is None else cache_bytes), io_mode=io_mode,
        eviction=eviction, io_threads=int(io_threads), readahead=bool(readahead), prefault=bool(prefault),
        formats=info.layer_formats)


def _cache_bytes(info: PackInfo, expert_cache) -> int:
    """The slot budget in stored bytes (4 KiB-aligned blobs) of the pack's experts."""
    if expert_cache is None:
        return info.expert_bytes
    if isinstance(expert_cache, int) and not isinstance(expert_cache, bool):
        return expert_cache
    return parse_cache_size(expert_cache, info.expert_bytes)


def _check_expert_formats(info: PackInfo, backend: str | None) -> None:
    """ModelError (one line) when the backend has no kernel for a format the pack's expert blobs
    are stored in: streamed experts reach the kernels as stored, with no conversion at load (a
    pack that an older strata converted from an F16 GGUF file holds F16 experts)."""
    from .. import _engine  # noqa: PLC0415 (native module)

    name = backend or "cpu"
    first: dict[str, int] = {}  # format -> the first layer that stores it (one check per format)
    for o, formats in enumerate(info.layer_formats):
        for fmt in formats:
            first.setdefault(fmt, int(info.ex["layers"][o]))
    for fmt, layer in first.items():
        if not _engine.ops.supports(name, "matmul", fmt):
            raise ModelError(f"{info.experts_path}: layer {layer}'s experts are stored as {fmt}, which the "
                             f"{name} backend cannot compute (convert the source again: strata convert "
                             "stores F16 experts as F32)")


def _load_gguf_pack(info: PackInfo, store_kw: dict, expert_cache, routing, threads=None, fold="eager",
                    ctx=None, backend="cpu"):
    """A pack converted from a GGUF file: spec, tokenizer and dense tensors from its dense.gguf
    (blocks as the source stored them), experts streamed."""
    from .. import gguf as _gguf  # noqa: PLC0415
    from ..gguf.loader import engine_config  # noqa: PLC0415
    from ..model import model_id_of, new_engine  # noqa: PLC0415

    model = _gguf.open_gguf(info.dense_path)
    spec = _gguf.spec_from_metadata(model)
    check_pack_matches(info, spec)
    _check_expert_formats(info, backend)
    table = _gguf.canonical_tensors(model, spec, experts=False)
    store = open_expert_store(info, cache_bytes=_cache_bytes(info, expert_cache), **store_kw)
    rows = [(name, t.path, t.offset, t.type, list(t.shape)) for name, t in table.items()]
    cfg = engine_config(model, spec)
    cfg["formats"] = sorted(set(cfg["formats"]) | {f for lf in info.layer_formats for f in lf})
    engine = new_engine(spec, rows, store, threads=threads, fold=fold, ctx=ctx,
                        model_id=info.header.get("source", {}).get("model_id") or model_id_of(spec, table, fmt="type"),
                        config=cfg, backend=backend)
    routing_kw = parse_routing(routing)
    if routing_kw:
        engine.set_routing(**routing_kw)
    return engine


def load_pack(path, *, expert_cache=None, io_mode: str = "direct", eviction: str = "lru",
              io_threads: int = 4, readahead: bool = False, routing=None, prefault: bool = False,
              **options):
    """Loads a strata pack into an engine whose experts stream through a resident cache.

    `expert_cache`: bytes (int), or text as `parse_cache_size` reads it ("8GiB", "0.25", ...);
    None holds every expert. `routing`: cache-aware routing (see parse_routing; default exact).
    Other options go to `strata.model.build_engine`.
    """
    info = read_pack(os.fspath(path))
    if is_gguf_pack(info):
        store_kw = dict(io_mode=io_mode, eviction=eviction, io_threads=io_threads, readahead=readahead,
                        prefault=prefault)
        return _load_gguf_pack(info, store_kw, expert_cache, routing, **options)
    dense = pack_tensor_table(info)
    bounds = tensor_bounds(t[0] for t in dense)
    bounds["layers"] = max(bounds["layers"], 1 + max((int(x) for x in info.ex["layers"]), default=-1))
    bounds["experts"] = int(info.ex["num_experts"])
    raw, spec = read_config(info.path, bounds=bounds)
    want = info.header.get("source", {}).get("config_sha256")
    if want and want != config_digest(raw):
        raise ModelError(f"{os.path.join(info.path, 'config.json')}: does not match the pack it sits in "
                         "(the pack was converted from a different model; re-run strata convert)")
    check_pack_matches(info, spec)
    cache = _cache_bytes(info, expert_cache)
    store = open_expert_store(info, cache_bytes=cache, io_mode=io_mode, eviction=eviction,
                              io_threads=io_threads, readahead=readahead, prefault=prefault)
    engine = build_engine(spec, dense, expert_store=store, config=raw, **options)
    routing_kw = parse_routing(routing)
    if routing_kw:
        engine.set_routing(**routing_kw)
    return engine
