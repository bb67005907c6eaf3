"""Text that comes from a person (a message, an instruction, stdin): it must be valid UTF-8.
Python keeps undecodable command-line bytes as lone surrogates; they would break the
tokenizer, the session store and the terminal later, so they are refused here, in one line."""
from __future__ import annotations

from .errors import UsageError


def checked_text(text: str, what: str) -> str:
    """`text`, or UsageError naming `what` and the first byte that is not UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        ch = text[exc.start]
        byte = f"byte 0x{ord(ch) - 0xDC00:02x}" if 0xDC80 <= ord(ch) <= 0xDCFF else f"U+{ord(ch):04X}"
        raise UsageError(f"{what} is not valid UTF-8 text ({byte} at character {exc.start})") from None
    return text


def decode_input(data: bytes, what: str) -> str:
    """Bytes read from stdin or a file as text, or UsageError naming `what`."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise UsageError(f"{what} is not valid UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start}, line {line})") from None
