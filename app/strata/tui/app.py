"""The strata TUI: one Textual app with a chat, an edit-review and a replay mode.

Constructor (what the CLI calls)::

    StrataApp(
        generator,                 # strata.protocol.TextGenerator (real Generator or FakeGenerator)
        mode="chat",               # "chat" | "edit" | "replay"
        settings=None,             # GenerationSettings to start from (live-changeable in the strip)
        store=None,                # strata.store.SessionStore, or None for an unsaved session
        session_id=None,           # chat/edit: resume this stored session (else a new one)
        edit_path=None,            # mode="edit" (required): the file to rewrite
        instruction=None,          # mode="edit": first instruction (else asked for on screen)
        replay=None,               # mode="replay" (required): a strata.replay.Replay to re-run,
                                   #   or a session_format.Recording to play its stored telemetry
        keymap=None,               # {binding id: "keys"}; None = the config file's [keys] table
        title=None,
    )
    app.run()

Afterwards: `app.session_id` (the session the chat/edit was recorded in), `app.edit_session`
(the EditSession, mode="edit"), `app.replay.report` (mode="replay"), `app.return_value` (edit:
number of accepted rewrites still applied), `app.notes` (status and log lines shown).
A bad mode or a missing edit_path/replay, or a bad [keys] table, raises UsageError before the
terminal is touched.

Everything that touches the engine runs in a thread worker; tokens reach the transcript
through `call_from_thread`, telemetry arrives as messages and the panels repaint on a ~10 Hz
timer. Python logging goes to the app while it runs (nothing here writes to fd 1 or 2:
Textual owns the terminal).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from textual.app import App

from ..errors import UsageError
from ..protocol import GenerationSettings, TextGenerator
from .keymap import APP_KEYS, bindings
from .messages import StatusNote
from .telemetry import TelemetryLog

MODES = ("chat", "edit", "replay")
PANEL_HZ = 10.0


def expert_geometry(generator: Any) -> tuple[int, int]:
    """(MoE layers, experts per layer) for sizing the heatmap before the first window; 0 where
    unknown (the map then grows with the expert ids it sees)."""
    n_layers = getattr(generator, "n_layers", 0)
    n_experts = getattr(generator, "n_experts", 0)
    config = getattr(getattr(generator, "engine", None), "config", None)
    if isinstance(config, dict):
        moe = config.get("layer_moe")
        if not n_layers and isinstance(moe, list):
            n_layers = sum(1 for flag in moe if flag)
        n_experts = n_experts or config.get("num_experts") or 0
        hf = config.get("hf_config", config)
        if isinstance(hf, dict):
            hf = {**hf, **(hf.get("text_config") or {})}
            n_experts = n_experts or hf.get("num_experts") or hf.get("n_routed_experts") or 0
    try:
        return max(0, int(n_layers or 0)), max(0, int(n_experts or 0))
    except (TypeError, ValueError):
        return 0, 0


NARROW_BELOW = 100


class StrataApp(App):
    # below NARROW_BELOW columns (an 80x24 terminal) the text gets the width: the screen has
    # the class -narrow, app.tcss hides the panels (F4 shows them, F5 zooms them)
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (NARROW_BELOW, "-wide")]
    CSS_PATH = "app.tcss"
    TITLE = "strata"
    BINDINGS = bindings(APP_KEYS)

    def __init__(
        self,
        generator: TextGenerator,
        *,
        mode: str = "chat",
        settings: GenerationSettings | None = None,
        store: Any = None,
        session_id: str | None = None,
        edit_path: str | Path | None = None,
        instruction: str | None = None,
        replay: Any = None,
        keymap: dict[str, str] | None = None,
        title: str | None = None,
        force: bool = False,
    ) -> None:
        if mode not in MODES:
            raise UsageError(f"TUI mode must be one of {', '.join(MODES)}, not {mode!r}")
        if mode == "edit" and edit_path is None:
            raise UsageError("the edit TUI needs a file (edit_path)")
        if mode == "replay" and replay is None:
            raise UsageError("the replay TUI needs a recording (replay)")
        super().__init__()
        self.generator = generator
        self.mode = mode
        self.settings = settings or GenerationSettings()
        # a resumed session keeps its stored settings unless the caller gave some
        self.settings_given = settings is not None
        self.store = store
        self.session_id = session_id
        self.edit_path = Path(edit_path) if edit_path is not None else None
        self.instruction = instruction
        self.force = force          # edit: `strata edit --force` (hard links in place)
        self.replay = replay
        if keymap is None:
            from .keymap import load_keymap

            keymap = load_keymap()  # UsageError (one line, names the file) on a bad table
        if keymap:
            self.set_keymap(keymap)
        self.title = title or f"strata {mode}"
        self.sub_title = getattr(generator, "model_name", "")
        # the panels' model: every window heard of, live or replayed
        n_layers, n_experts = expert_geometry(generator)
        self.telemetry = TelemetryLog(n_layers=n_layers, n_experts=n_experts)
        self._painted_version = -1
        self.notes: list[str] = []
        self.edit_session = None    # mode="edit": the strata.edit.EditSession once opened

    def on_mount(self) -> None:
        from .logsink import AppLogSink

        self.log_sink = AppLogSink(self._notify_from_log)
        self.log_sink.install()
        self.set_interval(1.0 / PANEL_HZ, self.repaint_panels, name="panels")
        self.push_screen(self._mode_screen())

    def on_unmount(self) -> None:
        self.log_sink.uninstall()

    def _notify_from_log(self, text: str, error: bool) -> None:
        # records may come from worker threads; notes are kept, the toast goes via the loop
        self.notes.append(text)
        try:
            if self._thread_id == threading.get_ident():
                self.notify(text, severity="error" if error else "warning", markup=False)
            else:
                self.call_from_thread(self.notify, text, severity="error" if error else "warning", markup=False)
        except RuntimeError:
            pass  # the app is closing

    def _mode_screen(self):
        if self.mode == "edit":
            from .screens.edit import EditScreen
            return EditScreen()
        if self.mode == "replay":
            from .screens.replay import ReplayScreen
            return ReplayScreen()
        from .screens.chat import ChatScreen
        return ChatScreen()

    # -- panels ----------------------------------------------------------------------------
    def repaint_panels(self, force: bool = False) -> None:
        """Repaint the telemetry panels of the current screen if new windows arrived (the
        ~10 Hz timer calls this; tests call it with force=True instead of waiting)."""
        if not force and self.telemetry.version == self._painted_version:
            return
        self._painted_version = self.telemetry.version
        from .screens.base import PanelsColumn
        for column in self.screen.query(PanelsColumn):
            column.refresh_from_log()

    def action_toggle_heatmap_numbers(self) -> None:
        from .widgets.heatmap import ExpertHeatmap
        for heatmap in self.screen.query(ExpertHeatmap):
            heatmap.numeric = not heatmap.numeric

    def action_toggle_panels(self) -> None:
        from .screens.base import PanelsColumn
        for column in self.screen.query(PanelsColumn):
            column.display = not column.display
        self._focus_input()

    def action_zoom_panels(self) -> None:
        from .screens.base import PanelsColumn
        columns = list(self.screen.query(PanelsColumn))
        if not columns:
            return
        zoomed = not columns[0].has_class("-zoomed")
        for column in columns:
            column.set_class(zoomed, "-zoomed")
            if zoomed:
                column.display = True
            else:  # back to what the layout says (hidden on a narrow terminal)
                column.styles.clear_rule("display")
        for left in self.screen.query("#left"):
            left.display = not zoomed
        self.repaint_panels(force=True)
        if not zoomed:
            self._focus_input()

    def _focus_input(self) -> None:
        focus = getattr(self.screen, "focus_input", None)
        if focus is not None:
            focus()

    def action_show_log(self) -> None:
        from .screens.log import LogScreen
        if not isinstance(self.screen, LogScreen):
            self.push_screen(LogScreen())

    def action_show_help(self) -> None:
        from .screens.help import HelpScreen
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def on_status_note(self, message: StatusNote) -> None:
        self.notes.append(message.text)
        self.notify(message.text, severity="error" if message.error else "information",
                    timeout=6 if message.error else 3, markup=False)  # paths may hold "[...]"
