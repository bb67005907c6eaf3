"""Options of every command that loads a model: the streamed-expert engine's knobs.

`run`, `chat`, `edit`, `replay` and `bench` declare the same five options from here:

    def cmd(..., expert_cache: Optional[str] = ExpertCacheOpt, io_mode: Optional[str] = IoModeOpt,
            eviction: Optional[str] = EvictionOpt, readahead: Optional[bool] = ReadaheadOpt,
            routing: Optional[str] = RoutingOpt):
        opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing)
        gen = open_generator(model, threads=threads, **opts.engine_kwargs())
        opts.note()                      # one stderr line when routing makes output approximate

Every value is checked here (UsageError, one line) before a model is loaded; that they need a
strata pack is checked by `strata.runtime.check_stream_options` once the model path is known.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import typer

from ..errors import UsageError

APPROXIMATE_NOTE = "cache-aware routing is on: output is approximate, not identical to the reference model"

from ..pack.options import EVICTIONS, IO_MODES  # noqa: E402 (light: no numpy, no engine)
from ..webgpu import BACKENDS  # noqa: E402 (light: finds files, loads nothing)

ExpertCacheOpt = typer.Option(
    None, "--expert-cache", metavar="SIZE",
    help="Packs: resident expert budget (bytes, '8GiB', a fraction like 0.25 or '25%', or 'all'; default all).")
IoModeOpt = typer.Option(
    None, "--io-mode", metavar="direct|page_cache",
    help="Packs: how experts are read: direct (O_DIRECT into the cache, default) or page_cache "
         "(buffered reads; the OS keeps a second copy).")
EvictionOpt = typer.Option(
    None, "--eviction", metavar="lru|lfu",
    help="Packs: which cached expert makes room: lru (least recently used, default) or lfu "
         "(least frequently used per layer).")
ReadaheadOpt = typer.Option(
    None, "--readahead/--no-readahead",
    help="Packs: prefetch the next layer's predicted experts at low priority (default off).")
BackendOpt = typer.Option(
    None, "--backend", metavar="cpu|webgpu|auto",
    help="Compute backend: cpu (default), webgpu (WGSL kernels through wgpu-native; a software "
         "adapter if that is all there is) or auto (webgpu on a real GPU, else cpu).")
RoutingOpt = typer.Option(
    None, "--routing", metavar="SPEC",
    help="Packs: cache-aware routing (MoCE), e.g. protect=2,bonus=1.5 or hard-budget; also "
         "draft-protect=J, draft-bonus=B, anchors=N, root-readahead; default off. Every mode but "
         "root-readahead makes the output approximate.")


def _choice(flag: str, value: Optional[str], allowed: tuple[str, ...]) -> Optional[str]:
    if value is None:
        return None
    v = value.strip().lower().replace("-", "_")
    if v not in allowed:
        raise UsageError(f"{flag} must be {' or '.join(allowed)}, not {value!r}")
    return v


@dataclass(frozen=True)
class StreamOptions:
    """The checked streaming options of one command line (None = the engine's default)."""

    expert_cache: Optional[str] = None
    io_mode: Optional[str] = None
    eviction: Optional[str] = None
    readahead: Optional[bool] = None
    routing: Optional[dict] = None      # Engine.set_routing keywords (pack.parse_routing)
    backend: Optional[str] = None       # cpu | webgpu | auto

    @classmethod
    def from_cli(cls, expert_cache: Optional[str] = None, io_mode: Optional[str] = None,
                 eviction: Optional[str] = None, readahead: Optional[bool] = None,
                 routing: Optional[str] = None, backend: Optional[str] = None) -> "StreamOptions":
        if expert_cache is not None:
            from ..pack.options import parse_cache_size

            parse_cache_size(expert_cache, 1 << 40)  # syntax only; the pack's size caps it later
        routing_kw = None
        if routing is not None:
            from ..pack.options import parse_routing

            if not routing.strip():
                raise UsageError("--routing needs a value (off, or e.g. protect=2,bonus=1.5)")
            routing_kw = parse_routing(routing) or None  # 'off' = the default
        return cls(expert_cache=expert_cache, io_mode=_choice("--io-mode", io_mode, IO_MODES),
                   eviction=_choice("--eviction", eviction, EVICTIONS), readahead=readahead,
                   routing=routing_kw, backend=_choice("--backend", backend, BACKENDS))

    @property
    def approximate(self) -> bool:
        """A routing mode that changes the model's output is on."""
        if not self.routing:
            return False
        from ..pack.options import routing_is_approximate

        return routing_is_approximate(self.routing)

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword options for `open_generator` / `Generator.from_path` (only the given ones)."""
        kw = dict(expert_cache=self.expert_cache, io_mode=self.io_mode, eviction=self.eviction,
                  readahead=self.readahead, routing=self.routing, backend=self.backend)
        return {k: v for k, v in kw.items() if v is not None}

    def check_model(self, path) -> None:
        """UsageError (one line) when a pack-only option is given for a checkpoint folder."""
        from ..runtime import check_stream_options

        check_stream_options(path, self.engine_kwargs())

    def note(self, file=None) -> None:
        """The one-line stderr note that output is approximate (nothing in exact mode)."""
        if self.approximate:
            from .. import diagnostics

            diagnostics.note(APPROXIMATE_NOTE, file=file)
