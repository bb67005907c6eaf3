"""`strata edit FILE`: rewrite a file under an instruction, review the diff, accept or reject."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .. import diagnostics
from . import app, common
from .common import (CheckpointsOpt, CopyBiasOpt, DraftOpt, JsonOpt, MaxDraftOpt, ModelOpt, NoSaveOpt, SeedOpt, TempOpt, ThreadsOpt)
from .options import BackendOpt, EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions
from ..errors import UsageError


@app.command(short_help="Rewrite a file under an instruction; review the diff.")
def edit(
    file: Optional[Path] = typer.Argument(None, metavar="FILE",
                                          help="The file to rewrite (with --session: the session's file)."),
    instruction: Optional[str] = typer.Option(None, "--instruction", "-i", metavar="WHAT",
                                              help="What to change (asked for in the TUI when not given)."),
    session: Optional[str] = typer.Option(None, "--session", "-s", metavar="ID",
                                          help="Resume a recorded edit session."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Headless: write the rewrite without asking."),
    no_input: bool = typer.Option(False, "--no-input", help="Headless: print the diff, write nothing (unless --yes)."),
    model: Optional[str] = ModelOpt,
    draft: Optional[str] = DraftOpt, temperature: Optional[float] = TempOpt, seed: Optional[int] = SeedOpt,
    max_draft: Optional[int] = MaxDraftOpt, copy_bias: Optional[float] = CopyBiasOpt, no_save: bool = NoSaveOpt,
    checkpoints: Optional[int] = CheckpointsOpt, threads: Optional[int] = ThreadsOpt,
    expert_cache: Optional[str] = ExpertCacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    backend: Optional[str] = BackendOpt,
    force: bool = typer.Option(False, "--force", help="Write even a rewrite that no longer parses, "
                               "deletes most of the file or drops a definition the instruction does not "
                               "name; rewrite a hard-linked file in place."),
    as_json: bool = JsonOpt,
) -> None:
    """Rewrite FILE under an instruction, review the diff, accept or reject."""
    from ..edit import EditSession, read_text_file, stored_edit_file
    from ..errors import EditError
    from ..filesafety import write_target

    if session is not None and no_save:
        raise UsageError("--session and --no-save do not go together")
    if file is None:
        if session is None:
            raise UsageError("give the FILE to edit, or --session ID to resume a recorded edit")
        file = stored_edit_file(common.open_store(), session)
    common.set_checkpoints(checkpoints)
    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing, backend)
    read_text_file(file)  # refuse binary / non-UTF-8 / too large before loading a model
    refusal = write_target(file, force=force).refusal
    if yes and refusal:
        raise EditError(refusal)  # before loading a model: --yes could never write it
    settings = common.settings(draft=draft, temperature=temperature, seed=seed, max_draft=max_draft,
                               copy_bias=copy_bias)
    headless = yes or no_input or not common.interactive(False) or as_json
    if not headless:
        gen = common.generator(model, threads, stream_opts)
        raise typer.Exit(common.launch_tui(gen, mode="edit", settings=settings, store=common.open_store(no_save),
                                     edit_path=file, instruction=instruction, force=force,
                                     session_id=session))
    if not instruction or not instruction.strip():
        raise UsageError("--instruction is required when editing without the TUI (--yes/--no-input or no terminal)")
    gen = common.generator(model, threads, stream_opts)
    store = common.open_store(no_save)
    session_id = session
    session = EditSession(gen, file, settings, store=store, force=force, session_id=session_id)
    for note in session.notes:
        diagnostics.say(f"note: {note}")
    stream = common.Stream(echo=False)
    for ev in session.propose(instruction):
        stream(ev)
        _progress_partial(stream)
    proposal = session.proposal
    assert proposal is not None
    diff = session.diff()
    hunks = session.hunks()
    written = False
    refused: Optional[EditError] = None
    if yes and diff:
        try:
            session.accept(force=force)
            written = True
        except EditError as exc:  # incomplete, changed on disk, or broken without --force
            refused = exc
            session.reject()  # recorded as rejected, not left "proposed"
    elif diff:
        session.reject()
    if as_json:
        common.print_json({"path": str(file), "session": session.session_id, "changed": bool(diff),
                     "written": written, "hunks": len(hunks),
                     "added": sum(h.added for h in hunks), "removed": sum(h.removed for h in hunks),
                     "stop_reason": proposal.stop_reason, "warnings": proposal.warnings,
                     "notes": proposal.notes, "diff": diff, **stream.summary(),
                     "approximate": stream_opts.approximate, "refused": str(refused) if refused else None})
        if refused:
            raise refused
        return
    sys.stdout.write(diff)  # also when --yes was refused: the user sees what was not written
    sys.stdout.flush()
    for warning in proposal.warnings if diff else ():  # nothing to write: "changes nothing" says it
        if not (refused and warning in str(refused)):  # the error line names it already
            diagnostics.say(f"warning: {session.display_path}: {warning}")
    for note in proposal.notes:
        diagnostics.say(f"note: {session.display_path}: {note}")
    if refused:
        raise refused
    if not diff:
        diagnostics.say(f"{session.display_path}: the rewrite changes nothing")
    elif written:
        diagnostics.say(f"{file}: written ({len(hunks)} hunk{'' if len(hunks) == 1 else 's'})")
    else:
        diagnostics.say(f"{file}: not written (pass --yes to write)")


def _progress_partial(stream: common.Stream) -> None:
    if stream.windows % 32 == 0:
        diagnostics.progress(f"{stream.tokens} tokens", inline=True)
