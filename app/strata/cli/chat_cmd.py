"""`strata chat` (and `strata` alone): the chat TUI, or headless with --message or piped stdin."""
from __future__ import annotations

import os
import sys
from typing import List, Optional

import typer

from .. import diagnostics
from . import app, common
from .common import (CheckpointsOpt, CopyBiasOpt, DraftOpt, JsonOpt, MaxDraftOpt, MaxNewOpt, ModelOpt, NoSaveOpt,
                     SeedOpt, TempOpt, ThreadsOpt)
from .options import BackendOpt, EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions
from ..errors import UsageError
from ..settings import GenerationSettings
from ..telemetry import plural


def _print_version(value: bool) -> None:
    if value:
        from .version_cmd import version

        version(as_json=False)
        raise typer.Exit(0)


@app.callback(invoke_without_command=True)
def _main(ctx: typer.Context,
          debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors (also STRATA_DEBUG=1)."),
          _version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                        help="Print strata's version and exit (as strata version)."),
          model: Optional[str] = typer.Option(None, "--model", "-m", metavar="MODEL",
                                              help="Model for the default chat."),
          ) -> None:
    """Local inference shell for large Mixture-of-Experts models. Without a command: chat."""
    if debug:
        os.environ["STRATA_DEBUG"] = "1"
    if ctx.invoked_subcommand is None:
        chat(model=model, session=None, message=None, system=None, no_input=False, draft=None,
             temperature=None, seed=None, max_new=None, max_draft=None, copy_bias=None, no_save=False,
             checkpoints=None, threads=None, expert_cache=None, io_mode=None, eviction=None,
             readahead=None, routing=None, backend=None, as_json=False)
    elif model is not None:
        raise UsageError("give --model after the command name (strata chat --model ...)")


@app.command(short_help="Chat with the model (the TUI, or headless).")
def chat(
    model: Optional[str] = ModelOpt,
    session: Optional[str] = typer.Option(None, "--session", "-s", metavar="ID", help="Resume a recorded chat session."),
    message: Optional[List[str]] = typer.Option(None, "--message", metavar="MESSAGE", help="Send this message (repeatable); implies headless."),
    system: Optional[str] = typer.Option(None, "--system", metavar="PROMPT", help="System prompt for a new chat."),
    no_input: bool = typer.Option(False, "--no-input", help="Never open the TUI; read the message from stdin."),
    draft: Optional[str] = DraftOpt, temperature: Optional[float] = TempOpt, seed: Optional[int] = SeedOpt,
    max_new: Optional[int] = MaxNewOpt, max_draft: Optional[int] = MaxDraftOpt,
    copy_bias: Optional[float] = CopyBiasOpt, no_save: bool = NoSaveOpt, checkpoints: Optional[int] = CheckpointsOpt,
    threads: Optional[int] = ThreadsOpt, expert_cache: Optional[str] = ExpertCacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    backend: Optional[str] = BackendOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Chat with the model (the TUI when interactive; headless with --message or piped stdin)."""
    common.set_checkpoints(checkpoints)
    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing, backend)
    if no_save and session:
        raise UsageError("--session and --no-save do not go together")
    store = common.open_store(no_save)
    base = None
    if session and store is not None:
        base = GenerationSettings.from_dict(store.get_session(session).settings)
    settings = common.settings(base, draft=draft, temperature=temperature, seed=seed, max_new=max_new,
                         max_draft=max_draft, copy_bias=copy_bias)
    if not message and common.interactive(no_input):
        gen = common.generator(model, threads, stream_opts)
        raise typer.Exit(common.launch_tui(gen, mode="chat", settings=settings, store=store, session_id=session))
    texts = list(message or [])
    if not texts:
        from ..textcheck import read_input

        if sys.stdin is not None and sys.stdin.isatty():  # stdout is a pipe: headless, but a person types
            diagnostics.note("reading the message from the terminal; end it with Ctrl-D")
        data = read_input(sys.stdin, "the message on stdin")
        if not data.strip():
            raise UsageError("no message: pass --message TEXT or pipe the message on stdin")
        texts = [data.rstrip("\n")]
    from ..chat import ChatSession

    gen = common.generator(model, threads, stream_opts)
    chat_session = ChatSession(gen, settings, store=store, session_id=session, system=system)
    results = []
    for text in texts:
        stream = common.Stream(echo=not as_json)
        for ev in chat_session.send(text, settings):
            stream(ev)
        turn = chat_session.turns[-1]
        if not as_json:
            sys.stdout.write("\n")
            if turn.stop_reason == "max_new" and settings.max_new > 0:  # a cut reply reads like a finished one
                diagnostics.note(f"the reply stopped at --max-new {settings.max_new} tokens, not at its end")
        results.append({"input": text, "output": turn.output, "stop_reason": turn.stop_reason,
                        **stream.summary()})
        diagnostics.progress(f"{plural(stream.tokens, 'token')} in {plural(stream.windows, 'window')}")
    if as_json:
        common.print_json({"session": chat_session.session_id, "turns": results,
                     "approximate": stream_opts.approximate})
    elif chat_session.session_id:
        diagnostics.progress(f"session {chat_session.session_id}")
