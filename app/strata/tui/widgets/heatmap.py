"""Expert-union heatmap: MoE layers down, experts across, colour by recent use.

A line-API widget: each terminal row draws two layer bins with an upper half block (foreground
= upper bin, background = lower bin), so 48 layers fit in 24 rows. Experts (and layers, when
there are more than fit) are binned by mean heat. Cells whose bin holds an expert estimated as
a cold miss in the latest window are drawn in the cold colour. `numeric` switches to a text
table (per layer: union size and hottest experts) for terminals without colour.
"""
from __future__ import annotations

import os

import numpy as np
from rich.segment import Segment
from rich.style import Style
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from ..telemetry import TelemetryLog

# cold -> hot; dark blue through green and amber to white
GRADIENT = ((0.0, (22, 27, 34)), (0.2, (31, 78, 121)), (0.45, (46, 139, 87)),
            (0.7, (224, 176, 0)), (1.0, (255, 250, 235)))
COLD_RGB = (255, 48, 80)
LABEL_WIDTH = 4
# every segment gets a style, padding included: a segment without one breaks Textual's
# NO_COLOR (monochrome) filter
PLAIN = Style()
HALF = "\u2580"  # upper half block


def gradient(value: float) -> tuple[int, int, int]:
    v = min(1.0, max(0.0, value))
    for (p0, c0), (p1, c1) in zip(GRADIENT, GRADIENT[1:]):
        if v <= p1:
            t = (v - p0) / (p1 - p0) if p1 > p0 else 0.0
            return tuple(round(a + (b - a) * t) for a, b in zip(c0, c1))  # type: ignore[return-value]
    return GRADIENT[-1][1]


def bin_edges(n: int, bins: int, stretch: bool = False) -> list[tuple[int, int]]:
    """Split range(n) into at most `bins` contiguous ranges. With more bins than items, each item
    gets its own range, repeated the same whole number of times with `stretch` (so a small model
    still fills the width evenly)."""
    if n <= 0:
        return []
    bins = max(1, bins)
    if bins >= n:
        repeat = bins // n if stretch else 1
        return [(i, i + 1) for i in range(n) for _ in range(repeat)]
    return [(b * n // bins, (b + 1) * n // bins) for b in range(bins)]


def _block_sums(grid: np.ndarray, lbins: list[tuple[int, int]], ebins: list[tuple[int, int]]
                ) -> np.ndarray:
    """Sum of `grid` over every (layer range x expert range), from 2-D prefix sums."""
    prefix = np.zeros((grid.shape[0] + 1, grid.shape[1] + 1))
    prefix[1:, 1:] = grid.cumsum(axis=0).cumsum(axis=1)
    l0, l1 = (np.array(v)[:, None] for v in zip(*lbins))
    e0, e1 = (np.array(v)[None, :] for v in zip(*ebins))
    return prefix[l1, e1] - prefix[l0, e1] - prefix[l1, e0] + prefix[l0, e0]


def binned(heat: np.ndarray, cold: set[tuple[int, int]], rows: int, cols: int
           ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Mean heat per (layer bin, expert bin), whether a bin holds a cold cell, and the layer
    ranges of the row bins."""
    n_layers, n_experts = heat.shape
    lbins = bin_edges(n_layers, rows)
    ebins = bin_edges(n_experts, cols, stretch=True)
    if not lbins or not ebins:
        return np.zeros((0, 0)), np.zeros((0, 0), dtype=bool), lbins
    cold_mask = np.zeros(heat.shape)
    for layer, e in cold:
        if layer < n_layers and e < n_experts:
            cold_mask[layer, e] = 1.0
    sizes = (np.array([b - a for a, b in lbins])[:, None] *
             np.array([b - a for a, b in ebins])[None, :])
    values = _block_sums(heat, lbins, ebins) / sizes
    marks = _block_sums(cold_mask, lbins, ebins) > 0.5
    return values, marks, lbins


class ExpertHeatmap(Widget):
    """Reads a TelemetryLog; call `refresh_from_log()` (the app's panel timer does) to repaint."""

    DEFAULT_CSS = """
    ExpertHeatmap { height: auto; }
    """
    MAX_ROWS = 24
    numeric: reactive[bool] = reactive(False)

    def __init__(self, log: TelemetryLog, *, name: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.tlog = log
        self.numeric = "NO_COLOR" in os.environ
        self._grid: tuple[np.ndarray, np.ndarray, list[tuple[int, int]]] | None = None
        self._grid_key: tuple[int, int, int] | None = None

    def get_content_height(self, container, viewport, width: int) -> int:
        heat = self.tlog.heat
        if self.numeric:
            return max(1, heat.n_layers) + 1
        return max(1, min(self.MAX_ROWS, (heat.n_layers + 1) // 2)) + 1

    def refresh_from_log(self) -> None:
        self._grid_key = None
        self.refresh(layout=True)

    def watch_numeric(self) -> None:
        self.refresh(layout=True)

    # -- drawing -------------------------------------------------------------------------------
    def _body_rows(self) -> int:
        return max(1, self.size.height - 1)  # last line is the legend

    def _grid_for_size(self):
        heat = self.tlog.heat
        cols = max(1, self.size.width - LABEL_WIDTH)
        key = (self.tlog.version, cols, self._body_rows())
        if self._grid_key != key:
            self._grid = binned(heat.normalised(), heat.cold, 2 * self._body_rows(), cols)
            self._grid_key = key
        return self._grid

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        heat = self.tlog.heat
        if y == self.size.height - 1:
            return self._legend(width)
        if heat.n_layers == 0 or heat.n_experts == 0:
            text = "no expert telemetry yet" if y == 0 else ""
            return Strip([Segment(text.ljust(width)[:width], Style(dim=True))], width)
        if self.numeric:
            return self._numeric_line(y, width)
        values, marks, lbins = self._grid_for_size()
        top, bottom = 2 * y, 2 * y + 1
        if top >= len(lbins):
            return Strip.blank(width, PLAIN)
        label = f"{lbins[top][0]:>3} "[:LABEL_WIDTH]
        segments = [Segment(label, Style(dim=True))]
        for j in range(values.shape[1]):
            fg = COLD_RGB if marks[top, j] else gradient(values[top, j])
            if bottom < len(lbins):
                bg = COLD_RGB if marks[bottom, j] else gradient(values[bottom, j])
            else:
                bg = None
            style = Style(color=f"rgb{fg}", bgcolor=f"rgb{bg}" if bg else None)
            segments.append(Segment(HALF, style))
        return Strip(segments).adjust_cell_length(width, PLAIN)

    def _numeric_line(self, y: int, width: int) -> Strip:
        heat = self.tlog.heat
        if y >= heat.n_layers:
            return Strip.blank(width, PLAIN)
        union = heat.last_union[y] if y < len(heat.last_union) else 0
        cold = sum(1 for layer, _ in heat.cold if layer == y)
        hot = " ".join(f"{e}:{v:.1f}" for e, v in heat.hottest(y, 6))
        text = f"L{y:<3} union {union:>3} cold {cold:>2} | {hot}"
        return Strip([Segment(text[:width].ljust(width), PLAIN)], width)

    def _legend(self, width: int) -> Strip:
        heat = self.tlog.heat
        if self.numeric:
            text = f"{heat.n_layers} layers x {heat.n_experts} experts (numbers: expert:heat)"
            return Strip([Segment(text[:width].ljust(width), Style(dim=True))], width)
        segments = [Segment("old ", Style(dim=True))]
        for v in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0):
            segments.append(Segment("\u2588", Style(color=f"rgb{gradient(v)}")))
        segments.append(Segment(" recent  ", Style(dim=True)))
        segments.append(Segment("\u2588", Style(color=f"rgb{COLD_RGB}")))
        segments.append(Segment(f" cold  {heat.n_layers}x{heat.n_experts}", Style(dim=True)))
        return Strip(segments).adjust_cell_length(width, PLAIN)
