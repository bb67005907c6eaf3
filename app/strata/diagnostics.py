"""The one place strata writes to stderr: errors, notes and progress.

Data goes to stdout; everything said *about* a run goes through here, so its form is the same
everywhere ("strata: error: ...", "strata: note: ...", "strata: ...") and one line each.
Progress is drawn only when stderr is a terminal, so logs and pipes stay clean. The TUI owns the
terminal while it runs: nothing here is called then (engine logs go through `logging`).
"""
from __future__ import annotations

import os
import sys
import time
from typing import TextIO

__all__ = ["ProgressBar", "debug_enabled", "error", "note", "one_line", "progress", "say"]

PREFIX = "strata"


def debug_enabled() -> bool:
    """Tracebacks wanted: --debug on the command line (which sets STRATA_DEBUG) or STRATA_DEBUG=1."""
    return os.environ.get("STRATA_DEBUG", "") not in ("", "0")


def one_line(text: object) -> str:
    """Whitespace (newlines included) folded to single spaces: every message is one line."""
    return " ".join(str(text).split())


def _stream(file: TextIO | None) -> TextIO:
    return file if file is not None else sys.stderr


def error(message: object, file: TextIO | None = None) -> None:
    print(f"{PREFIX}: error: {one_line(message)}", file=_stream(file))


def note(message: object, file: TextIO | None = None) -> None:
    print(f"{PREFIX}: note: {one_line(message)}", file=_stream(file))


def say(message: object, file: TextIO | None = None) -> None:
    """A plain status line ("strata: wrote out.jsonl (3 turns)")."""
    print(f"{PREFIX}: {one_line(message)}", file=_stream(file))


def progress(message: object, *, inline: bool = False) -> None:
    """A progress line, only when stderr is a terminal; `inline` redraws the same line."""
    err = sys.stderr
    if err is None or not err.isatty():
        return
    if inline:
        print(f"\r{PREFIX}: {one_line(message)}", end="", file=err, flush=True)
    else:
        print(f"{PREFIX}: {one_line(message)}", file=err)


class ProgressBar:
    """A one-line byte progress bar on stderr, drawn only when stderr is a terminal:
    call it with (done, total) as often as you like (it redraws at most 10 times a second)."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.enabled = sys.stderr is not None and sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        frac = done / total if total else 1.0
        rate = done / max(now - self.t0, 1e-6) / (1 << 20)
        sys.stderr.write(f"\r{self.label} [{'#' * int(frac * 30):<30}] {frac * 100:5.1f}%  {rate:7.1f} MiB/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
