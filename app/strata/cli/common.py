"""What the commands share: option declarations, the settings a command line asks for, the session
store, the generator, the TUI launcher and the streamed-output echo. Each command lives in its own
module (`chat_cmd`, `edit_cmd`, ...) and registers itself on `strata.cli.app`.

Commands call these helpers through the module (`common.open_store()`), so a test can replace one.
"""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import typer

from .. import diagnostics
from ..settings import GenerationSettings
from .options import StreamOptions

ModelOpt = typer.Option(None, "--model", "-m", metavar="MODEL", help="Model folder, pack or .gguf file, or a bundled alias (default: strata-tiny).")
JsonOpt = typer.Option(False, "--json", help="Print data as JSON on stdout.")
DraftOpt = typer.Option(None, "--draft", metavar="none|suffix",
                        help="Drafting: suffix lookup (default) or none; output is the same.")
TempOpt = typer.Option(None, "--temperature", "-t", metavar="T", help="Sampling temperature, 0..5 (0 = greedy).")
SeedOpt = typer.Option(None, "--seed", metavar="N", help="Sampling seed (sampled output is reproducible).")
MaxNewOpt = typer.Option(None, "--max-new", metavar="N", help="Most tokens to generate per turn.")
MaxDraftOpt = typer.Option(None, "--max-draft", metavar="K", help="Fixed draft length 0..15 (default: adaptive).")
CopyBiasOpt = typer.Option(None, "--copy-bias", metavar="B",
                           help="Add B to the logit of the token that goes on copying the session's text "
                                "(0 = off; strata edit's default 2).")
NoSaveOpt = typer.Option(False, "--no-save", help="Do not record this session in the session store.")
ThreadsOpt = typer.Option(None, "--threads", metavar="N", help="Engine threads (default: one per physical core, one left free above 4).")
CheckpointsOpt = typer.Option(None, "--checkpoints", metavar="N", help="Engine snapshots kept for undo/retry (default 8).")




def set_checkpoints(n: int | None) -> None:
    """--checkpoints N for every ring of this process; without it, $STRATA_CHECKPOINTS is checked
    here, before a model is loaded (exit 2 for a bad value)."""
    from ..settings import check_int
    from ..store.ring import ENV_KEY, MAX_CAPACITY, env_capacity

    if n is None:
        env_capacity()
        return

    n = check_int("checkpoints", n, 1, MAX_CAPACITY)

    os.environ[ENV_KEY] = str(n)  # read by every checkpoint ring of this process, TUI included


def interactive(no_input: bool) -> bool:
    return not no_input and sys.stdin.isatty() and sys.stdout.isatty()


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def settings(base: GenerationSettings | None = None, **changes: Any) -> GenerationSettings:
    """The base settings with the options that were given (validated by GenerationSettings)."""
    return (base or GenerationSettings()).replace(**changes)


def open_store(no_save: bool = False):
    if no_save:
        return None
    from ..store import SessionStore

    return SessionStore()


def generator(model: str | None, threads: int | None = None, stream: StreamOptions | None = None):
    from ..runtime import open_generator

    stream = stream or StreamOptions()
    diagnostics.progress(f"loading {model or 'the default model'} ...")
    gen = open_generator(model, threads=threads, **stream.engine_kwargs())
    stream.note()  # one stderr line when cache-aware routing makes the output approximate
    return gen


def launch_tui(generator, **kwargs: Any) -> int:
    from ..tui.app import StrataApp  # lazily: the headless paths never import textual

    tui = StrataApp(generator, **kwargs)
    tui.run()
    return int(tui.return_code or 0)


class Stream:
    """Writes streamed text to stdout as it arrives; the counting is strata.telemetry's."""

    def __init__(self, echo: bool) -> None:
        from ..telemetry import Collector

        self.echo = echo
        self.rec = Collector()
        self.started = time.perf_counter()

    def __call__(self, ev) -> None:
        if self.echo and ev.text:
            sys.stdout.write(ev.text)
            sys.stdout.flush()
        self.rec.add(ev)

    @property
    def windows(self) -> int:
        return len(self.rec.windows)

    @property
    def tokens(self) -> int:
        return len(self.rec.tokens)

    def summary(self) -> dict[str, Any]:
        s = self.rec.summary()
        return {"tokens": self.tokens, "windows": self.windows,
                "tokens_per_window": round(s.tokens_per_window, 3), "acceptance": round(s.acceptance, 3),
                "seconds": round(time.perf_counter() - self.started, 3)}
