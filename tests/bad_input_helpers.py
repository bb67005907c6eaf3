"""Shared checks for the bad-input corpus (tests/test_bad_inputs_*.py): run the CLI in-process
and assert that a bad input ended as strata promises: one `strata: error:` line on stderr, a
documented exit code, no traceback, no "internal error" (a bug)."""
from __future__ import annotations

import io
import os
import random
import sys

import pytest

from strata.cli import ExitCode, app
from strata.cli.runner import run_app

try:
    from strata.testing.fake import FakeGenerator  # noqa: F401 - re-exported for the corpus
except ImportError:  # before the test doubles moved into strata.testing
    from strata.testing.fake import FakeGenerator  # noqa: F401


def run(capsys, *args, stdin: bytes | str = b""):
    data = stdin if isinstance(stdin, bytes) else stdin.encode("utf-8", "surrogateescape")
    old = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    try:
        with pytest.raises(SystemExit) as info:
            run_app(app, list(args))
    finally:
        sys.stdin = old
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def assert_clean(code: int, err: str, allowed: tuple[int, ...], what: str) -> None:
    """A refusal is one error line with an allowed exit code; success is exit 0."""
    what, err = what[:300], err if len(err) < 2000 else err[:1000] + " ... " + err[-500:]
    assert "Traceback" not in err, f"{what}: traceback\n{err}"
    assert "internal error" not in err, f"{what}: internal error\n{err}"
    assert code in (0,) + tuple(int(c) for c in allowed), f"{what}: exit {code}\n{err}"
    if code not in (0, int(ExitCode.MISMATCH)):  # a replay that differs reports on stdout
        errors = [line for line in err.splitlines() if line.startswith("strata: error:")]
        assert len(errors) == 1, f"{what}: expected one error line\n{err}"


def rng(seed: int) -> random.Random:
    return random.Random(seed)


CODES = ExitCode


def sized_fifo(path, data: bytes):
    """A named pipe at `path` that gives `data` once, then end of file: stat() reports no size (as
    for /dev/zero), yet a reader that ignores a limit still ends, so a regression fails instead of
    filling the machine's memory."""
    import threading

    os.mkfifo(path)

    def feed() -> None:
        try:
            with open(path, "wb") as f:
                f.write(data)
        except BrokenPipeError:
            pass  # the reader stopped at its limit

    threading.Thread(target=feed, daemon=True).start()
    return path
