"""Replay: re-runs a recording through the live cores (`strata.replay.Replay`) or plays its
stored telemetry (`strata.replay.recorded_events`), feeding the transcript and the panels
through the same worker and messages as a live chat, then shows the comparison report."""
from __future__ import annotations

from typing import Any, Callable, Iterator

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Header, Static

from ...protocol import WindowEvent
from ...replay import Replay, recorded_events
from ...session_format import Recording
from ..keymap import REPLAY_KEYS, bindings
from ..messages import GenerationFinished
from ..widgets.transcript import MessageBlock, Transcript
from .base import EngineScreen, PanelsColumn, describe_error


class ReplayScreen(EngineScreen):
    CSS_PATH = "chat.tcss"
    BINDINGS = bindings(REPLAY_KEYS)

    def __init__(self) -> None:
        super().__init__()
        self.current_turn = -1
        self.report_lines: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield Transcript(id="transcript")
                yield Static(id="report")
            yield PanelsColumn(self.app.telemetry)  # type: ignore[attr-defined]
        yield Static("replaying\u2026", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.action_restart()

    def _source(self) -> tuple[Callable[[Callable[[], bool]], Iterator[tuple[int, WindowEvent]]], Recording]:
        """What to iterate: a Replay re-runs the model; a bare Recording plays its telemetry."""
        replay: Any = self.app.replay  # type: ignore[attr-defined]
        if isinstance(replay, Replay):
            if replay.report.turns:  # already ran: start a fresh one with the same inputs
                replay = Replay(replay.generator, replay.recording, replay.overrides)
                self.app.replay = replay  # type: ignore[attr-defined]
            return replay.events, replay.recording
        if isinstance(replay, Recording):
            gen = self.app.generator  # type: ignore[attr-defined]
            return (lambda stop: recorded_events(replay, gen)), replay
        raise TypeError("StrataApp(mode='replay') needs replay=a strata.replay.Replay or a Recording")

    def action_restart(self) -> None:
        if self.busy:
            return
        try:
            events, recording = self._source()
        except Exception as exc:  # noqa: BLE001
            self._status(f"error: {describe_error(exc)}", error=True)
            return
        self.query_one(Transcript).clear_messages()
        self.query_one("#report", Static).update("")
        self.app.telemetry.clear()  # type: ignore[attr-defined]
        self.current_turn = -1
        turns = recording.turns

        def begin_turn(index: int) -> None:
            self.current_turn = index
            transcript = self.query_one(Transcript)
            turn = turns[index]
            label = turn.instruction or turn.input
            transcript.add_message("user", label if turn.file_path is None else f"[{turn.file_path}] {label}")
            transcript.add_message("assistant")

        def flatten(stop: Callable[[], bool]) -> Iterator[WindowEvent]:
            # runs in the worker: the UI learns of a new turn through call_from_thread only
            current = -1
            for index, event in events(stop):
                if index != current:
                    current = index
                    self.app.call_from_thread(begin_turn, index)
                yield event

        what = "re-running" if isinstance(self.app.replay, Replay) else "playing the telemetry of"  # type: ignore[attr-defined]
        self._status(f"{what} {recording.source or 'the recording'} ({len(turns)} turns, "
                     f"{recording.kind}) \u00b7 Esc stops")
        self.start_run(flatten, self.query_one(Transcript).append_text)

    def _mark_turns(self, replay: Replay) -> None:
        """Title each replayed reply with its comparison against the recording."""
        replies = [b for b in self.query(MessageBlock) if b.role == "assistant"]
        for block, result in zip(replies, replay.report.turns):
            if result.identical:
                block.border_title = "assistant \u00b7 identical"
            else:
                block.border_title = f"assistant \u00b7 DIFFERENT at char {result.first_difference}"
                block.add_class("-different")
            r = result.replayed
            block.border_subtitle = (f"{r.emitted} tokens \u00b7 {r.tokens_per_window:.2f}/window "
                                     f"\u00b7 drafts kept {r.acceptance:.0%}")

    def on_generation_finished(self, message: GenerationFinished) -> None:
        if not self.transcript_run_ended(message):
            return
        replay = self.app.replay  # type: ignore[attr-defined]
        if isinstance(replay, Replay):
            self._mark_turns(replay)
            self.report_lines = replay.report.lines()
            ok = replay.report.identical
            report = Text("\n".join(self.report_lines), style="green" if ok else "yellow")
        else:
            s = self.app.telemetry.summary()  # type: ignore[attr-defined]
            self.report_lines = [f"recorded telemetry: {s.windows} windows, {s.tokens} tokens, "
                                 f"acceptance {s.acceptance:.0%}"]
            report = Text(self.report_lines[0])
        self.query_one("#report", Static).update(report)
        self._status("replay finished \u00b7 ctrl+r replays again \u00b7 ctrl+q quits")
