"""Help: every binding by screen, with its id (for [keys] remapping) and tooltip."""
from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..keymap import ALL_KEYS


def help_table(keymap: dict[str, str]) -> Table:
    table = Table(expand=True, show_edge=False, pad_edge=False)
    table.add_column("screen", style="dim", no_wrap=True)
    table.add_column("key", style="bold cyan", no_wrap=True)
    table.add_column("id", style="dim", no_wrap=True)
    table.add_column("what it does")
    for screen, keys in ALL_KEYS.items():
        for k in keys:
            table.add_row(screen, keymap.get(k.id, k.key), k.id, k.tooltip)
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,f1", "dismiss", "Close", id="help.close",
                        tooltip="Close the help screen")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static("[b]strata keys[/b]  remap any id in the config file's \\[keys] table, "
                         "e.g. [i]\"chat.save\" = \"f9\"[/i]", id="help-title")
            self.table = help_table(self.app._keymap)  # type: ignore[attr-defined]
            yield Static(self.table, id="help-table")

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
