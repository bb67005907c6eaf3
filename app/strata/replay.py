"""Replay: re-run a recorded session's inputs through a generator, with the recorded settings
or overrides (e.g. drafting off), and compare the outputs with the recording.

Replay goes through the same cores as live use (ChatSession, EditSession on a scratch copy of
each recorded file, never the user's file), so it yields the same `WindowEvent`s a live run
does and the TUI panels cannot tell the difference. `recorded_events` instead feeds the
stored telemetry of a recording without running a model.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .chat import ChatSession
from .edit import EditSession
from .errors import EditError, SessionError
from .protocol import GenerationSettings, TextGenerator, WindowEvent, WindowStats
from .session_format import Recording, read_session_file, recording_from_store
from .store import SessionStore
from .telemetry import Collector, Totals, plural

OVERRIDABLE = ("draft", "drafter", "max_draft", "temperature", "seed", "max_new", "top_k", "top_p",
               "min_match")


def load_recording(ref: str | os.PathLike, store: SessionStore | None = None) -> Recording:
    """A session file (JSONL) when `ref` names one, else a session id (or prefix) in `store`."""
    if names_a_file(ref):
        return read_session_file(Path(ref))
    if store is None:
        raise SessionError(f"{str(ref)[:80]}: no such session file")
    return recording_from_store(store, str(ref))


def names_a_file(ref: str | os.PathLike) -> bool:
    """Whether `strata replay REF` means a session file (else a stored session id)."""
    p = Path(ref)
    if p.suffix in (".jsonl", ".json"):
        return True
    try:
        return p.exists()
    except (OSError, ValueError):  # a name too long for a path, a NUL byte: not a file
        return False


def turn_settings(rec: Recording, index: int, overrides: dict[str, Any] | None = None) -> GenerationSettings:
    """The settings a recorded turn ran with, then the overrides."""
    base = dict(rec.settings)
    turn = rec.turns[index]
    if turn.settings:
        base.update(turn.settings)
    for key, value in (overrides or {}).items():
        if key not in OVERRIDABLE:
            raise SessionError(f"setting {key!r} cannot be overridden in a replay")
        base[key] = value
    return GenerationSettings.from_dict(base)


def first_difference(a: str, b: str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class TurnResult:
    index: int
    input: str
    recorded: str
    output: str
    stop_reason: str
    settings: dict[str, Any]
    replayed: Totals = field(default_factory=Totals)
    recorded_stats: Totals = field(default_factory=Totals)
    replayed_windows: list[WindowStats] = field(default_factory=list)
    recorded_stop: str | None = None   # "stopped": the user stopped it; only its prefix is known
    limit: int | None = None           # tokens a stopped turn was replayed for

    @property
    def stopped_turn(self) -> bool:
        return self.recorded_stop == "stopped"

    @property
    def identical(self) -> bool:
        # a stopped turn is replayed for as many tokens as it had; when that count is only an
        # estimate (no telemetry), a longer replay that starts with the recording is the same
        return self.output == self.recorded or (self.stopped_turn and self.output.startswith(self.recorded))

    @property
    def first_difference(self) -> int | None:
        return first_difference(self.recorded, self.output)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "identical": self.identical,
                "first_difference": None if self.identical else self.first_difference,
                "stop_reason": self.stop_reason, "recorded_stop_reason": self.recorded_stop,
                "output_chars": len(self.output), "recorded_chars": len(self.recorded),
                "replayed": self.replayed.to_dict(), "recorded": self.recorded_stats.to_dict()}


@dataclass
class ReplayReport:
    source: str
    kind: str
    recorded_model: dict[str, Any]
    model: dict[str, Any]
    overrides: dict[str, Any]
    turns: list[TurnResult] = field(default_factory=list)
    stopped: bool = False

    recorded_windows: list[WindowStats] = field(default_factory=list)

    @property
    def same_model(self) -> bool:
        return str(self.recorded_model.get("id", "")) == str(self.model.get("id", ""))

    @property
    def recorded_approximate(self) -> bool:
        """The recording ran with a routing mode that changes the model's output."""
        return bool(self.recorded_model.get("approximate")) or any(w.approximate for w in self.recorded_windows)

    @property
    def replay_approximate(self) -> bool:
        return bool(self.model.get("approximate")) or any(
            w.approximate for t in self.turns for w in t.replayed_windows)

    def reasons(self) -> list[str]:
        """Why outputs may differ from the recording, whether or not they do."""
        out = []
        if not self.same_model:
            out.append(f"recorded with {self.recorded_model.get('name', '?')}, replayed with "
                       f"{self.model.get('name', '?')}: outputs are not expected to match")
        rec_r, rep_r = self.recorded_model.get("routing"), self.model.get("routing")
        if self.recorded_approximate:
            out.append(f"recorded with approximate cache-aware routing ({_spec(rec_r)}): the recording is "
                       "not the exact model's output")
        if self.replay_approximate:
            out.append(f"replayed with approximate cache-aware routing ({_spec(rep_r)}): the replay is "
                       "not the exact model's output")
        elif rec_r != rep_r and (rec_r or rep_r):
            out.append(f"routing differs: recorded {_spec(rec_r)}, replayed {_spec(rep_r)}")
        return out

    @property
    def identical(self) -> bool:
        return bool(self.turns) and not self.stopped and all(t.identical for t in self.turns)

    def total(self, which: str) -> Totals:
        return sum((getattr(t, which) for t in self.turns), Totals())

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "kind": self.kind, "recorded_model": self.recorded_model,
                "model": self.model, "same_model": self.same_model, "overrides": self.overrides,
                "recorded_approximate": self.recorded_approximate,
                "replay_approximate": self.replay_approximate, "reasons": self.reasons(),
                "identical": self.identical, "stopped": self.stopped,
                "turns": [t.to_dict() for t in self.turns],
                "replayed": self.total("replayed").to_dict(), "recorded": self.total("recorded_stats").to_dict()}

    def lines(self) -> list[str]:
        """A short human report."""
        out = [f"replay of {self.source} ({self.kind}, {plural(len(self.turns), 'turn')})"]
        out += [f"note: {r}" for r in self.reasons()]
        if self.overrides:
            out.append("overrides: " + ", ".join(f"{k}={v}" for k, v in self.overrides.items()))
        for t in self.turns:
            mark = "identical" if t.identical else f"DIFFERENT at char {t.first_difference}"
            if t.stopped_turn:
                mark += f" (stopped when recorded: compared its first {t.limit} tokens)"
            r = t.replayed
            out.append(f"turn {t.index}: {mark}; {r.emitted} tokens in {r.windows} windows "
                       f"({r.tokens_per_window:.2f}/window, acceptance {r.acceptance:.0%})")
        rt, rc = self.total("replayed"), self.total("recorded_stats")
        out.append(f"replayed: {rt.emitted} tokens, {rt.windows} windows, {rt.tokens_per_window:.2f} tokens/window"
                   + (f"; recorded: {rc.windows} windows, {rc.tokens_per_window:.2f} tokens/window" if rc.windows else ""))
        if self.stopped:
            out.append("stopped before the end")
        else:
            out.append("outputs identical to the recording" if self.identical
                       else "outputs DIFFER from the recording")
        return out


class Replay:
    """Iterate `events()` (in a worker thread for the TUI); `report` fills in as turns end."""

    def __init__(self, generator: TextGenerator, recording: Recording,
                 overrides: dict[str, Any] | None = None) -> None:
        self.generator = generator
        self.recording = recording
        self.overrides = dict(overrides or {})
        for i in range(len(recording.turns)):
            turn_settings(recording, i, self.overrides)  # refuse bad overrides before running
        from .store import model_identity

        self.report = ReplayReport(recording.source, recording.kind, recording.model,
                                   model_identity(generator), self.overrides,
                                   recorded_windows=[w for ws in recording.windows.values() for w in ws])

    def events(self, should_stop: Callable[[], bool] | None = None) -> Iterator[tuple[int, WindowEvent]]:
        if self.recording.kind == "chat":
            yield from self._chat(should_stop)
        else:
            yield from self._edit(should_stop)

    def run(self, on_event: Callable[[int, WindowEvent], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> ReplayReport:
        for index, ev in self.events(should_stop):
            if on_event is not None:
                on_event(index, ev)
        return self.report

    def stopped_limit(self, index: int) -> int | None:
        """How many tokens a turn the user stopped had (None for a turn that ran to its end):
        the replay generates exactly that many, so the engine ends where the recording did."""
        turn = self.recording.turns[index]
        if turn.stop_reason != "stopped":
            return None
        windows = self.recording.windows.get(index)
        if windows:
            return sum(w.emitted for w in windows)
        return len(self.generator.encode(turn.output))

    def _result(self, index: int, output: str, stop_reason: str, windows: list[WindowStats],
                settings: GenerationSettings) -> None:
        turn = self.recording.turns[index]
        res = TurnResult(index, turn.input, turn.output, output, stop_reason, settings.to_dict(),
                         Totals.of(windows), Totals.of(self.recording.windows.get(index, [])),
                         replayed_windows=list(windows), recorded_stop=turn.stop_reason,
                         limit=self.stopped_limit(index))
        self.report.turns.append(res)
        if stop_reason == "stopped":
            self.report.stopped = True

    def _stream(self, index: int, stream: Iterator[WindowEvent], settings: GenerationSettings,
                should_stop: Callable[[], bool] | None) -> Iterator[tuple[int, WindowEvent]]:
        rec = Collector()
        for ev in rec.follow(stream):
            yield index, ev
        self._result(index, rec.text, rec.stop_reason, rec.windows, settings)

    def _chat(self, should_stop: Callable[[], bool] | None) -> Iterator[tuple[int, WindowEvent]]:
        chat = ChatSession(self.generator, self.recording.generation_settings)
        for i, turn in enumerate(self.recording.turns):
            if should_stop is not None and should_stop():
                self.report.stopped = True
                return
            settings = turn_settings(self.recording, i, self.overrides)
            limit = self.stopped_limit(i)
            run = settings if limit is None else GenerationSettings.from_dict({**settings.to_dict(), "max_new": limit})
            yield from self._stream(i, chat.send(turn.input, run, should_stop), settings, should_stop)
            if self.report.stopped:
                return

    def _edit(self, should_stop: Callable[[], bool] | None) -> Iterator[tuple[int, WindowEvent]]:
        # each recorded file version goes into a scratch folder under its own name (the prompt
        # names the file), so the edit core runs exactly as live and never touches user files
        with tempfile.TemporaryDirectory(prefix="strata-replay-") as scratch:
            session: EditSession | None = None
            current: tuple[str, str] | None = None
            for i, turn in enumerate(self.recording.turns):
                if should_stop is not None and should_stop():
                    self.report.stopped = True
                    return
                settings = turn_settings(self.recording, i, self.overrides)
                name = Path(turn.file_path or "file").name or "file"
                if current != (name, turn.file_content):
                    path = Path(scratch) / name
                    path.write_bytes((turn.file_content or "").encode("utf-8"))
                    try:
                        if session is None or session.path != path:
                            session = EditSession(self.generator, path, settings)
                        else:
                            session.base_text, session.base_sha256 = _read(path)
                            session._check_fits(session.base_text)
                    except EditError as exc:
                        # name the recorded file, not the scratch copy
                        raise EditError(f"{self.recording.source}: turn {i}: "
                                        + str(exc).replace(str(path), turn.file_path or name)) from None
                    current = (name, turn.file_content or "")
                assert session is not None
                yield from self._stream(i, session.propose(turn.instruction or turn.input, settings, should_stop,
                                                           max_tokens=self.stopped_limit(i)),
                                        settings, should_stop)
                if self.report.stopped:
                    return


def _spec(routing: Any) -> str:
    if not routing:
        return "exact"
    if isinstance(routing, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(routing.items()))
    return str(routing)


def _read(path: Path) -> tuple[str, str]:
    from .edit import read_text_file

    return read_text_file(path)


def recorded_events(recording: Recording, generator: TextGenerator | None = None
                    ) -> Iterator[tuple[int, WindowEvent]]:
    """The recording's stored telemetry as WindowEvents (no model run). With a generator, each
    event also carries its share of the recorded output text (split by the windows' emitted
    token counts)."""
    for turn in recording.turns:
        stats = recording.windows.get(turn.index, [])
        ids = generator.encode(turn.output) if generator is not None else None
        at = 0
        for k, s in enumerate(stats):
            last = k == len(stats) - 1
            if ids is not None:
                tokens = ids[at:at + s.emitted] if not last else ids[at:]
                text = generator.decode(tokens)  # type: ignore[union-attr]
                at += s.emitted
            else:
                tokens, text = [], turn.output if last else ""
            yield turn.index, WindowEvent(tokens=tokens, text=text, stats=s, finished=last,
                                          stop_reason=(turn.stop_reason or "eos") if last else None)
