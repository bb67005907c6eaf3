"""The chat transcript: one block per message, the assistant's block grows as windows stream."""
from __future__ import annotations

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static


# C0 controls (and DEL) other than newline and tab become their visible "control pictures":
# model output is untrusted and must not drive the terminal.
_CONTROL_PICTURES = {c: 0x2400 + c for c in range(32) if c not in (9, 10)}
_CONTROL_PICTURES[127] = 0x2421


def printable(text: str) -> str:
    return text.translate(_CONTROL_PICTURES)


class MessageBlock(Static):
    def __init__(self, role: str, text: str = "") -> None:
        super().__init__(classes=f"message {role}")
        self.role = role
        self.text = text
        self.border_title = role
        self.dirty = False

    def on_mount(self) -> None:
        self.render_text()

    def append(self, text: str) -> None:
        """Cheap: the text is drawn by the transcript's repaint timer (`render_text`)."""
        self.text += text
        self.dirty = True

    def render_text(self) -> None:
        self.dirty = False
        self.update(Text(printable(self.text)))


class Transcript(VerticalScroll):
    """Holds MessageBlocks. `append_text` is what workers reach through call_from_thread; it
    only appends, and a ~20 Hz timer redraws, so a fast engine never waits on rendering."""

    REPAINT_S = 0.05

    def on_mount(self) -> None:
        self.set_interval(self.REPAINT_S, self.flush, name="transcript-repaint")

    def add_message(self, role: str, text: str = "") -> MessageBlock:
        self.flush()
        block = MessageBlock(role, text)
        self.mount(block)
        self.scroll_end(animate=False)
        return block

    def append_text(self, text: str) -> None:
        blocks = self.query(MessageBlock)
        if not blocks:
            self.add_message("assistant", text)
            return
        blocks.last().append(text)

    def flush(self) -> None:
        """Draw the blocks that grew since the last repaint."""
        grew = False
        for block in self.query(MessageBlock):
            if block.dirty:
                block.render_text()
                grew = True
        if grew:
            self.scroll_end(animate=False)

    def clear_messages(self) -> None:
        self.query(MessageBlock).remove()

    def messages(self) -> list[tuple[str, str]]:
        return [(b.role, b.text) for b in self.query(MessageBlock)]
