"""Line diff of a file against its rewrite, live while the rewrite streams and for review.

While streaming, original lines past the last line the rewrite has matched are shown as
pending (dim), not as deletions: the model has not reached them yet. The diff repaints on its
own ~10 Hz timer, never per window.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

CONTEXT = 3


@dataclass
class DiffLine:
    kind: str        # " " same, "-" removed, "+" added, "~" pending (not reached yet), "@" hunk header,
    # ">" the line the model is writing now
    text: str
    hunk: int = -1   # index of the hunk this line belongs to (-1 outside hunks)


def diff_lines(original: str, rewrite: str, *, streaming: bool) -> list[DiffLine]:
    """Unified-style lines with CONTEXT lines around each hunk. With `streaming`, the rewrite is
    a prefix: its last (incomplete) line is shown as added-in-progress and original lines
    after the last matched block are pending."""
    old = original.splitlines()
    new = rewrite.splitlines()
    if streaming and rewrite and not rewrite.endswith("\n") and new:
        partial = new.pop()
    else:
        partial = None
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    ops = matcher.get_opcodes()
    pending_from = len(old)
    if streaming:
        # trailing deletions are original lines the rewrite has not reached yet
        while ops and ops[-1][0] == "delete":
            pending_from = ops[-1][1]
            ops.pop()
        if ops and ops[-1][0] == "replace" and ops[-1][4] == len(new):
            tag, i1, i2, j1, j2 = ops.pop()
            ops.append(("insert", i1, i1, j1, j2))
            pending_from = i1
    raw: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in ops:
        if tag == "equal":
            raw.extend((" ", line) for line in old[i1:i2])
        else:
            raw.extend(("-", line) for line in old[i1:i2])
            raw.extend(("+", line) for line in new[j1:j2])
    # keep changed lines and CONTEXT lines around them; a gap starts a new hunk
    keep: set[int] = set()
    for i, (kind, _) in enumerate(raw):
        if kind != " ":
            keep.update(range(max(0, i - CONTEXT), min(len(raw), i + CONTEXT + 1)))
    out: list[DiffLine] = []
    hunk = -1
    previous = -2
    for i in sorted(keep):
        if i != previous + 1:
            hunk += 1
            out.append(DiffLine("@", f"@@ hunk {hunk + 1} (line {_old_line(raw, i)}) @@", hunk))
        out.append(DiffLine(raw[i][0], raw[i][1], hunk))
        previous = i
    if partial is not None:
        out.append(DiffLine(">", partial + "\u2588"))
    if streaming and pending_from < len(old):
        out.append(DiffLine("@", f"@@ {len(old) - pending_from} lines not reached yet @@"))
        out.extend(DiffLine("~", line) for line in old[pending_from:pending_from + 2 * CONTEXT])
    return out


def _old_line(raw: list[tuple[str, str]], index: int) -> int:
    """1-based line number in the original file of raw[index] (or where it would go)."""
    return 1 + sum(1 for kind, _ in raw[:index] if kind in " -")


STYLES = {">": "bold",  " ": "", "-": "red", "+": "green", "~": "dim", "@": "bold cyan"}


def render_diff(lines: list[DiffLine], current_hunk: int = -1) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    for line in lines:
        style = STYLES[line.kind]
        if line.hunk == current_hunk and line.kind == "@":
            style = "bold reverse cyan"
        prefix = "" if line.kind == "@" else ("  " if line.kind in " ~>" else line.kind + " ")
        text.append(prefix + line.text + "\n", style=style)
    if not lines:
        text.append("no changes", style="dim")
    return text


class DiffView(VerticalScroll):
    """Shows `diff_lines(original, rewrite)`; `hunk_count`, `current_hunk`, `goto_hunk()`."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.original = ""
        self.rewrite = ""
        self.streaming = False
        self.lines: list[DiffLine] = []
        self.current_hunk = -1
        self._dirty = False

    def compose(self):
        yield Static(id="diff-text")

    def on_mount(self) -> None:
        self.set_interval(0.1, self._repaint_if_dirty, name="diff-repaint")

    def start(self, original: str) -> None:
        self.original, self.rewrite, self.streaming = original, "", True
        self.current_hunk = -1
        self.flush()

    def append(self, text: str) -> None:
        self.rewrite += text
        self._dirty = True

    def finish(self, rewrite: str) -> None:
        self.rewrite, self.streaming = rewrite, False
        self.current_hunk = 0 if self.hunk_count else -1
        self.flush()
        self.goto_hunk(self.current_hunk)

    def _repaint_if_dirty(self) -> None:
        if self._dirty:
            self.flush()

    def flush(self) -> None:
        self._dirty = False
        self.lines = diff_lines(self.original, self.rewrite, streaming=self.streaming)
        self.query_one("#diff-text", Static).update(render_diff(self.lines, self.current_hunk))
        if self.streaming:
            self.scroll_end(animate=False)

    @property
    def hunk_count(self) -> int:
        return 1 + max((line.hunk for line in self.lines), default=-1)

    def goto_hunk(self, index: int) -> None:
        if not self.hunk_count:
            return
        self.current_hunk = max(0, min(self.hunk_count - 1, index))
        self.query_one("#diff-text", Static).update(render_diff(self.lines, self.current_hunk))
        row = next(i for i, line in enumerate(self.lines)
                   if line.hunk == self.current_hunk and line.kind == "@")
        self.scroll_to(y=row, animate=False)
