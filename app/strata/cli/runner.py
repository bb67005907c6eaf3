"""Runs the Typer app: one-line errors on stderr, exit codes, --debug, Ctrl-C -> 130. (owner: shell)

Errors a user can act on are StrataError subclasses; each maps to one ExitCode and prints
one line. Anything else is a bug: one line too, and a traceback only with --debug or
STRATA_DEBUG=1.
"""
from __future__ import annotations

import os
import sys
import traceback

from .. import diagnostics
from ..errors import EditError, ModelError, SessionError, StrataError, UsageError, WindowError

_CODES = (
    (UsageError, "USAGE"),
    (ModelError, "MODEL"),
    (SessionError, "SESSION"),
    (EditError, "EDIT"),
    (WindowError, "ERROR"),
)


def exit_code_for(exc: BaseException) -> int:
    from . import ExitCode

    for cls, name in _CODES:
        if isinstance(exc, cls):
            return int(ExitCode[name])
    if isinstance(exc, OSError):
        return int(ExitCode.IO)
    return int(ExitCode.ERROR)


from ..diagnostics import error  # noqa: E402 (one writer of stderr)


def _take_debug(argv: list[str]) -> tuple[list[str], bool]:
    # --debug is global: accepted anywhere before a "--"
    out, debug, rest = [], False, False
    for arg in argv:
        if not rest and arg == "--debug":
            debug = True
            continue
        if arg == "--":
            rest = True
        out.append(arg)
    return out, debug


def _click_exceptions() -> tuple[tuple[type, ...], tuple[type, ...], tuple[type, ...], tuple[type, ...]]:
    """(ClickException, UsageError, Abort, Exit) classes of the click that Typer runs on: newer
    Typer vendors its own copy (typer._click), older ones use click itself."""
    import typer

    mods = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mods.append(__import__(name, fromlist=["ClickException"]))
        except ImportError:
            pass
    click_exc = tuple(m.ClickException for m in mods)
    usage = tuple(m.UsageError for m in mods)
    abort = tuple(getattr(m, "Abort") for m in mods if hasattr(m, "Abort")) + (typer.Abort,)
    exits = tuple(getattr(m, "Exit") for m in mods if hasattr(m, "Exit")) + (typer.Exit,)
    return click_exc, usage, abort, exits


def run_app(app, argv: list[str] | None = None) -> None:
    from . import ExitCode
    from ..diagnostics import debug_enabled

    click_exc, usage_exc, abort_exc, exit_exc = _click_exceptions()

    args, debug_flag = _take_debug(list(sys.argv[1:] if argv is None else argv))
    if debug_flag:
        os.environ["STRATA_DEBUG"] = "1"
    debug = debug_enabled()
    try:
        code = app(args=args, prog_name="strata", standalone_mode=False)
        if code == int(ExitCode.INTERRUPTED):
            # Typer turns Ctrl-C inside a command into Exit(130) without a word
            diagnostics.say("interrupted")
    except StrataError as exc:
        if debug:
            traceback.print_exc()
        error(str(exc))
        code = exit_code_for(exc)
    except exit_exc as exc:
        code = int(getattr(exc, "exit_code", getattr(exc, "code", 0)) or 0)
    except abort_exc:
        diagnostics.say("interrupted")
        code = int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        diagnostics.say("interrupted")
        code = int(ExitCode.INTERRUPTED)
    except click_exc as exc:  # bad options, missing arguments
        if debug:
            traceback.print_exc()
        hint = ""
        ctx = getattr(exc, "ctx", None)
        if ctx is not None:
            hint = f" (see `{ctx.command_path} --help`)"
        message = exc.format_message()
        if type(exc).__name__ == "NoArgsIsHelpError":  # `strata sessions`: its help, laid out as click shows it
            sys.stderr.write(message.rstrip("\n") + "\n")
        elif message:  # empty for "no args is help" in older click: the help was printed already
            error(message + hint)
        code = int(ExitCode.USAGE) if isinstance(exc, usage_exc) else int(exc.exit_code)
    except SystemExit as exc:
        # typer answers a broken pipe inside a command (`strata chat --message hi | head -c 5`)
        # with sys.exit(1), a bug's code, after wrapping stdout in click's PacifyFlushWrapper:
        # the reader going away is not an error (as BrokenPipeError below)
        if type(sys.stdout).__name__ != "PacifyFlushWrapper":
            raise
        code = int(ExitCode.OK) if exc.code == 1 else exc.code
    except BrokenPipeError:
        # the reader went away (`strata sessions list | head`): not an error worth a traceback
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        code = int(ExitCode.OK)
    except OSError as exc:
        if debug:
            traceback.print_exc()
        where = f"{exc.filename}: " if exc.filename else ""
        error(f"{where}{exc.strerror or exc}")
        code = int(ExitCode.IO)
    except Exception as exc:  # noqa: BLE001 - a bug: say so in one line
        if debug:
            traceback.print_exc()
            error(f"internal error: {exc.__class__.__name__}: {exc}")
        else:
            error(f"internal error: {exc.__class__.__name__}: {exc} (run with --debug for a traceback)")
        code = int(ExitCode.ERROR)
    sys.exit(int(code or 0) if isinstance(code, int) else 0)
