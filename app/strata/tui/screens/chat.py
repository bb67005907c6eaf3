"""Chat: transcript, prompt, settings strip and the telemetry panels.

The conversation itself (templates, turns, checkpoints, undo/retry, storage) is
`strata.chat.ChatSession`; this screen drives it from engine workers and shows the result."""
from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Footer, Header, Input, Static

from ...chat import ChatSession
from ...generate import summarize
from ..keymap import CHAT_KEYS, bindings
from ..messages import GenerationFinished, SettingsChanged, StatusNote
from ..widgets.settings_strip import SettingsStrip
from ..widgets.transcript import MessageBlock, Transcript
from .base import EngineScreen, PanelsColumn, describe_error


class ChatReady(Message):
    """The ChatSession is open (turns loaded, engine positioned) or could not be opened."""

    def __init__(self, chat: ChatSession | None, error: BaseException | None = None) -> None:
        super().__init__()
        self.chat = chat
        self.error = error


class TurnsChanged(Message):
    """Undo (or a failed operation) changed the turn list: redraw the transcript from it."""

    def __init__(self, note: str | None = None, error: bool = False) -> None:
        super().__init__()
        self.note = note
        self.error = error


class ChatScreen(EngineScreen):
    CSS_PATH = "chat.tcss"
    BINDINGS = bindings(CHAT_KEYS)

    def __init__(self) -> None:
        super().__init__()
        self.chat: ChatSession | None = None
        self._pending_confirm: tuple[str, int] | None = None  # an undo/retry waiting for its second press

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield Transcript(id="transcript")
                yield Input(placeholder="Message (Enter to send)", id="prompt",
                            tooltip="Type a message and press Enter")
                yield SettingsStrip(self.app.settings, id="settings")  # type: ignore[attr-defined]
            yield PanelsColumn(self.app.telemetry)  # type: ignore[attr-defined]
        yield Static("opening session\u2026", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#prompt", Input).focus()
        self._open()

    # -- engine work (threads) -----------------------------------------------------------
    # Its own group: the ready message it posts starts the next "engine" worker, and an
    # exclusive start in the same group would cancel this one while it is still finishing.
    @work(thread=True, exclusive=True, exit_on_error=False, group="open")
    def _open(self) -> None:
        app = self.app
        try:
            resume = app.session_id is not None and not app.settings_given  # type: ignore[attr-defined]
            chat = ChatSession(app.generator, None if resume else app.settings,  # type: ignore[attr-defined]
                               store=app.store, session_id=app.session_id)  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - shown on screen
            self.post_message(ChatReady(None, exc))
            return
        self.post_message(ChatReady(chat))

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine")
    def _undo(self, delete_stored: bool = False) -> None:
        chat = self.chat
        try:
            undone = chat.undo(delete_stored=delete_stored)  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001
            self.post_message(TurnsChanged(describe_error(exc), error=True))
            return
        stored = f", deleted from session {chat.session_id}" if chat.store is not None else ""  # type: ignore[union-attr]
        self.post_message(TurnsChanged(f"undid turn {undone.index + 1}{stored}; engine back at position "
                                       f"{self.app.generator.pos}"))  # type: ignore[attr-defined]

    def _confirm_stored(self, action: str) -> bool | None:
        """None: ask first (a stored turn of an earlier run would be deleted); True: confirmed
        by pressing the key again; False: nothing stored is at stake."""
        chat = self.chat
        if not chat.undo_deletes_stored():  # type: ignore[union-attr]
            self._pending_confirm = None
            return False
        if self._pending_confirm == (action, len(chat.turns)):  # type: ignore[union-attr]
            self._pending_confirm = None
            return True
        self._pending_confirm = (action, len(chat.turns))  # type: ignore[union-attr]
        n = chat.turns[-1].index + 1  # type: ignore[union-attr]
        note = (f"turn {n} was stored by an earlier run of session {chat.session_id}: "  # type: ignore[union-attr]
                f"{action} deletes it from the store; press the key again to go on")
        self._status(note, error=True)
        self.post_message(StatusNote(note, error=True))
        return None

    @work(thread=True, exclusive=True, exit_on_error=False, group="engine")
    def _save(self) -> None:
        try:
            chat = self.chat
            assert chat is not None
            chat.save_state()
            if chat.store is not None and chat.session_id is not None:
                chat.store.update_session(chat.session_id, settings=chat.settings)
        except Exception as exc:  # noqa: BLE001
            self.post_message(StatusNote(describe_error(exc), error=True))
            return
        self.post_message(StatusNote(f"session {self.chat.session_id} saved "  # type: ignore[union-attr]
                                     f"({len(self.chat.turns)} turns, engine state)"))  # type: ignore[union-attr]

    # -- UI thread ------------------------------------------------------------------------
    def on_chat_ready(self, message: ChatReady) -> None:
        if message.chat is None:
            self.report_error(message.error)  # type: ignore[arg-type]
            return
        self.chat = message.chat
        self.app.session_id = message.chat.session_id  # type: ignore[attr-defined]
        if message.chat.session_id:
            model = getattr(self.app.generator, "model_name", "")  # type: ignore[attr-defined]
            self.app.sub_title = f"{model} \u00b7 session {message.chat.session_id}"
        if self.app.settings != message.chat.settings:  # type: ignore[attr-defined]
            self.app.settings = message.chat.settings  # type: ignore[attr-defined]
            self.query_one(SettingsStrip).set_settings(message.chat.settings)
        self._redraw_turns()
        where = f"session {self.chat.session_id}" if self.chat.session_id else "unsaved session"
        self._status(f"{where} \u00b7 {len(self.chat.turns)} turns \u00b7 position "
                     f"{self.app.generator.pos}")  # type: ignore[attr-defined]

    def _redraw_turns(self) -> None:
        transcript = self.query_one(Transcript)
        transcript.clear_messages()
        for turn in self.chat.turns if self.chat else []:
            transcript.add_message("user", turn.input)
            transcript.add_message("assistant", turn.output)

    @on(Input.Submitted, "#prompt")
    def send(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if self.busy:
            self.notify("wait for the current generation (Esc stops it)", severity="warning")
            return
        if self.chat is None:
            self.notify("no conversation is open (see the status line)", severity="error")
            return
        event.input.value = ""
        transcript = self.query_one(Transcript)
        transcript.add_message("user", text)
        transcript.add_message("assistant")
        chat, settings = self.chat, self.app.settings  # type: ignore[attr-defined]
        self._status("generating\u2026 (Esc stops)")
        self.start_run(lambda stop: chat.send(text, settings, stop), transcript.append_text)

    def _idle(self) -> bool:
        """True when an engine action may start; else say why."""
        if self.busy:
            self.notify("a generation is running (Esc stops it)", severity="warning")
            return False
        return self.chat is not None

    def action_retry_turn(self) -> None:
        if not self._idle():
            return
        if not self.chat.turns:
            self.notify("nothing to retry yet", severity="warning")
            return
        confirmed = self._confirm_stored("retry")
        if confirmed is None:
            return
        transcript = self.query_one(Transcript)
        blocks = transcript.messages()
        if blocks and blocks[-1][0] == "assistant":
            transcript.query("MessageBlock").last().remove()
        transcript.add_message("assistant")
        chat, settings = self.chat, self.app.settings  # type: ignore[attr-defined]
        self._status("retrying from the checkpoint before the last turn\u2026")
        self.start_run(lambda stop: chat.retry(settings, stop, delete_stored=bool(confirmed)),
                       transcript.append_text)

    def action_undo_turn(self) -> None:
        if not self._idle():
            return
        if self.chat.turns:
            confirmed = self._confirm_stored("undo")
            if confirmed is None:
                return
            self._undo(bool(confirmed))
        else:
            self._undo()

    def action_save_session(self) -> None:
        if not self._idle():
            return
        self._save()

    def action_focus_settings(self) -> None:
        self.query_one("#drafting").focus()

    def on_turns_changed(self, message: TurnsChanged) -> None:
        self._redraw_turns()
        if message.note:
            self._status(message.note, error=message.error)
            self.post_message(StatusNote(message.note, error=message.error))

    def on_generation_finished(self, message: GenerationFinished) -> None:
        if not self.transcript_run_ended(message):
            return
        chat = self.chat
        assert chat is not None
        turn = summarize(chat.last_windows)
        blocks = self.query(MessageBlock)
        if blocks and blocks.last().role == "assistant":
            blocks.last().border_subtitle = (
                f"{turn.tokens} tokens \u00b7 {turn.tokens_per_window:.2f}/window \u00b7 "
                f"drafts kept {turn.acceptance:.0%}")
        self._status(f"{message.stop_reason or 'done'} \u00b7 turn {len(chat.turns)} \u00b7 "
                     f"{turn.tokens_per_s:.1f} tok/s \u00b7 acceptance {turn.acceptance:.0%}")
        self.query_one("#prompt", Input).focus()

    def on_settings_changed(self, message: SettingsChanged) -> None:
        self.app.settings = message.settings  # type: ignore[attr-defined]
        if self.chat is not None:
            self.chat.settings = message.settings
        self._status("settings apply from the next message: " + _settings_line(message.settings))


def _settings_line(s) -> str:
    draft = "off" if s.draft == "none" else f"on (max {s.max_draft if s.max_draft is not None else 'auto'})"
    return f"drafting {draft}, temperature {s.temperature:g}, seed {s.seed}, copy bias {s.copy_bias or 0:g}"
