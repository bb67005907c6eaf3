"""The acceptance panel and the cold-miss counter panel (text panels over a TelemetryLog)."""
from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from ...telemetry import human_bytes, ratio
from ..telemetry import IO_COUNTERS, TelemetryLog, bucket_means

BARS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"


def bar(value: float, top: float) -> str:
    """One eighth-block bar of `value` on a 0..top scale (a space for nothing)."""
    if top <= 0 or value <= 0:
        return " "
    return BARS[min(len(BARS) - 1, int(round(value / top * (len(BARS) - 1))))]


def sparkline(values: list[float], width: int, top: float = 1.0) -> str:
    return "".join(bar(v, top) if v > 0 else BARS[0] for v in bucket_means(values, width))


def t_hist_rows(t_hist: dict[int, int], max_rows: int = 6) -> list[tuple[str, int]]:
    """Histogram rows of window sizes; with more distinct T than `max_rows`, T is grouped in
    power-of-two ranges (1, 2-3, 4-7, 8-15, 16-31, ...) so the panel keeps its height."""
    if len(t_hist) <= max_rows:
        return [(str(T), n) for T, n in sorted(t_hist.items())]
    groups: dict[int, int] = {}
    for T, n in t_hist.items():
        lo = 1 << (max(1, T).bit_length() - 1)
        groups[lo] = groups.get(lo, 0) + n
    return [(str(lo) if lo == 1 else f"{lo}-{2 * lo - 1}", n) for lo, n in sorted(groups.items())]


class LogPanel(Static):
    """A Static that renders from a TelemetryLog when `refresh_from_log()` is called."""

    def __init__(self, log: TelemetryLog, *, id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.tlog = log

    def on_mount(self) -> None:
        self.refresh_from_log()

    def on_resize(self) -> None:
        self.refresh_from_log()

    def refresh_from_log(self) -> None:
        self.update(self.render_log(max(10, self.content_size.width or 40)))

    def render_log(self, width: int):  # pragma: no cover - overridden
        raise NotImplementedError


class AcceptancePanel(LogPanel):
    """Drafts offered vs kept for the last windows, acceptance sparkline (bucket means), T
    histogram, accepted tokens/s and window latency p50/p95."""

    def render_log(self, width: int):
        log = self.tlog
        s = log.summary()
        strip_w = max(4, width - 9)
        pairs = log.offered_kept(strip_w)
        top = max((o for o, _ in pairs), default=0)
        offered = Text("offered ", style="dim")
        kept = Text("kept    ", style="dim")
        for o, k in pairs:
            offered.append(bar(o, top), style="#6c7a89")
            kept.append(bar(k, top), style="green" if o and k == o else "yellow" if k else "red")
        rate = Text("accept  ", style="dim")
        series = log.acceptance_series()
        rate.append(sparkline(series, strip_w) if series else "no drafts offered", style="cyan")
        nums = Text.assemble(
            ("acceptance ", "dim"), (f"{s.acceptance:6.1%}", "bold"),
            ("  keep/win ", "dim"), (f"{s.mean_keep:.2f}", "bold"),
            ("\ntokens/s   ", "dim"), (f"{s.tokens_per_s:6.1f}", "bold"),
            ("  kept/s   ", "dim"), (f"{s.accepted_per_s:.1f}", "bold"),
            ("\nlatency    ", "dim"), ("p50 ", "dim"), (f"{s.window_p50_ms:.1f} ms", "bold"),
            ("  p95 ", "dim"), (f"{s.window_p95_ms:.1f} ms", "bold"),
            ("\nwindows    ", "dim"), (f"{s.windows:6d}", "bold"),
            ("  drafted  ", "dim"), (f"{s.n_drafted}", "bold"),
            ("  kept ", "dim"), (f"{s.n_accept}", "bold"),
        )
        hist = Text("T hist", style="dim")
        rows = t_hist_rows(s.t_hist)
        peak = max((count for _, count in rows), default=0)
        hist_w = max(4, width - 20)
        for label, count in rows:
            n = round(count / peak * hist_w) if peak else 0
            hist.append(f"\n T={label:<5} ", style="dim")
            hist.append("\u2588" * n, style="magenta")
            hist.append(f" {count}")
        return Group(offered, kept, rate, nums, hist)


class ColdMissPanel(LogPanel):
    """Expert cache counters: totals, deltas over the last interval of windows, hit rate,
    bytes read, prefetch used/wasted, late waits and occupancy."""

    def render_log(self, width: int):
        log = self.tlog
        total = log.io_totals()
        recent = log.io_interval()
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim")
        table.add_column(justify="right", style="bold")
        table.add_column(justify="right", style="cyan")
        table.add_row("counter", "total", f"\u0394{log.interval_windows}w")
        for label, name in IO_COUNTERS:
            if name == "bytes_read":
                table.add_row(label, human_bytes(total[name]), human_bytes(recent[name]))
            elif name == "late_wait_us":
                table.add_row(label, f"{total[name] / 1e3:.1f}", f"{recent[name] / 1e3:.1f}")
            else:
                table.add_row(label, f"{total[name]:.0f}", f"+{recent[name]:.0f}")
        table.add_row("hit rate", f"{log.hit_rate():.1%}",
                      f"{log.hit_rate(log.windows[-log.interval_windows:]):.1%}")
        used, slots = log.occupancy()
        table.add_row("occupancy", f"{used}/{slots}", f"{ratio(used, slots):.0%}")
        if log.windows and slots == 0 and not any(total.values()):
            return Group(table, Text("all experts resident: no streaming store "
                                     "(convert to a pack, run with --expert-cache)", style="dim"))
        if log.windows and log.windows[-1].approximate:
            return Group(table, Text("approximate routing: output differs from the model",
                                     style="bold red"))
        return table
