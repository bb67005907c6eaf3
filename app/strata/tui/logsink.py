"""While the TUI runs, Python logging must not reach fd 1 or 2 (Textual draws on the terminal):
records go to the app instead (kept for the log view, warnings and errors as notifications)."""
from __future__ import annotations

import logging
from collections import deque
from typing import Callable


class AppLogSink(logging.Handler):
    """Keeps the last records; calls `notify(text, error)` for WARNING and above."""

    def __init__(self, notify: Callable[[str, bool], None], keep: int = 500) -> None:
        super().__init__(logging.INFO)
        self.records: deque[str] = deque(maxlen=keep)
        self.notify = notify
        self._muted: list[tuple[logging.Handler, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.levelname.lower()}: {record.name}: {record.getMessage()}"
        except Exception:  # noqa: BLE001 - a bad format string must not break the UI
            text = f"{record.levelname.lower()}: {record.name}: {record.msg!r}"
        self.records.append(text)
        if record.levelno >= logging.WARNING:
            self.notify(text, record.levelno >= logging.ERROR)

    def install(self) -> None:
        """Attach to the root logger and silence the stream handlers of the root and `strata`
        loggers (files are left alone): a stream handler writes to a terminal or to whatever
        stands in for one, and the terminal belongs to Textual now."""
        for logger in (logging.getLogger(), logging.getLogger("strata")):
            for handler in list(logger.handlers):
                if isinstance(handler, logging.StreamHandler) and not isinstance(
                        handler, (logging.FileHandler, AppLogSink)):
                    self._muted.append((handler, handler.level))
                    handler.setLevel(logging.CRITICAL + 1)
        logging.getLogger().addHandler(self)
        logging.captureWarnings(True)

    def uninstall(self) -> None:
        root = logging.getLogger()
        root.removeHandler(self)
        for handler, level in self._muted:
            handler.setLevel(level)
        self._muted.clear()
        logging.captureWarnings(False)
