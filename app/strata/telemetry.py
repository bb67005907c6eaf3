"""Telemetry core: per-window records, their summaries, and the loop that collects them.

Every front that streams a generation (chat, edit, replay, bench, `strata run`, the TUI) reads
the same `WindowEvent`s through `Collector`, and aggregates them with `summarize` (distributions:
latency percentiles, T histogram) or `Totals` (additive counts that merge across turns). The
field names follow llama.cpp's counters where one exists (`n_drafted`, `n_accept`); every ratio
is guarded against zero.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

from .protocol import WindowEvent, WindowStats

__all__ = ["Collector", "Summary", "Totals", "human_bytes", "percentile", "plural", "ratio", "summarize"]


def ratio(num: float, den: float) -> float:
    """num/den, 0.0 when there is nothing to divide by."""
    return float(num) / float(den) if den else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Linearly interpolated percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (k - lo))


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB' (binary units; whole bytes below 1 KiB)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def plural(n: int, word: str, many: str | None = None) -> str:
    """'1 window', '3 windows' (`many` for irregular plurals)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


# -- summaries -----------------------------------------------------------------------------
@dataclass
class Summary:
    """Aggregates of a generation's windows (what `strata run --json` reports as `stats`)."""

    windows: int = 0
    tokens: int = 0
    n_drafted: int = 0
    n_accept: int = 0
    acceptance: float = 0.0          # n_accept / n_drafted
    mean_keep: float = 0.0           # committed rows per window
    mean_T: float = 0.0
    tokens_per_window: float = 0.0
    decode_s: float = 0.0
    prefill_s: float = 0.0
    tokens_per_s: float = 0.0        # emitted tokens / decode time (prefill excluded)
    accepted_per_s: float = 0.0      # accepted draft tokens / decode time
    window_p50_ms: float = 0.0
    window_p95_ms: float = 0.0
    t_hist: dict[int, int] = field(default_factory=dict)
    # the expert cache (streamed packs; zero when every expert is resident)
    hits: int = 0
    cold_misses: int = 0
    bytes_read: int = 0
    hit_rate: float = 0.0            # hits / (hits + cold_misses)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["t_hist"] = {str(k): v for k, v in self.t_hist.items()}
        return d


def summarize(stats_list: Sequence[WindowStats], prefill_s: float = 0.0) -> Summary:
    """Aggregates over windows; entries with T == 0 (no decode window ran) add only their tokens."""
    windows = [s for s in stats_list if s.T > 0]
    tokens = sum(s.emitted for s in stats_list)
    drafted = sum(s.n_drafted for s in windows)
    accepted = sum(s.n_accept for s in windows)
    decode_s = sum(s.window_us for s in windows) / 1e6
    lat = [s.window_us / 1e3 for s in windows]
    hits = sum(s.hits for s in stats_list)
    misses = sum(s.cold_misses for s in stats_list)
    return Summary(
        windows=len(windows), tokens=tokens, n_drafted=drafted, n_accept=accepted,
        acceptance=ratio(accepted, drafted),
        mean_keep=ratio(sum(s.keep for s in windows), len(windows)),
        mean_T=ratio(sum(s.T for s in windows), len(windows)),
        tokens_per_window=ratio(tokens, len(windows)),
        decode_s=decode_s, prefill_s=float(prefill_s),
        tokens_per_s=ratio(tokens, decode_s), accepted_per_s=ratio(accepted, decode_s),
        window_p50_ms=percentile(lat, 50), window_p95_ms=percentile(lat, 95),
        t_hist=dict(sorted(Counter(s.T for s in windows).items())),
        hits=hits, cold_misses=misses, bytes_read=sum(s.bytes_read for s in stats_list),
        hit_rate=ratio(hits, hits + misses),
    )


@dataclass
class Totals:
    """Additive counts over windows: they add up across turns (`+`), unlike percentiles."""

    windows: int = 0
    emitted: int = 0
    drafted: int = 0
    accepted: int = 0
    window_us: float = 0.0
    cold_misses: int = 0
    bytes_read: int = 0

    @classmethod
    def of(cls, stats: Iterable[WindowStats]) -> "Totals":
        out = cls()
        for s in stats:
            out.add(s)
        return out

    def add(self, s: WindowStats) -> None:
        self.windows += 1
        self.emitted += s.emitted
        self.drafted += s.n_drafted
        self.accepted += s.n_accept
        self.window_us += s.window_us
        self.cold_misses += s.cold_misses
        self.bytes_read += s.bytes_read

    def __add__(self, other: "Totals") -> "Totals":
        return Totals(*(getattr(self, f) + getattr(other, f) for f in self.__dataclass_fields__))

    @property
    def tokens_per_window(self) -> float:
        return ratio(self.emitted, self.windows)

    @property
    def acceptance(self) -> float:
        return ratio(self.accepted, self.drafted)

    @property
    def tokens_per_s(self) -> float:
        return ratio(self.emitted, self.window_us / 1e6)

    def to_dict(self) -> dict[str, Any]:
        return {"windows": self.windows, "emitted": self.emitted, "n_drafted": self.drafted,
                "n_accept": self.accepted, "acceptance": round(self.acceptance, 4),
                "tokens_per_window": round(self.tokens_per_window, 4),
                "tokens_per_s": round(self.tokens_per_s, 2), "cold_misses": self.cold_misses,
                "bytes_read": self.bytes_read}


# -- the collecting loop -------------------------------------------------------------------
class Collector:
    """Follows one generation's stream and keeps what every front needs afterwards: the text,
    the windows that emitted tokens, the stop reason and the last token.

        rec = Collector()
        for ev in rec.follow(generator.stream(ids, settings)):
            show(ev)
        rec.text, rec.stop_reason, rec.windows, rec.summary()

    `follow` closes the stream however the loop ends, so a consumer that stops early never leaves
    a window open; `stop_reason` stays "stopped" unless the stream says how it finished.
    """

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.windows: list[WindowStats] = []
        self.tokens: list[int] = []
        self.stop_reason = "stopped"
        self.finished = False

    def add(self, ev: WindowEvent) -> None:
        self.pieces.append(ev.text)
        if ev.tokens:
            self.windows.append(ev.stats)
            self.tokens.extend(ev.tokens)
        if ev.finished:
            self.finished = True
            self.stop_reason = ev.stop_reason or "eos"

    def follow(self, stream: Iterator[WindowEvent]) -> Iterator[WindowEvent]:
        try:
            for ev in stream:
                self.add(ev)
                yield ev
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()

    def run(self, stream: Iterator[WindowEvent]) -> "Collector":
        """Drain the stream (no consumer in between)."""
        for _ in self.follow(stream):
            pass
        return self

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def last_token(self) -> int | None:
        return self.tokens[-1] if self.tokens else None

    def summary(self, prefill_s: float = 0.0) -> Summary:
        return summarize(self.windows, prefill_s)

    def totals(self) -> Totals:
        return Totals.of(self.windows)
