"""strata command line (Typer). A thin front over the core: every command lives in its own
module under strata.cli and registers itself on `app`."""
from __future__ import annotations

import enum

import typer
import typer.core

from .. import diagnostics
from ..diagnostics import debug_enabled  # noqa: F401 (the commands ask it through here)


class ExitCode(enum.IntEnum):
    OK = 0
    ERROR = 1          # unexpected failure (bug); traceback with --debug
    USAGE = 2          # bad command-line input
    MODEL = 3          # model missing / malformed / mismatched
    SESSION = 4        # session store or file problem
    EDIT = 5           # edit refused (binary, too large, changed on disk)
    IO = 6             # file system / read error
    MISMATCH = 7       # replay --compare found different output
    INTERRUPTED = 130  # Ctrl-C


# Typer prints an argument's Python type after its name in plain --help ("SRC <str>"); strata's
# arguments say what to give in their help text instead (tests/test_cli_help.py checks it).
if hasattr(typer.core, "TyperArgument"):
    typer.core.TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]

app = typer.Typer(
    name="strata",
    help="Local inference shell for large Mixture-of-Experts models.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain help: option names are never cut and lines wrap to the terminal (80 columns included)
    rich_markup_mode=None,
)


def fail(message: str, code: ExitCode = ExitCode.ERROR) -> "typer.Exit":
    """Print one line on stderr and return an Exit to raise: `raise fail("...", ExitCode.MODEL)`."""
    diagnostics.error(message)
    return typer.Exit(int(code))


# Command modules register themselves on `app` when imported: one module per command, so that
# no file must change for every command (shared options and helpers: options.py, common.py).
from . import (bench_cmd, chat_cmd, convert_cmd, edit_cmd, info_cmd, paths_cmd,  # noqa: E402,F401
               replay_cmd, run_cmd, sessions_cmd, version_cmd)


def main() -> None:
    from .runner import run_app

    run_app(app)
