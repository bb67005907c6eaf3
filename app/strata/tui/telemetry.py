"""What the live panels show, computed from `WindowStats` only (no textual here).

`TelemetryLog` is the panels' model: the app appends every window it hears about (live or
replayed, through the same message) and the panels read aggregates from it when their
repaint timer fires. Keeping the arithmetic here keeps the widgets small and lets the tests
check the numbers without a terminal.
"""
from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Iterable, Sequence

import numpy as np

from ..telemetry import Summary, ratio, summarize
from ..protocol import WindowStats

# Counters the cold-miss panel shows, in display order: (label, WindowStats field).
IO_COUNTERS = (
    ("hits", "hits"),
    ("cold misses", "cold_misses"),
    ("urgent loads", "urgent_loads"),
    ("prefetch used", "prefetch_used"),
    ("prefetch wasted", "prefetch_wasted"),
    ("late waits ms", "late_wait_us"),
    ("bytes read", "bytes_read"),
)


def bucket_means(values: Sequence[float], buckets: int) -> list[float]:
    """Summarise `values` into at most `buckets` contiguous buckets by their mean (rates must be
    averaged, a max would make a bad run look good)."""
    if buckets <= 0 or not values:
        return []
    if len(values) <= buckets:
        return [float(v) for v in values]
    out = []
    for b in range(buckets):
        lo = b * len(values) // buckets
        hi = (b + 1) * len(values) // buckets
        chunk = values[lo:hi]
        out.append(sum(chunk) / len(chunk))
    return out


class ExpertHeat:
    """Layers x experts, each cell an exponentially decayed count of recent selections, and the
    experts that missed the resident cache in the latest window (the engine reports their ids:
    `WindowStats.cold_experts`)."""

    def __init__(self, n_layers: int = 0, n_experts: int = 0, decay: float = 0.85) -> None:
        self.decay = decay
        self.heat = np.zeros((n_layers, n_experts), dtype=np.float64)
        self.cold: set[tuple[int, int]] = set()
        self.last_union: list[int] = []

    @property
    def n_layers(self) -> int:
        return self.heat.shape[0]

    @property
    def n_experts(self) -> int:
        return self.heat.shape[1]

    def _grow(self, n_layers: int, n_experts: int) -> None:
        if n_layers > self.n_layers or n_experts > self.n_experts:
            grown = np.zeros((max(n_layers, self.n_layers), max(n_experts, self.n_experts)))
            grown[: self.n_layers, : self.n_experts] = self.heat
            self.heat = grown

    def add(self, stats: WindowStats) -> None:
        experts = stats.experts
        if not experts:
            return
        top = max((max(ids) for ids in experts if ids), default=-1)
        self._grow(len(experts), top + 1)
        self.heat *= self.decay
        for layer, ids in enumerate(experts):
            if ids:
                self.heat[layer, np.asarray(ids, dtype=np.int64)] += 1.0
        self.cold = {(layer, int(e)) for layer, ids in enumerate(stats.cold_experts) for e in ids}
        self.last_union = list(stats.union_per_layer) or [len(ids) for ids in experts]

    def normalised(self) -> np.ndarray:
        """Heat scaled to 0..1 by the hottest cell."""
        peak = float(self.heat.max()) if self.heat.size else 0.0
        return self.heat / peak if peak > 0 else np.zeros_like(self.heat)

    def hottest(self, layer: int, n: int = 5) -> list[tuple[int, float]]:
        row = self.heat[layer]
        order = sorted(range(len(row)), key=lambda e: (-row[e], e))[:n]
        return [(e, float(row[e])) for e in order if row[e] > 0]


class TelemetryLog:
    """Every window of the current session, and what the panels derive from it."""

    def __init__(self, n_layers: int = 0, n_experts: int = 0, recent: int = 64,
                 interval_windows: int = 16) -> None:
        self.windows: list[WindowStats] = []
        self.recent: deque[WindowStats] = deque(maxlen=recent)
        self.heat = ExpertHeat(n_layers, n_experts)
        self.interval_windows = interval_windows
        self.prefill_s = 0.0
        self.version = 0            # bumps on every change; panels repaint only when it moved

    def add(self, stats: WindowStats) -> None:
        self.heat.add(stats)
        if stats.experts or stats.union_per_layer or stats.cold_experts:
            # the heatmap has taken what it needs; a long session keeps only the counters
            # (a 48-layer window's expert lists are ~15 KB)
            stats = replace(stats, experts=[], union_per_layer=[], cold_experts=[])
        self.windows.append(stats)
        self.recent.append(stats)
        self.version += 1

    def extend(self, stats: Iterable[WindowStats]) -> None:
        for s in stats:
            self.add(s)

    def clear(self) -> None:
        n_layers, n_experts = self.heat.n_layers, self.heat.n_experts
        self.windows.clear()
        self.recent.clear()
        self.heat = ExpertHeat(n_layers, n_experts)
        self.prefill_s = 0.0
        self.version += 1

    # --- acceptance panel -------------------------------------------------------------
    def summary(self) -> Summary:
        return summarize(self.windows, self.prefill_s)

    def recent_summary(self) -> Summary:
        return summarize(list(self.recent))

    def offered_kept(self, n: int) -> list[tuple[int, int]]:
        """(drafts offered, drafts kept) of the last `n` windows, oldest first."""
        return [(s.n_drafted, s.n_accept) for s in self.windows[-n:]] if n > 0 else []

    def acceptance_series(self) -> list[float]:
        """Per-window acceptance rate of the windows that offered drafts."""
        return [ratio(s.n_accept, s.n_drafted) for s in self.windows if s.n_drafted]

    # --- cold-miss panel --------------------------------------------------------------
    def io_totals(self, windows: Sequence[WindowStats] | None = None) -> dict[str, float]:
        ws = self.windows if windows is None else windows
        return {name: sum(getattr(s, name) for s in ws) for _, name in IO_COUNTERS}

    def io_interval(self) -> dict[str, float]:
        """Counter deltas over the last `interval_windows` windows."""
        return self.io_totals(self.windows[-self.interval_windows:])

    def hit_rate(self, windows: Sequence[WindowStats] | None = None) -> float:
        t = self.io_totals(windows)
        return ratio(t["hits"], t["hits"] + t["cold_misses"])

    def occupancy(self) -> tuple[int, int]:
        if not self.windows:
            return 0, 0
        last = self.windows[-1]
        return last.cache_slots_used, last.cache_slots_total
