"""What every engine-driving screen shares: one exclusive thread worker that iterates a stream
of WindowEvents, sends their text to a sink through `call_from_thread`, and posts telemetry as
replaceable messages; plus the telemetry panels column."""
from __future__ import annotations

import itertools
import threading
import time
from typing import Callable, Iterator

from textual import work
from textual.worker import get_current_worker
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import Screen
from rich.text import Text
from textual.widgets import Input, Static

from ...errors import StrataError
from ...protocol import WindowEvent, WindowStats
from ..messages import GenerationFinished, StatusNote, TelemetryUpdate
from ..widgets.heatmap import ExpertHeatmap
from ..widgets.panels import AcceptancePanel, ColdMissPanel
from ..widgets.transcript import Transcript

EventSource = Callable[[Callable[[], bool]], Iterator[WindowEvent]]
_run_ids = itertools.count(1)
TEXT_BATCH_S = 0.03


def describe_error(exc: BaseException) -> str:
    """One line for the status bar: a StrataError says what is wrong; anything else is named."""
    if isinstance(exc, StrataError):
        return str(exc)
    return f"{exc.__class__.__name__}: {exc}"


class PanelsColumn(VerticalScroll):
    """Acceptance, expert heatmap and cold-miss counters over the app's TelemetryLog."""

    def __init__(self, log, *, id: str = "panels") -> None:
        super().__init__(id=id)
        self.tlog = log

    def compose(self) -> ComposeResult:
        acceptance = AcceptancePanel(self.tlog, id="acceptance", classes="panel")
        acceptance.border_title = "drafting"
        yield acceptance
        heatmap = ExpertHeatmap(self.tlog, id="heatmap", classes="panel")
        heatmap.border_title = "experts (layers x experts)"
        yield heatmap
        counters = ColdMissPanel(self.tlog, id="counters", classes="panel")
        counters.border_title = "expert cache"
        yield counters

    def refresh_from_log(self) -> None:
        for panel in self.query(".panel"):
            panel.refresh_from_log()  # type: ignore[attr-defined]


class EngineScreen(Screen):
    """A screen that runs generations. Subclasses call `start_run(source, sink)` and handle
    `GenerationFinished` (their `on_generation_finished`)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.run_id = 0
        self._stop = threading.Event()
        self._seen = 0

    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(Text(text))  # plain text: paths and errors may contain "[...]"
        status.set_class(error, "-error")

    def report_error(self, error: BaseException) -> None:
        """A failed operation: its one line in the status bar and in the app's notes."""
        text = describe_error(error)
        self._status(f"error: {text}", error=True)
        self.post_message(StatusNote(text, error=True))

    def transcript_run_ended(self, message: GenerationFinished) -> bool:
        """The start of `on_generation_finished` for a screen that streams into a Transcript:
        False for a message of an older run, or (after flushing the transcript and reporting
        the error) for a run that failed; True when the current run ended without an error."""
        if message.run_id != self.run_id:
            return False
        self.query_one(Transcript).flush()
        if message.error is not None:
            self.report_error(message.error)
            return False
        return True

    def focus_input(self) -> None:
        """Give the focus back to where the user types (after the panels were zoomed)."""
        for box in self.query(Input):
            if box.display and box.id in ("prompt", "instruction"):
                box.focus()
                return

    @property
    def busy(self) -> bool:
        return any(w.group in ("engine", "open") and w.is_running for w in self.workers)

    def start_run(self, source: EventSource, sink: Callable[[str], None]) -> int:
        self.run_id = next(_run_ids)
        self._seen = 0
        self._stop.clear()
        self._generate(self.run_id, source, sink)
        return self.run_id

    def action_stop(self) -> None:
        self._stop.set()

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine")
    def _generate(self, run_id: int, source: EventSource, sink: Callable[[str], None]) -> None:
        windows: list[WindowStats] = []
        parts: list[str] = []
        stop_reason = None
        worker = get_current_worker()

        def should_stop() -> bool:
            # Esc, or the app closing (Textual cancels its workers; a thread must notice itself)
            return self._stop.is_set() or worker.is_cancelled

        # Text goes to the UI through call_from_thread, which waits for the UI thread; with a
        # fast engine that wait would dominate, so windows closer together than TEXT_BATCH_S
        # share one call (a slow engine still shows every window as it lands).
        pending: list[str] = []
        last_flush = time.monotonic()

        def flush() -> None:
            nonlocal last_flush
            if pending:
                text = "".join(pending)
                pending.clear()
                self.app.call_from_thread(sink, text)
            last_flush = time.monotonic()

        try:
            for event in source(should_stop):
                if event.text:
                    parts.append(event.text)
                    pending.append(event.text)
                # a finished event ends a turn (a replay runs several): its text must land
                # before the next turn's blocks appear
                if event.finished or time.monotonic() - last_flush >= TEXT_BATCH_S:
                    flush()
                # a closing event without tokens carries no window; an event with T == 0 but
                # tokens (the token the prefill produced) still counts its tokens and IO
                if event.stats.T or event.tokens:
                    windows.append(event.stats)
                    self.post_message(TelemetryUpdate(run_id, windows, len(windows)))
                if event.finished:
                    stop_reason = event.stop_reason
            flush()
        except Exception as exc:  # noqa: BLE001 - reported on screen, never on fd 2
            try:
                flush()
            except Exception:  # noqa: BLE001 - the app is closing; the error below says why
                pass
            self.post_message(GenerationFinished(run_id, "".join(parts), stop_reason, exc))
            return
        self.post_message(GenerationFinished(run_id, "".join(parts), stop_reason))

    def on_telemetry_update(self, message: TelemetryUpdate) -> None:
        if message.run_id != self.run_id:
            return
        self.app.telemetry.extend(message.windows[self._seen:message.count])  # type: ignore[attr-defined]
        self._seen = message.count
