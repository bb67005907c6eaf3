"""`strata replay SESSION`: re-run a recorded session and compare with the recording."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from .. import diagnostics
from . import ExitCode, app, common
from .common import DraftOpt, JsonOpt, MaxDraftOpt, ModelOpt, SeedOpt, TempOpt, ThreadsOpt
from .options import BackendOpt, EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions


@app.command(short_help="Re-run a recorded session and compare with it.")
def replay(
    session: str = typer.Argument(..., metavar="SESSION", help="A session file (.jsonl) or a recorded session id."),
    draft: Optional[str] = DraftOpt,
    compare: bool = typer.Option(False, "--compare", help="Report whether outputs are identical to the recording (exit 7 if not)."),
    model: Optional[str] = ModelOpt,
    temperature: Optional[float] = TempOpt, seed: Optional[int] = SeedOpt, max_draft: Optional[int] = MaxDraftOpt,
    no_input: bool = typer.Option(False, "--no-input", help="Never open the TUI."),
    threads: Optional[int] = ThreadsOpt, expert_cache: Optional[str] = ExpertCacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    backend: Optional[str] = BackendOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Re-run a recorded session's inputs with the recorded (or overridden) settings."""
    from ..replay import Replay, load_recording, names_a_file

    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing, backend)
    store = None
    if not names_a_file(session):
        store = common.open_store()
    recording = load_recording(session, store)
    overrides: dict[str, Any] = {}
    for key, value in (("draft", draft), ("temperature", temperature), ("seed", seed), ("max_draft", max_draft)):
        if value is not None:
            overrides[key] = value
    common.settings(draft=draft, temperature=temperature, seed=seed, max_draft=max_draft)  # validate
    if model is None and recording.model.get("path") and Path(str(recording.model["path"])).exists():
        model = str(recording.model["path"])
    gen = common.generator(model, threads, stream_opts)
    rep = Replay(gen, recording, overrides)
    if not rep.report.same_model:
        diagnostics.note(f"{recording.source} was recorded with {recording.model.get('name', '?')}; "
                f"replaying with {gen.model_name}")
    if common.interactive(no_input) and not as_json and not compare:
        raise typer.Exit(common.launch_tui(gen, mode="replay", settings=recording.generation_settings, replay=rep))
    echo = not as_json and not compare
    last_turn = -1
    for index, ev in rep.events():
        if echo:
            if index != last_turn:
                sys.stdout.write(f"\n--- turn {index}\n" if last_turn >= 0 else f"--- turn {index}\n")
                last_turn = index
            sys.stdout.write(ev.text)
            sys.stdout.flush()
    report = rep.report
    if as_json:
        common.print_json(report.to_dict())
    else:
        if echo:
            sys.stdout.write("\n")
        out = sys.stdout if compare else sys.stderr
        for line in report.lines():
            print(line, file=out)
    if compare and not report.identical:
        raise typer.Exit(int(ExitCode.MISMATCH))
