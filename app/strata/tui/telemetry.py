"""What the live panels show, computed from `WindowStats` only (no textual here).

`TelemetryLog` is the panels' model: the app appends every window it hears about (live or
replayed, through the same message) and the panels read aggregates from it when their
repaint timer fires. Keeping the arithmetic here keeps the widgets small and lets the tests
check the numbers without a terminal.
"""
from __future__ import annotations

import math
from collections import OrderedDict, deque
from dataclasses import replace
from typing import Iterable, Sequence

import numpy as np

from ..generate import Summary, summarize
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


def ratio(num: float, den: float) -> float:
    """num/den, 0.0 when there is nothing to divide by."""
    return num / den if den else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[rank - 1])


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


def summarize_windows(stats: Sequence[WindowStats], prefill_s: float = 0.0) -> Summary:
    """The decode loop's own aggregates (`strata.generate.summarize`), so the panels show the
    same numbers as `strata run --json`."""
    return summarize(stats, prefill_s)


class ExpertHeat:
    """Layers x experts, each cell an exponentially decayed count of recent selections, plus an
    estimate of which selected experts were cold misses.

    The engine reports how many experts missed the resident cache, not which. The estimate
    replays the selections through an LRU of the cache's size (`cache_slots_total`): an expert
    that such a cache would not hold is marked cold. It is only made for windows that reported
    misses, and matches the engine exactly where the cache is LRU without read-ahead."""

    def __init__(self, n_layers: int = 0, n_experts: int = 0, decay: float = 0.85) -> None:
        self.decay = decay
        self.heat = np.zeros((n_layers, n_experts), dtype=np.float64)
        self.cold: set[tuple[int, int]] = set()
        self.last_union: list[int] = []
        self._lru: OrderedDict[tuple[int, int], None] = OrderedDict()

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
        cold: set[tuple[int, int]] = set()
        slots = stats.cache_slots_total
        for layer, ids in enumerate(experts):
            if ids:
                self.heat[layer, np.asarray(ids, dtype=np.int64)] += 1.0
            if slots <= 0:
                continue
            for e in ids:
                key = (layer, int(e))
                if key in self._lru:
                    self._lru.move_to_end(key)
                else:
                    if stats.cold_misses:
                        cold.add(key)
                    self._lru[key] = None
        while len(self._lru) > max(0, slots):
            self._lru.popitem(last=False)
        self.cold = cold
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
        if stats.experts or stats.union_per_layer:
            # the heatmap has taken what it needs; a long session keeps only the counters
            # (a 48-layer window's expert lists are ~15 KB)
            stats = replace(stats, experts=[], union_per_layer=[])
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
        return summarize_windows(self.windows, self.prefill_s)

    def recent_summary(self) -> Summary:
        return summarize_windows(list(self.recent))

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
