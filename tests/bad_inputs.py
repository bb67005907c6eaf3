"""Shared by the bad-input corpus tests (tests/test_bad_inputs_*.py): run the CLI in-process and
check that a bad input gives exactly one error line, the documented exit code, and no traceback."""
from __future__ import annotations

import io
import sys

import pytest

from strata.cli import app
from strata.cli.runner import run_app


def run_cli(capsys, *args: str, stdin: str = "") -> tuple[int, str, str]:
    sys.stdin = io.StringIO(stdin)
    with pytest.raises(SystemExit) as info:
        run_app(app, [str(a) for a in args])
    out, err = capsys.readouterr()
    return int(info.value.code or 0), out, err


def assert_one_line_error(code: int, err: str, want_code: int, *needles: str) -> str:
    """The error line; fails unless the run exited `want_code` with one `strata: error:` line on
    stderr (notes before it allowed), no traceback, and no "internal error" (a bug's message)."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("strata: error:")]
    assert len(errors) == 1, err
    line = errors[0]
    assert "internal error" not in line, line
    assert code == want_code, f"exit {code}, wanted {want_code}: {line}"
    for needle in needles:
        assert needle in line, line
    return line
