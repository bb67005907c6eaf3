"""Log: status notes and Python log records (the engine's included) of this run. While the TUI
runs they cannot go to the terminal, so they are kept here."""
from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class LogScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f2", "dismiss", "Close", id="log.close",
                        tooltip="Close the log")]

    def compose(self) -> ComposeResult:
        app = self.app
        sink = getattr(app, "log_sink", None)
        records = list(sink.records) if sink is not None else []
        notes = list(getattr(app, "notes", []))
        lines = Text()
        lines.append("notes\n", style="bold")
        for note in notes or ["(none)"]:
            lines.append(f"  {note}\n")
        lines.append("\nlog records\n", style="bold")
        for record in records or ["(none)"]:
            style = "red" if record.startswith(("error", "critical")) else \
                "yellow" if record.startswith("warning") else ""
            lines.append(f"  {record}\n", style=style)
        self.lines = lines
        with VerticalScroll(id="log-body"):
            yield Static(lines, id="log-text")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
