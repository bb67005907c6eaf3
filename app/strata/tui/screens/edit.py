"""Edit: live diff while the model rewrites the file, then review (a accept, r reject, e edit
again, u undo, j/k hunks).

The loop itself (reading and refusing files, the file checkpoint, hunks, atomic accept,
hash-checked undo, storage) is `strata.edit.EditSession`; this screen drives it from engine
workers and shows the result. The file is written only by `accept()`."""
from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Footer, Header, Input, Static

from rich.markup import escape
from rich.text import Text

from ...edit import EDIT_COPY_BIAS, EditSession
from ...filesafety import display_name
from ..keymap import REVIEW_KEYS, bindings
from ..messages import GenerationFinished, SettingsChanged, StatusNote
from ..widgets.diff_view import DiffView
from ..widgets.settings_strip import SettingsStrip
from .base import EngineScreen, PanelsColumn, describe_error

# the edit screen's phases; review keys are live only in some (see check_action)
PHASES = ("opening", "asking", "streaming", "review", "idle", "failed")


class EditReady(Message):
    def __init__(self, session: EditSession | None, error: BaseException | None = None) -> None:
        super().__init__()
        self.session = session
        self.error = error


class EditDone(Message):
    """An accept or undo (engine work: it re-reads the file) finished."""

    def __init__(self, action: str, error: BaseException | None = None) -> None:
        super().__init__()
        self.action = action
        self.error = error


class EditScreen(EngineScreen):
    CSS_PATH = "edit.tcss"
    BINDINGS = bindings(REVIEW_KEYS)

    def __init__(self) -> None:
        super().__init__()
        self.session: EditSession | None = None
        self.phase = "opening"
        self.instruction = ""
        self.accepted = 0
        self._confirm_accept = False  # a rewrite with warnings was accepted once: the next a writes

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield Static(id="edit-title")
                yield DiffView(id="diff")
                yield Input(placeholder="Instruction: what should change? (Enter to rewrite)",
                            id="instruction", tooltip="The instruction for the next rewrite")
                yield SettingsStrip(self.app.settings, copy_default=EDIT_COPY_BIAS,  # type: ignore[attr-defined]
                                    id="settings")
            yield PanelsColumn(self.app.telemetry)  # type: ignore[attr-defined]
        yield Static("reading the file\u2026", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#instruction", Input).display = False
        self._title()
        self._open()

    # -- engine work (threads) -----------------------------------------------------------
    # Its own group: the ready message it posts starts the next "engine" worker, and an
    # exclusive start in the same group would cancel this one while it is still finishing.
    @work(thread=True, exclusive=True, exit_on_error=False, group="open")
    def _open(self) -> None:
        app = self.app
        try:
            session = EditSession(app.generator, app.edit_path, app.settings,  # type: ignore[attr-defined]
                                  store=app.store, session_id=app.session_id,  # type: ignore[attr-defined]
                                  force=getattr(app, "force", False))
        except Exception as exc:  # noqa: BLE001 - shown on screen
            self.post_message(EditReady(None, exc))
            return
        self.post_message(EditReady(session))

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine")
    def _apply(self, action: str, force: bool = False) -> None:
        try:
            if action == "accept":
                self.session.accept(force=force)  # type: ignore[union-attr]
            else:
                self.session.undo()  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001
            self.post_message(EditDone(action, exc))
            return
        self.post_message(EditDone(action))

    # -- phases ---------------------------------------------------------------------------
    def _set_phase(self, phase: str, status: str, error: bool = False) -> None:
        assert phase in PHASES, phase
        self.phase = phase
        box = self.query_one("#instruction", Input)
        box.display = phase == "asking"
        if phase == "asking":
            box.value = ""
            box.focus()
        else:
            self.query_one(DiffView).focus()
        line = self.query_one("#status", Static)
        line.update(Text(status))  # plain text: paths, instructions and errors may hold "[...]"
        line.set_class(error, "-error")
        self._title()
        self.refresh_bindings()

    def _title(self) -> None:
        path = display_name(self.app.edit_path)  # type: ignore[attr-defined]
        parts = [f"[b]{escape(path)}[/b]"]
        if self.instruction:
            parts.append(f"instruction: [i]{escape(self.instruction)}[/i]")
        if self.accepted:
            parts.append(f"{self.accepted} accepted")
        self.query_one("#edit-title", Static).update("  \u00b7  ".join(parts))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Review keys are live only when they can do something (the footer dims the rest)."""
        has_proposal = self.session is not None and self.session.proposal is not None
        if action in ("accept", "reject"):
            return self.phase == "review" and has_proposal or None
        if action in ("next_hunk", "prev_hunk"):
            return self.phase == "review" or None
        if action == "edit_again":
            return self.phase in ("review", "idle") or None
        if action == "undo":
            return (self.phase in ("review", "idle") and self.session is not None
                    and self.session.can_undo) or None
        return True

    def on_edit_ready(self, message: EditReady) -> None:
        if message.session is None:
            text = describe_error(message.error)  # type: ignore[arg-type]
            self._set_phase("failed", f"error: {text}  (q to leave)", error=True)
            self.post_message(StatusNote(text, error=True))
            return
        self.session = message.session
        self.app.session_id = message.session.session_id  # type: ignore[attr-defined]
        if message.session.session_id:
            model = getattr(self.app.generator, "model_name", "")  # type: ignore[attr-defined]
            self.app.sub_title = f"{model} \u00b7 session {message.session.session_id}"
        self.app.edit_session = message.session  # type: ignore[attr-defined]
        for note in message.session.notes:  # symlink followed, stale temps removed, read-only ...
            self.post_message(StatusNote(note, error=bool(message.session.target.refusal)))
        first = self.app.instruction  # type: ignore[attr-defined]
        if first:
            self._propose(first)
        else:
            self._set_phase("asking", "type an instruction and press Enter")

    def _propose(self, instruction: str) -> None:
        session = self.session
        assert session is not None
        self.instruction = instruction
        diff = self.query_one(DiffView)
        diff.start(session.base_text)
        settings = self.app.settings  # type: ignore[attr-defined]
        self._set_phase("streaming", "rewriting from the file checkpoint\u2026 (Esc stops)")
        self.start_run(lambda stop: session.propose(instruction, settings, stop), diff.append)

    @on(Input.Submitted, "#instruction")
    def submitted(self, event: Input.Submitted) -> None:
        if self.phase == "asking" and event.value.strip() and not self.busy:
            self._propose(event.value.strip())

    def on_generation_finished(self, message: GenerationFinished) -> None:
        if message.run_id != self.run_id:
            return
        diff = self.query_one(DiffView)
        session = self.session
        if message.error is not None or session is None or session.proposal is None:
            text = describe_error(message.error) if message.error else "the rewrite produced nothing"
            diff.show([], "")
            self._set_phase("idle", f"error: {text}  (e edit again, q leave)", error=True)
            self.post_message(StatusNote(text, error=True))
            return
        diff.show(session.hunks(), session.proposal.text)
        n = diff.hunk_count
        warn = "" if session.proposal.complete else \
            f"  [stopped early: {session.proposal.stop_reason}, not acceptable]"
        self._confirm_accept = False
        if session.proposal.warnings:  # the same checks that make headless --yes refuse
            warn += "  [warning: " + "; ".join(session.proposal.warnings) + "]"
            for w in session.proposal.warnings:
                self.post_message(StatusNote(f"{self.app.edit_path}: {w}", error=True))  # type: ignore[attr-defined]
        for note in session.proposal.notes:  # a rewrite that does what was asked, and breaks a use
            warn += f"  [note: {note}]"
            self.post_message(StatusNote(f"{self.app.edit_path}: {note}"))  # type: ignore[attr-defined]
        s = self.app.telemetry.summary()  # type: ignore[attr-defined]
        self._set_phase("review", f"{n} hunk{'s' if n != 1 else ''} \u00b7 a accept \u00b7 r reject "
                        f"\u00b7 e edit again \u00b7 u undo \u00b7 j/k hunks \u00b7 "
                        f"{s.tokens_per_s:.0f} tok/s, acceptance {s.acceptance:.0%}{warn}",
                        error=bool(session.proposal.warnings))

    # -- review actions -----------------------------------------------------------------
    def action_accept(self) -> None:
        if self.phase == "review" and not self.busy:
            proposal = self.session.proposal if self.session else None
            if proposal is not None and proposal.warnings and not self._confirm_accept:
                self._confirm_accept = True
                self._set_phase("review", "warning: " + "; ".join(proposal.warnings)
                                + " \u00b7 press a again to write it anyway, r to reject", error=True)
                return
            force = self._confirm_accept
            self._confirm_accept = False
            self._set_phase("streaming", "writing the file\u2026")
            self._apply("accept", force)

    def action_reject(self) -> None:
        if self.phase != "review" or self.session is None:
            return
        try:
            self.session.reject()
        except Exception as exc:  # noqa: BLE001
            self.post_message(StatusNote(describe_error(exc), error=True))
            return
        self.query_one(DiffView).show([], "")
        self._set_phase("idle", "rejected; the file is untouched \u00b7 e edit again \u00b7 q leave")

    def action_edit_again(self) -> None:
        if self.phase in ("review", "idle") and not self.busy:
            if self.session is not None and self.session.proposal is not None:
                self.session.reject()
            self._set_phase("asking", "new instruction (rewrites from the file checkpoint, no re-prefill)")

    def action_undo(self) -> None:
        if self.phase in ("review", "idle") and not self.busy and self.session and self.session.can_undo:
            self._set_phase("streaming", "restoring the file\u2026")
            self._apply("undo")

    def action_next_hunk(self) -> None:
        diff = self.query_one(DiffView)
        diff.goto_hunk(diff.current_hunk + 1)

    def action_prev_hunk(self) -> None:
        diff = self.query_one(DiffView)
        diff.goto_hunk(diff.current_hunk - 1)

    def action_quit_edit(self) -> None:
        if not self.busy:
            self.app.exit(self.accepted)

    def focus_input(self) -> None:
        if self.phase == "asking":
            self.query_one("#instruction", Input).focus()
        else:
            self.query_one(DiffView).focus()

    def on_edit_done(self, message: EditDone) -> None:
        if message.error is not None:
            text = describe_error(message.error)
            phase = "review" if message.action == "accept" and self.session and self.session.proposal else "idle"
            self._set_phase(phase, f"error: {text}", error=True)
            self.post_message(StatusNote(text, error=True))
            return
        self.query_one(DiffView).show([], "")
        if message.action == "accept":
            self.accepted += 1
            note = f"wrote {self.app.edit_path} \u00b7 e edit again \u00b7 u undo \u00b7 q done"  # type: ignore[attr-defined]
        else:
            self.accepted = max(0, self.accepted - 1)
            note = f"restored {self.app.edit_path} as it was \u00b7 e edit again \u00b7 q done"  # type: ignore[attr-defined]
        self._set_phase("idle", note)

    def on_settings_changed(self, message: SettingsChanged) -> None:
        self.app.settings = message.settings  # type: ignore[attr-defined]
