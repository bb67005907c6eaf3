"""The strata TUI: one Textual app with a chat, an edit-review and a replay mode.

Constructor (what the CLI calls)::

    StrataApp(
        generator,                 # strata.protocol.TextGenerator (real Generator or FakeGenerator)
        mode="chat",               # "chat" | "edit" | "replay"
        settings=None,             # GenerationSettings to start from (live-changeable in the strip)
        store=None,                # strata.store session store, or None for an unsaved session
        session_id=None,           # resume this stored session (chat) / record into it
        edit_path=None,            # mode="edit": the file to rewrite
        instruction=None,          # mode="edit": first instruction (else asked for on screen)
        replay=None,               # mode="replay": a strata.replay recording to re-run
        keymap=None,               # {binding id: "keys"} overrides, e.g. from config.toml
        title=None,
    )
    app.run()                      # app.return_code / app.exit_result say what happened

Everything that touches the engine runs in a thread worker; tokens reach the transcript
through `call_from_thread`, telemetry arrives as messages and the panels repaint on a ~10 Hz
timer. Nothing here writes to fd 1 or 2 (Textual owns the terminal).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.app import App

from ..protocol import GenerationSettings, TextGenerator

MODES = ("chat", "edit", "replay")


class StrataApp(App):
    CSS_PATH = "app.tcss"
    TITLE = "strata"

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
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        super().__init__()
        self.generator = generator
        self.mode = mode
        self.settings = settings or GenerationSettings()
        self.store = store
        self.session_id = session_id
        self.edit_path = Path(edit_path) if edit_path is not None else None
        self.instruction = instruction
        self.replay = replay
        if keymap:
            self.set_keymap(keymap)
        if title:
            self.title = title
