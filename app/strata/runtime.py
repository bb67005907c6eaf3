"""One place where the commands get a generator and read a model's metadata.

`open_generator` resolves `--model` (an explicit path or a bundled alias, never a network
lookup) and builds the real `strata.generate.Generator`, imported lazily so that `strata
sessions ...` and friends never load the engine. `model_info` reads only metadata (config.json,
safetensors headers, a pack header) for `strata info`.
"""
from __future__ import annotations

import os
from collections import Counter
from typing import Any

from . import loader
from .errors import ModelError, UsageError
from .loader import STREAM_OPTIONS
from .models import resolve_model

FAKE_MODEL = "fake"
# The deterministic fake engine is reachable from the CLI only when this is set (tests, demos).
FAKE_ENV = "STRATA_ALLOW_FAKE"


def fake_allowed() -> bool:
    return os.environ.get(FAKE_ENV, "") not in ("", "0")


# Generator options that only a strata pack can honour (a checkpoint folder holds every expert).
PACK_ONLY_OPTIONS = STREAM_OPTIONS


def check_stream_options(path: str | os.PathLike, opts: dict[str, Any]) -> None:
    """UsageError (one line) when a pack-only option is given for a model that is not a pack."""
    given = [k for k in PACK_ONLY_OPTIONS if opts.get(k) is not None]
    if given and str(path) == FAKE_MODEL:
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(f"{flags} {'needs' if len(given) == 1 else 'need'} a strata pack; "
                         "the fake test model has no experts to stream")
    loader.check_stream_options(path, opts)


def open_generator(model: str | os.PathLike | None = None, **opts: Any):
    """A TextGenerator for `model` (None = the bundled default). Options go to the Generator
    (expert_cache, backend, ...); the streaming ones (PACK_ONLY_OPTIONS) need a pack."""
    loader.check_engine_options(threads=opts.get("threads"), ctx=opts.get("ctx"))  # every model, fake too
    if model is not None and str(model) == FAKE_MODEL and fake_allowed():
        check_stream_options(FAKE_MODEL, opts)
        from .testing.fake import FakeGenerator

        hold = os.environ.get("STRATA_FAKE_HOLD")  # "N:FILE" or "end:FILE": see FakeGenerator
        held = dict(zip(("hold_at", "hold_file"), hold.split(":", 1))) if hold and ":" in hold else {}
        return FakeGenerator(**{k: v for k, v in opts.items() if k in ("context_limit", "window_delay")},
                             **held)
    path = resolve_model(model)
    check_stream_options(path, opts)
    try:
        from .generate import Generator
    except ImportError as exc:
        raise ModelError(f"the decoding engine is not available in this build ({exc})") from None
    opts = {k: v for k, v in opts.items() if v is not None}
    from_path = getattr(Generator, "from_path", None)
    gen = from_path(str(path), **opts) if from_path is not None else Generator(str(path), **opts)
    try:
        gen.model_path = str(path.resolve())  # recorded in sessions so replay can find the model
        # recorded in sessions too, so a replay can say why its output differs
        routing = opts.get("routing") or None
        gen.routing = routing
        if routing:
            from .pack import routing_is_approximate

            gen.approximate = routing_is_approximate(routing)
    except AttributeError:
        pass
    return gen


# -- metadata ----------------------------------------------------------------------------------
def _text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    # multimodal checkpoints nest the language model's fields
    inner = cfg.get("text_config")
    return {**cfg, **inner} if isinstance(inner, dict) else cfg


def _direct_io_supported(path: str) -> bool | None:
    """Whether the file system lets strata open `path` with O_DIRECT (None: cannot tell)."""
    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError as exc:
        import errno

        return False if exc.errno == errno.EINVAL else None
    os.close(fd)
    return True


def _gguf_pack_info(path) -> dict[str, Any]:
    """strata info of a pack converted from a GGUF file: the GGUF facts of its dense.gguf, the
    expert formats and the bytes a token reads."""
    from . import gguf as _gguf
    from .pack.format import read_pack

    pinfo = read_pack(str(path))
    info = _gguf.gguf_info(pinfo.dense_path)
    mix = pinfo.format_mix()
    formats = dict(info.get("formats") or {})
    for fmt, nbytes in mix.items():
        formats[fmt] = formats.get(fmt, 0) + nbytes
    ex = pinfo.ex
    io = _pack_io_facts(pinfo, {"num_experts_per_tok": info.get("experts_per_token")})
    info.update({
        "path": str(path), "format": "strata-pack (from GGUF)",
        "params": info["params"] + ex["num_layers"] * ex["num_experts"] * 3 * ex["hidden_size"] * ex["moe_intermediate_size"],
        "bytes_per_token": info["bytes_per_token"] + io["expert_bytes_per_token"],
        "size_on_disk": sum(f.stat().st_size for f in path.iterdir() if f.is_file()),
        "formats": dict(sorted(formats.items(), key=lambda kv: -kv[1])),
        "dtype": max(formats, key=formats.get) if formats else None,
        "expert_formats": mix, "expert_bytes": pinfo.expert_bytes, "pack_id": pinfo.header.get("pack_id"),
        "pack_io": io,
    })
    return info


def _pack_io_facts(pinfo, cfg: dict[str, Any]) -> dict[str, Any]:
    """What decides a pack's IO: blob size and alignment, bytes per layer, O_DIRECT support."""
    ex = pinfo.ex
    topk = cfg.get("num_experts_per_tok") or 0
    return {
        "pack_version": pinfo.header.get("version"),
        "experts_file": os.path.basename(pinfo.experts_path),
        "dense_file": os.path.basename(pinfo.dense_path),
        "dense_bytes": os.path.getsize(pinfo.dense_path),
        "moe_layers": int(ex["num_layers"]),
        "experts_per_layer": int(ex["num_experts"]),
        "expert_dtype": ex["dtype"],
        "blob_bytes": int(ex["blob_bytes"]),
        "blob_stride": int(ex["stride"]),
        "blobs": int(ex["num_layers"]) * int(ex["num_experts"]),
        "layer_bytes": int(ex["num_experts"]) * int(ex["stride"]),
        "topk_bytes_per_layer": int(topk) * int(ex["stride"]),
        # expert bytes one token reads when none of its experts is cached (stored bytes)
        "expert_bytes_per_token": int(topk) * sum(pinfo.layer_blob_bytes(o) for o in range(int(ex["num_layers"]))),
        "expert_formats": pinfo.format_mix(),
        "direct_io": _direct_io_supported(pinfo.experts_path),
    }


def model_info(model: str | os.PathLike | None) -> dict[str, Any]:
    """Metadata of a Hugging Face checkpoint folder, a strata pack or a GGUF file, without loading weights."""
    from .config import read_config_json
    from .pack.format import read_pack
    from .safetensors_io import checkpoint_tensors, read_header
    from . import gguf as _gguf

    path = resolve_model(model)
    fmt = loader.detect(path)  # the same detection as loading: a damaged .gguf is still a GGUF
    if fmt.name == "gguf":
        return _gguf.gguf_info(path)
    is_pack = fmt.streams_experts
    if is_pack and (path / "dense.gguf").is_file():
        return _gguf_pack_info(path)
    cfg = _text_config(read_config_json(path))
    files = [f for f in path.iterdir() if f.is_file()]
    info: dict[str, Any] = {
        "path": str(path),
        "format": "strata-pack" if is_pack else "hf-checkpoint",
        "model_type": cfg.get("model_type"),
        "layers": cfg.get("num_hidden_layers"),
        "hidden_size": cfg.get("hidden_size"),
        "vocab_size": cfg.get("vocab_size"),
        "experts": cfg.get("num_experts", cfg.get("n_routed_experts")),
        "experts_per_token": cfg.get("num_experts_per_tok"),
        "moe_intermediate_size": cfg.get("moe_intermediate_size"),
        "shared_expert": bool(cfg.get("shared_expert_intermediate_size")),
        "context_length": cfg.get("max_position_embeddings"),
        "size_on_disk": sum(f.stat().st_size for f in files),
    }
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list):
        info["layer_types"] = dict(Counter(str(t) for t in layer_types))
    by_dtype: Counter[str] = Counter()
    params = 0
    if is_pack:
        pinfo = read_pack(str(path))
        tensors = read_header(pinfo.dense_path)
        ex = pinfo.ex
        expert_params = ex["num_layers"] * ex["num_experts"] * 3 * ex["hidden_size"] * ex["moe_intermediate_size"]
        params += expert_params
        for fmt, nbytes in pinfo.format_mix().items():
            by_dtype[fmt] += nbytes
        info["expert_formats"] = pinfo.format_mix()
        info["expert_bytes"] = pinfo.expert_bytes
        info["pack_id"] = pinfo.header.get("pack_id")
        info["pack_io"] = _pack_io_facts(pinfo, cfg)
    else:
        tensors = checkpoint_tensors(str(path))
    for t in tensors.values():
        n = 1
        for s in t.shape:
            n *= s
        params += n
        by_dtype[t.dtype] += t.nbytes
    info["params"] = params
    info["dtype"] = by_dtype.most_common(1)[0][0] if by_dtype else None
    info["tensors"] = len(tensors)
    return info
