"""The one place where a model reference becomes an engine.

    eng = strata.load("strata-tiny")                 # a bundled alias
    eng = strata.load("path/to/hf-folder")           # config.json + *.safetensors
    eng = strata.load("path/to/pack", expert_cache="25%")   # a strata pack: experts stream
    eng = strata.load("model-Q4_K_M.gguf")           # a GGUF file (or the first of a split set)

`load` resolves the reference (an alias of a bundled model or a path, never a network lookup),
checks the engine options once, asks each registered `ModelFormat` in turn whether the path is
one of its own, and hands the path to that format's loader. A new input format (GGUF files, for
one) joins by `register_format(ModelFormat(...))`; nothing else changes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import ModelError, UsageError

__all__ = ["ModelFormat", "STREAM_OPTIONS", "detect", "load", "register_format", "resolve"]

# Options that only a format with streamed experts honours (a checkpoint folder holds every expert).
STREAM_OPTIONS = ("expert_cache", "io_mode", "eviction", "readahead", "routing", "io_threads", "prefault")
FOLDS = ("eager", "lazy")


@dataclass(frozen=True)
class ModelFormat:
    """An input format: `detect(path)` says whether `path` is one; `load(path, **options)` builds
    the engine (options: threads, fold, ctx, backend, and the stream options when
    `streams_experts`)."""

    name: str
    detect: Callable[[Path], bool]
    load: Callable[..., Any]
    streams_experts: bool = False
    describe: str = ""


def _is_pack(path: Path) -> bool:
    from .pack.format import is_pack

    return is_pack(str(path))


def _load_pack(path: Path, **options: Any):
    from .pack.loader import load_pack

    return load_pack(str(path), **options)


def _is_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file() and not _is_pack(path)


def _load_checkpoint(path: Path, **options: Any):
    from .model import load_checkpoint

    return load_checkpoint(str(path), **options)


def _is_gguf(path: Path) -> bool:
    from .gguf import is_gguf

    # by name too, so a damaged .gguf file gets the GGUF reader's error, not "not a folder"
    return path.is_file() and (path.suffix.lower() == ".gguf" or is_gguf(path))


def _load_gguf(path: Path, **options: Any):
    from .gguf import load_gguf

    return load_gguf(str(path), **options)


# Asked in order: a pack folder also has a config.json, so packs come first.
_FORMATS: list[ModelFormat] = [
    ModelFormat("gguf", _is_gguf, _load_gguf,
                describe="a GGUF file (or the first file of a split set)"),
    ModelFormat("strata-pack", _is_pack, _load_pack, streams_experts=True,
                describe="a strata pack (strata convert)"),
    ModelFormat("hf-checkpoint", _is_checkpoint, _load_checkpoint,
                describe="a Hugging Face checkpoint folder (config.json + *.safetensors)"),
]


def register_format(fmt: ModelFormat, *, first: bool = True) -> None:
    """Add an input format (asked before the built-in ones unless `first=False`)."""
    global _FORMATS
    rest = [f for f in _FORMATS if f.name != fmt.name]
    _FORMATS = [fmt, *rest] if first else [*rest, fmt]


def formats() -> list[ModelFormat]:
    return list(_FORMATS)


def resolve(model: str | os.PathLike | None) -> Path:
    """An alias of a bundled model (None = the default) or a path that exists."""
    from .models import resolve_model

    return resolve_model(model)


def detect(path: str | os.PathLike) -> ModelFormat:
    """The format of an existing path; ModelError (one line) naming what it is not."""
    p = Path(path)
    for fmt in _FORMATS:
        if fmt.detect(p):
            return fmt
    kinds = "; ".join(f.describe or f.name for f in _FORMATS)
    if p.is_file():
        raise ModelError(f"{p}: give the model folder, not a file inside it ({kinds})")
    if p.is_dir():
        raise ModelError(f"{p}: no config.json (not a Hugging Face checkpoint folder or a strata pack)")
    raise ModelError(f"{p}: no such model folder or pack")


def check_engine_options(*, threads: Any = None, ctx: Any = None, fold: Any = "eager") -> None:
    """The engine options every format takes, checked against the engine's limits (UsageError)."""
    from .settings import check_int, engine_limits

    lim = engine_limits()
    if threads is not None:
        check_int("threads", threads, 1, lim["max_threads"])
    if ctx is not None:
        check_int("ctx", ctx, 0, lim["max_context"])
    if fold not in FOLDS:
        raise UsageError(f"fold must be {' or '.join(FOLDS)}, not {fold!r}")


def load(model: str | os.PathLike | None = None, *, threads: int | None = None, fold: str = "eager",
         ctx: int | None = None, backend: str | None = "cpu", **stream_options: Any):
    """Load a model into an engine. `model`: a bundled alias ("strata-tiny"), a Hugging Face
    checkpoint folder, or a strata pack (whose experts stream through a cache of `expert_cache`
    bytes; `stream_options`: expert_cache, io_mode, eviction, io_threads, readahead, routing)."""
    unknown = sorted(set(stream_options) - set(STREAM_OPTIONS))
    if unknown:
        raise TypeError(f"load() got an unexpected keyword argument {unknown[0]!r}")
    check_engine_options(threads=threads, ctx=ctx, fold=fold)
    backend = resolve_backend(backend)
    path = resolve(model)
    fmt = detect(path)
    given = {k: v for k, v in stream_options.items() if v is not None}
    check_stream_options(path, given, fmt)
    return fmt.load(path, threads=threads, fold=fold, ctx=ctx, backend=backend, **given)


def resolve_backend(name: str | None) -> str:
    """cpu, webgpu, or auto (a real GPU adapter when one opens, else cpu); UsageError for another
    name, ModelError (one line) when the backend cannot run here (no WebGPU in this build, no
    driver)."""
    if name in (None, "cpu"):
        return "cpu"
    from .errors import StrataError
    from .webgpu import BACKENDS, resolve_backend as resolve_webgpu

    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r} (use {', '.join(BACKENDS)})")
    try:
        return resolve_webgpu(name)
    except StrataError as exc:
        raise ModelError(str(exc)) from None


def check_stream_options(path: str | os.PathLike, options: dict[str, Any], fmt: ModelFormat | None = None) -> None:
    """UsageError (one line) when a stream option is given for a model whose experts do not stream."""
    given = [k for k in STREAM_OPTIONS if options.get(k) is not None]
    if not given:
        return
    fmt = fmt or detect(path)
    if fmt.streams_experts:
        return
    flags = ", ".join("--" + k.replace("_", "-") for k in given)
    needs = f"{flags} {'needs' if len(given) == 1 else 'need'} a strata pack"
    what = "a checkpoint folder" if fmt.name == "hf-checkpoint" else (fmt.describe or fmt.name)
    raise UsageError(f"{needs}, and {path} is {what} (make one with: strata convert {path} DST)")
