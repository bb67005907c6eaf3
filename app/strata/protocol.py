"""Plain data that crosses between the core and its fronts (CLI, TUI, sessions, replay).

The decode loop produces `WindowEvent`s; live panels, the session store and replay all consume
the same objects, so a panel cannot tell live data from a replayed recording.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Protocol

# Field names follow llama.cpp's counters where one exists (n_drafted, n_accept).
WINDOW_FIELDS = (
    "pos0", "T", "n_drafted", "n_accept", "keep", "emitted", "match_len", "drafter",
    "window_us", "run_us", "fold_us",
    "hits", "cold_misses", "urgent_loads", "prefetch_issued", "prefetch_used", "prefetch_wasted",
    "late_wait_us", "bytes_read", "prefetched_bytes", "extra_cold", "weight_bytes",
    "cache_slots_used", "cache_slots_total", "approximate",
)


@dataclass
class WindowStats:
    """Telemetry of one decode window (see engine_ext/telemetry.h)."""

    pos0: int = 0
    T: int = 0
    n_drafted: int = 0
    n_accept: int = 0
    keep: int = 0
    emitted: int = 0
    match_len: int = 0
    drafter: str = "none"          # "none" | "baseline" | "suffix"
    window_us: float = 0.0
    run_us: float = 0.0
    fold_us: float = 0.0
    hits: int = 0
    cold_misses: int = 0
    urgent_loads: int = 0
    prefetch_issued: int = 0
    prefetch_used: int = 0
    prefetch_wasted: int = 0
    late_wait_us: float = 0.0
    bytes_read: int = 0
    prefetched_bytes: int = 0
    extra_cold: int = 0
    weight_bytes: int = 0          # weights the window touched (each distinct expert once)
    cache_slots_used: int = 0
    cache_slots_total: int = 0
    approximate: bool = False
    union_per_layer: list[int] = field(default_factory=list)
    # experts selected in this window: one list of expert ids per MoE layer
    experts: list[list[int]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "WindowStats":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


@dataclass
class WindowEvent:
    """Tokens a window emitted (already verified), their text, and the window's telemetry."""

    tokens: list[int]
    text: str
    stats: WindowStats
    finished: bool = False          # True on the last event of a generation
    stop_reason: str | None = None  # "eos" | "max_new" | "context" | "stopped" on the last event


@dataclass
class GenerationSettings:
    max_new: int = 256
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = 0
    draft: str = "suffix"           # "none" | "suffix"
    drafter: str = "suffix"         # "baseline" | "suffix"
    max_draft: int | None = None    # None = adaptive length controller; K = fixed
    min_match: int = 4

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "GenerationSettings":
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


class TextGenerator(Protocol):
    """What the fronts need from a loaded model. `strata.generate.Generator` is the real one;
    tests of the UI use a fake with the same surface."""

    model_name: str
    model_id: str                    # identity hash of the model (for sessions / state blobs)
    context_limit: int

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    @property
    def pos(self) -> int: ...
    def stream(self, prompt_ids: list[int], settings: GenerationSettings,
               should_stop: Callable[[], bool] | None = None) -> Iterator[WindowEvent]: ...
    def snapshot(self) -> bytes: ...          # engine + sampler + drafter state, committed only
    def restore(self, blob: bytes) -> None: ...
    def reset(self) -> None: ...
