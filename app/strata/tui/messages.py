"""Messages between the engine workers and the screens. Workers never touch widgets: they post
these, and handlers on the UI thread own every piece of state."""
from __future__ import annotations

from typing import Sequence

from textual.message import Message

from ..protocol import GenerationSettings, WindowStats


class TelemetryUpdate(Message):
    """Windows `0..count` of run `run_id` are available in `windows` (a list the worker only
    appends to). A newer update of the same run replaces a pending older one, so a burst of
    windows costs one handler call and nothing is lost."""

    def __init__(self, run_id: int, windows: Sequence[WindowStats], count: int) -> None:
        super().__init__()
        self.run_id = run_id
        self.windows = windows
        self.count = count

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TelemetryUpdate) and message.run_id == self.run_id


class GenerationFinished(Message):
    """A run ended: `stop_reason` from the last WindowEvent, or `error` when it failed."""

    def __init__(self, run_id: int, text: str, stop_reason: str | None,
                 error: BaseException | None = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.text = text
        self.stop_reason = stop_reason
        self.error = error


class SettingsChanged(Message):
    """The settings strip produced a new, valid GenerationSettings."""

    def __init__(self, settings: GenerationSettings) -> None:
        super().__init__()
        self.settings = settings


class StatusNote(Message):
    """A one-line note for the status bar (errors a user can act on, saved paths, ...)."""

    def __init__(self, text: str, error: bool = False) -> None:
        super().__init__()
        self.text = text
        self.error = error
