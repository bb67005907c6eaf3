"""Diff of a file against its rewrite: live while the rewrite streams, then for review.

The hunks come from the edit core (`strata.edit.live_hunks` while streaming, the session's
`hunks()` for review); this widget only draws them, with the line being written and how much
of the file the model has not reached yet. It repaints on its own ~10 Hz timer, never per
window.
"""
from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from ...edit import Hunk, live_hunks

LINE_STYLES = {" ": "", "-": "red", "+": "green"}


def render_hunks(hunks: list[Hunk], current: int = -1, *, writing: str | None = None,
                 pending_lines: int = 0) -> tuple[Text, list[int]]:
    """The diff as Text and the row of each hunk header (for jumping between hunks)."""
    text = Text(no_wrap=True, overflow="ellipsis")
    rows: list[int] = []
    row = 0
    for index, hunk in enumerate(hunks):
        rows.append(row)
        marker = "> " if index == current else "  "
        text.append(f"{marker}{hunk.header}  hunk {index + 1}/{len(hunks)}  "
                    f"+{hunk.added} -{hunk.removed} \n",
                    style="bold reverse cyan" if index == current else "bold cyan")
        row += 1
        for line in hunk.lines:
            kind, body = line[:1], line[1:].rstrip("\r\n")
            text.append(f"{kind} {body}\n", style=LINE_STYLES.get(kind, ""))
            row += 1
    if writing is not None:
        text.append(f"  {writing}\u2588\n", style="bold")
    if pending_lines > 0:
        text.append(f"  \u2026 {pending_lines} more lines of the file not reached yet\n", style="dim")
    if not hunks and writing is None and not pending_lines:
        text.append("no changes", style="dim")
    return text, rows


class DiffView(VerticalScroll):
    """`start(original)`, `append(text)` while streaming, `show(hunks)` for review;
    `hunk_count`, `current_hunk`, `goto_hunk(i)`."""

    DEFAULT_CSS = """
    DiffView > #diff-text { width: 1fr; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.original = ""
        self.rewrite = ""
        self.streaming = False
        self.hunks: list[Hunk] = []
        self.hunk_rows: list[int] = []
        self.current_hunk = -1
        self._dirty = False

    def compose(self):
        yield Static(id="diff-text")

    def on_mount(self) -> None:
        self.set_interval(0.1, self._repaint_if_dirty, name="diff-repaint")

    def start(self, original: str) -> None:
        self.original, self.rewrite, self.streaming = original, "", True
        self.hunks, self.current_hunk = [], -1
        self.flush()

    def append(self, text: str) -> None:
        self.rewrite += text
        self._dirty = True

    def show(self, hunks: list[Hunk], rewrite: str | None = None) -> None:
        """Review: draw the final hunks and select the first."""
        if rewrite is not None:
            self.rewrite = rewrite
        self.streaming = False
        self.hunks = hunks
        self.current_hunk = 0 if hunks else -1
        self._draw()
        self.goto_hunk(self.current_hunk)

    def _repaint_if_dirty(self) -> None:
        if self._dirty:
            self.flush()

    def flush(self) -> None:
        """Recompute the live hunks of the text streamed so far and redraw."""
        self._dirty = False
        if self.streaming:
            self.hunks = live_hunks(self.original, self.rewrite)
        self._draw()
        if self.streaming:
            self.scroll_end(animate=False)

    def _draw(self) -> None:
        writing = None
        pending = 0
        if self.streaming:
            done_lines = self.rewrite.count("\n")
            writing = self.rewrite[self.rewrite.rfind("\n") + 1:]
            pending = max(0, len(self.original.splitlines()) - done_lines - 1)
        text, self.hunk_rows = render_hunks(self.hunks, self.current_hunk, writing=writing,
                                            pending_lines=pending)
        self.query_one("#diff-text", Static).update(text)

    @property
    def hunk_count(self) -> int:
        return len(self.hunks)

    def goto_hunk(self, index: int) -> None:
        if not self.hunks:
            return
        self.current_hunk = max(0, min(len(self.hunks) - 1, index))
        self._draw()
        self.scroll_to(y=self.hunk_rows[self.current_hunk], animate=False)
