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

    def on_mount(self) -> None:
        self.update(Text(printable(self.text)))

    def append(self, text: str) -> None:
        self.text += text
        self.update(Text(printable(self.text)))


class Transcript(VerticalScroll):
    """Holds MessageBlocks. `append_text` is what workers reach through call_from_thread."""

    def add_message(self, role: str, text: str = "") -> MessageBlock:
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
        self.scroll_end(animate=False)

    def clear_messages(self) -> None:
        self.query(MessageBlock).remove()

    def messages(self) -> list[tuple[str, str]]:
        return [(b.role, b.text) for b in self.query(MessageBlock)]
