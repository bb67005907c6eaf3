"""Helpers for the TUI tests: settle an app by waiting on its workers (never sleeping) and
compare SVG snapshots stored under tests/snapshots/."""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("STRATA_UPDATE_SNAPSHOTS", "") not in ("", "0")


async def settle(app, pilot, rounds: int = 6) -> None:
    """Wait until no worker runs and the message queues are drained. Workers may post messages
    whose handlers start more workers, so repeat until a round finds nothing running."""
    for _ in range(rounds):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if not any(w.is_running for w in app.workers):
            await pilot.pause()
            if not any(w.is_running for w in app.workers):
                return
    raise AssertionError("workers kept starting; the app did not settle")


async def until(pilot, predicate, what: str, rounds: int = 2000) -> None:
    """Let the event loop run until `predicate()` holds (bounded, no fixed sleeps)."""
    for _ in range(rounds):
        if predicate():
            return
        await pilot.pause()
    raise AssertionError(f"timed out waiting for {what}")


def normalise_svg(svg: str) -> str:
    """Remove what differs between identical screens: the content-hash ids Rich prefixes its
    classes and clip paths with."""
    svg = re.sub(r"terminal-\d+", "terminal", svg)
    return svg.replace("\r\n", "\n")


def freeze_cursors(app) -> None:
    from textual.widgets import Input

    for box in app.screen.query(Input):
        box.cursor_blink = False


def assert_snapshot(app, name: str) -> None:
    """Compare the current screen with tests/snapshots/<name>.svg (STRATA_UPDATE_SNAPSHOTS=1
    rewrites it). On a mismatch the new picture is written next to it as <name>.new.svg."""
    svg = normalise_svg(app.export_screenshot(title=name))
    path = SNAPSHOTS / f"{name}.svg"
    if UPDATE or not path.exists():
        if not UPDATE:
            raise AssertionError(f"no snapshot {path}; run with STRATA_UPDATE_SNAPSHOTS=1 to create it")
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    if svg != expected:
        new = path.with_suffix(".new.svg")
        new.write_text(svg, encoding="utf-8")
        raise AssertionError(f"screen differs from snapshot {path.name}; see {new} "
                             "(STRATA_UPDATE_SNAPSHOTS=1 accepts it)")


def asynctest(fn):
    """Run an async test function with asyncio (no pytest plugin needed)."""
    import asyncio
    import functools
    import inspect

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    wrapper.__signature__ = inspect.signature(fn)  # keep fixtures visible to pytest
    return wrapper


class CountingGenerator:
    """Wraps a generator and counts prefill-only streams (max_new=0), so a test can tell a
    checkpoint restore from a re-prefill."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.prefills = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stream(self, ids, settings, should_stop=None):
        if settings.max_new == 0:
            self.prefills += 1
        return self.inner.stream(ids, settings, should_stop)


class GatedGenerator:
    """A FakeGenerator whose generations pause after `after` windows until `gate` opens, so a
    test can act while a generation is certainly in flight (no sleeps, no timing)."""

    def __init__(self, inner, after: int) -> None:
        self.inner, self.after = inner, after
        self.reached, self.gate = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stream(self, ids, settings, should_stop=None):
        events = self.inner.stream(ids, settings, should_stop)

        def gated():
            for n, event in enumerate(events, 1):
                yield event
                if n == self.after and settings.max_new > 0:
                    self.reached.set()
                    self.gate.wait(30)
        return gated()
