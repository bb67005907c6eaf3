"""`strata edit FILE`: rewrite a file under an instruction, review the diff, accept or reject."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .. import diagnostics
from . import app, common
from .common import (CheckpointsOpt, DraftOpt, JsonOpt, MaxDraftOpt, ModelOpt, NoSaveOpt, SeedOpt, TempOpt, ThreadsOpt)
from .options import EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions
from ..errors import UsageError


@app.command(short_help="Rewrite a file under an instruction; review the diff.")
def edit(
    file: Path = typer.Argument(..., metavar="FILE", help="The file to rewrite."),
    instruction: Optional[str] = typer.Option(None, "--instruction", "-i", metavar="WHAT",
                                              help="What to change (asked for in the TUI when not given)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Headless: write the rewrite without asking."),
    no_input: bool = typer.Option(False, "--no-input", help="Headless: print the diff, write nothing (unless --yes)."),
    model: Optional[str] = ModelOpt,
    draft: Optional[str] = DraftOpt, temperature: Optional[float] = TempOpt, seed: Optional[int] = SeedOpt,
    max_draft: Optional[int] = MaxDraftOpt, no_save: bool = NoSaveOpt,
    checkpoints: Optional[int] = CheckpointsOpt, threads: Optional[int] = ThreadsOpt,
    expert_cache: Optional[str] = ExpertCacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Rewrite FILE under an instruction, review the diff, accept or reject."""
    from ..edit import EditSession, read_text_file

    common.set_checkpoints(checkpoints)
    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing)
    read_text_file(file)  # refuse binary / non-UTF-8 / too large before loading a model
    settings = common.settings(draft=draft, temperature=temperature, seed=seed, max_draft=max_draft)
    headless = yes or no_input or not common.interactive(False) or as_json
    if not headless:
        gen = common.generator(model, threads, stream_opts)
        raise typer.Exit(common.launch_tui(gen, mode="edit", settings=settings, store=common.open_store(no_save),
                                     edit_path=file, instruction=instruction))
    if not instruction or not instruction.strip():
        raise UsageError("--instruction is required when editing without the TUI (--yes/--no-input or no terminal)")
    gen = common.generator(model, threads, stream_opts)
    store = common.open_store(no_save)
    session = EditSession(gen, file, settings, store=store)
    stream = common.Stream(echo=False)
    for ev in session.propose(instruction):
        stream(ev)
        _progress_partial(stream)
    proposal = session.proposal
    assert proposal is not None
    diff = session.diff()
    hunks = session.hunks()
    written = False
    if yes and diff:
        session.accept()  # EditError (one line) when incomplete or changed on disk
        written = True
    elif diff:
        session.reject()
    if as_json:
        common.print_json({"path": str(file), "session": session.session_id, "changed": bool(diff),
                     "written": written, "hunks": len(hunks),
                     "added": sum(h.added for h in hunks), "removed": sum(h.removed for h in hunks),
                     "stop_reason": proposal.stop_reason, "diff": diff, **stream.summary(),
                     "approximate": stream_opts.approximate})
        return
    sys.stdout.write(diff)
    sys.stdout.flush()
    if not diff:
        diagnostics.say(f"{file}: the rewrite changes nothing")
    elif written:
        diagnostics.say(f"{file}: written ({len(hunks)} hunk{'' if len(hunks) == 1 else 's'})")
    else:
        diagnostics.say(f"{file}: not written (pass --yes to write)")


def _progress_partial(stream: common.Stream) -> None:
    if stream.windows % 32 == 0:
        diagnostics.progress(f"{stream.tokens} tokens", inline=True)
