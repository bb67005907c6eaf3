"""Text that comes from a person (a message, an instruction, stdin): it must be valid UTF-8.
Python keeps undecodable command-line bytes as lone surrogates; they would break the
tokenizer, the session store and the terminal later, so they are refused here, in one line."""
from __future__ import annotations

from typing import Any

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


# More text than any model's context holds (a million tokens is a few MiB): reading on would only
# fill memory (`strata run --prompt-file /dev/zero`, `strata chat < /dev/zero` ended in a MemoryError).
MAX_INPUT_BYTES = 64 << 20


def read_input(stream: Any, what: str) -> str:
    """At most MAX_INPUT_BYTES of text from a binary or text stream (stdin, an open file), as
    UTF-8; UsageError naming `what` when it is longer or not UTF-8."""
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        data = buffer.read(MAX_INPUT_BYTES + 1)
    else:
        data = stream.read(MAX_INPUT_BYTES + 1)
        if isinstance(data, str):  # a text stream (tests): its characters as the bytes they came from
            data = data.encode("utf-8", "surrogateescape")
    if len(data) > MAX_INPUT_BYTES:
        from .telemetry import human_bytes

        raise UsageError(f"{what}: larger than {human_bytes(MAX_INPUT_BYTES)}, more text than any model's "
                         "context holds")
    return decode_input(data, what)
