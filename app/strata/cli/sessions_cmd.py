"""`strata sessions list|show|export|import|delete`: the recorded sessions."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Optional

import typer

from .. import diagnostics
from ..telemetry import plural
from . import ExitCode, app, common
from .common import JsonOpt
from ..errors import UsageError


sessions_app = typer.Typer(help="List, show, export, import and delete recorded sessions.",
                           no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@sessions_app.command("list")
def sessions_list(limit: int = typer.Option(50, "--limit", "-n", metavar="N", help="Most sessions to list."),
                  kind: Optional[str] = typer.Option(None, "--kind", metavar="chat|edit", help="Only sessions of this kind."),
                  as_json: bool = JsonOpt) -> None:
    """List recorded sessions, most recent first."""
    if kind is not None and kind not in ("chat", "edit"):
        raise UsageError(f"--kind must be chat or edit, not {kind!r}")
    from ..settings import check_int

    rows = common.open_store().list_sessions(limit=check_int("limit", limit, 1, 1 << 30), kind=kind)
    if as_json:
        common.print_json([r.to_dict() for r in rows])
        return
    if not rows:
        diagnostics.say("no recorded sessions")
        return
    for r in rows:
        print(f"{r.id}  {r.kind:<4}  {_when(r.updated_at)}  {plural(r.n_turns, 'turn'):>9}  "
              f"{r.model_name or '?':<16}  {r.title or ''}".rstrip())


@sessions_app.command("show")
def sessions_show(session_id: str = typer.Argument(..., metavar="ID", help="Session id or unique prefix."),
                  as_json: bool = JsonOpt) -> None:
    """Show one session's turns."""
    from ..edit import edit_statuses

    store = common.open_store()
    info = store.get_session(session_id)
    turns = store.turns(info.id)
    status = edit_statuses(store, info.id)
    if as_json:
        windows = store.windows(info.id)
        data = info.to_dict()
        data["turns"] = [{"index": t.index, "input": t.input, "instruction": t.instruction,
                          "file": t.file_path, "output": t.output, "stop_reason": t.stop_reason,
                          "edit": status.get(t.index),
                          "windows": sum(1 for w in windows if w[0] == t.index)} for t in turns]
        data["edits"] = [{**e.__dict__, "status": status.get(e.turn_idx, e.status)} for e in store.edits(info.id)]
        common.print_json(data)
        return
    print(f"session {info.id} ({info.kind}) {info.title or ''}".rstrip())
    print(f"model: {info.model_name} ({info.model_id})")
    print(f"created: {_when(info.created_at)}  updated: {_when(info.updated_at)}")
    if status:
        counts = {k: list(status.values()).count(k) for k in ("accepted", "rejected", "undone", "proposed", "unchanged")}
        print("edits: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n))
    for t in turns:
        label = f"[{t.file_path}] {t.instruction}" if t.file_path else t.input
        state = f", {status[t.index]}" if t.index in status else ""
        print(f"\n--- turn {t.index} ({t.stop_reason or '?'}{state})\n> {label}\n{t.output}")


@sessions_app.command("export")
def sessions_export(session_id: str = typer.Argument(..., metavar="ID", help="Session id or unique prefix."),
                    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="File to write (default: stdout)."),
                    force: bool = typer.Option(False, "--force", help="Replace an existing output file.")) -> None:
    """Export a session as JSONL (docs/session-format.md)."""
    from ..session_format import recording_from_store, write_session_file, write_session_stream

    rec = recording_from_store(common.open_store(), session_id)
    if output is None or str(output) == "-":
        write_session_stream(rec, sys.stdout)
    else:
        write_session_file(rec, output, overwrite=force)
        diagnostics.say(f"wrote {output} ({plural(len(rec.turns), 'turn')})")


@sessions_app.command("import")
def sessions_import(file: Path = typer.Argument(..., metavar="FILE", help="A session file (JSONL)."),
                    as_json: bool = JsonOpt) -> None:
    """Import a JSONL session file into the session store."""
    from ..session_format import import_session, read_session_file

    rec = read_session_file(file)
    result = import_session(common.open_store(), rec)
    sid = result.session_id
    if as_json:
        common.print_json({"session": sid, "turns": len(rec.turns), "kind": rec.kind, "created": result.created})
    else:
        if not result.created:
            diagnostics.say(f"{file}: already in the store as session {sid}; nothing imported")
        print(sid)


@sessions_app.command("delete")
def sessions_delete(session_id: str = typer.Argument(..., metavar="ID", help="Session id or unique prefix."),
                    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask.")) -> None:
    """Delete a session, its telemetry and its checkpoints."""
    store = common.open_store()
    info = store.get_session(session_id)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("refusing to delete without --yes when stdin is not a terminal")
        if not typer.confirm(f"delete session {info.id} ({info.kind}, {plural(info.n_turns, 'turn')})?", err=True):
            raise typer.Exit(int(ExitCode.OK))
    store.delete_session(info.id)
    diagnostics.say(f"deleted session {info.id}")
