"""The shell's commands: chat (also `strata` alone), edit, replay, sessions, info, bench,
paths, version. Interactive chat/edit/replay open the TUI; with --yes/--no-input or a
non-terminal stdin they run headless. Data goes to stdout (JSON with --json); progress and
notes go to stderr, and progress only when stderr is a terminal.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, List, Optional

import typer

from . import ExitCode, app
from .options import EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions
from ..errors import EditError, SessionError, UsageError
from ..protocol import GenerationSettings

sessions_app = typer.Typer(help="List, show, export, import and delete recorded sessions.",
                           no_args_is_help=True)
app.add_typer(sessions_app, name="sessions")

ModelOpt = typer.Option(None, "--model", "-m", help="Model folder or pack, or a bundled alias (default: strata-tiny).")
JsonOpt = typer.Option(False, "--json", help="Print data as JSON on stdout.")
DraftOpt = typer.Option(None, "--draft", help="Drafting: none or suffix.")
TempOpt = typer.Option(None, "--temperature", "-t", help="Sampling temperature (0 = greedy).")
SeedOpt = typer.Option(None, "--seed", help="Sampling seed.")
MaxNewOpt = typer.Option(None, "--max-new", help="Most tokens to generate per turn.")
MaxDraftOpt = typer.Option(None, "--max-draft", help="Fixed draft length (default: adaptive).")
NoSaveOpt = typer.Option(False, "--no-save", help="Do not record this session in the session store.")
ThreadsOpt = typer.Option(None, "--threads", help="Engine threads (default: one per physical core, one left free above 4).")
CacheOpt = ExpertCacheOpt  # the streaming options live in cli/options.py (shared with `strata run`)
CheckpointsOpt = typer.Option(None, "--checkpoints", help="Engine snapshots kept for undo/retry (default 8).")


def _set_checkpoints(n: int | None) -> None:
    if n is None:
        return
    if n < 1:
        raise UsageError(f"--checkpoints must be at least 1, not {n}")
    from ..store.ring import ENV_KEY

    os.environ[ENV_KEY] = str(n)  # read by every checkpoint ring of this process, TUI included


# -- helpers -----------------------------------------------------------------------------------
def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


def _progress(msg: str) -> None:
    if sys.stderr.isatty():
        print(msg, file=sys.stderr)


def _interactive(no_input: bool) -> bool:
    return not no_input and sys.stdin.isatty() and sys.stdout.isatty()


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def _settings(base: GenerationSettings | None = None, *, draft: str | None = None,
              temperature: float | None = None, seed: int | None = None,
              max_new: int | None = None, max_draft: int | None = None) -> GenerationSettings:
    s = GenerationSettings.from_dict((base or GenerationSettings()).to_dict())
    if draft is not None:
        if draft not in ("none", "suffix"):
            raise UsageError(f"--draft must be none or suffix, not {draft!r}")
        s.draft = draft
    if temperature is not None:
        if temperature < 0:
            raise UsageError(f"--temperature must be >= 0, not {temperature}")
        s.temperature = temperature
    if seed is not None:
        s.seed = seed
    if max_new is not None:
        if max_new < 1:
            raise UsageError(f"--max-new must be at least 1, not {max_new}")
        s.max_new = max_new
    if max_draft is not None:
        if max_draft < 0:
            raise UsageError(f"--max-draft must be >= 0, not {max_draft}")
        s.max_draft = max_draft
    return s


def _open_store(no_save: bool = False):
    if no_save:
        return None
    from ..store import SessionStore

    return SessionStore()


def _generator(model: str | None, threads: int | None = None, stream: StreamOptions | None = None):
    from ..runtime import open_generator

    stream = stream or StreamOptions()
    _progress(f"strata: loading {model or 'the default model'} ...")
    gen = open_generator(model, threads=threads, **stream.engine_kwargs())
    stream.note()  # one stderr line when cache-aware routing makes the output approximate
    return gen


def _launch_tui(generator, **kwargs: Any) -> int:
    from ..tui.app import StrataApp  # lazily: the headless paths never import textual

    tui = StrataApp(generator, **kwargs)
    tui.run()
    return int(tui.return_code or 0)


class _Stream:
    """Writes streamed text to stdout as it arrives and keeps a window summary."""

    def __init__(self, echo: bool) -> None:
        self.echo = echo
        self.windows = self.tokens = self.accepted = self.drafted = 0
        self.started = time.perf_counter()

    def __call__(self, ev) -> None:
        if self.echo and ev.text:
            sys.stdout.write(ev.text)
            sys.stdout.flush()
        if ev.tokens:
            self.windows += 1
            self.tokens += len(ev.tokens)
            self.accepted += ev.stats.n_accept
            self.drafted += ev.stats.n_drafted

    def summary(self) -> dict[str, Any]:
        secs = time.perf_counter() - self.started
        return {"tokens": self.tokens, "windows": self.windows,
                "tokens_per_window": round(self.tokens / self.windows, 3) if self.windows else 0.0,
                "acceptance": round(self.accepted / self.drafted, 3) if self.drafted else 0.0,
                "seconds": round(secs, 3)}


# -- global options and default command ---------------------------------------------------------
@app.callback(invoke_without_command=True)
def _main(ctx: typer.Context,
          debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors (also STRATA_DEBUG=1)."),
          model: Optional[str] = typer.Option(None, "--model", "-m", help="Model for the default chat."),
          ) -> None:
    """Local inference shell for large Mixture-of-Experts models. Without a command: chat."""
    if debug:
        os.environ["STRATA_DEBUG"] = "1"
    if ctx.invoked_subcommand is None:
        chat(model=model, session=None, message=None, system=None, no_input=False, draft=None,
             temperature=None, seed=None, max_new=None, max_draft=None, no_save=False,
             checkpoints=None, threads=None, expert_cache=None, io_mode=None, eviction=None,
             readahead=None, routing=None, as_json=False)
    elif model is not None:
        raise UsageError("give --model after the command name (strata chat --model ...)")


# -- chat --------------------------------------------------------------------------------------
@app.command()
def chat(
    model: Optional[str] = ModelOpt,
    session: Optional[str] = typer.Option(None, "--session", "-s", help="Resume a recorded chat session."),
    message: Optional[List[str]] = typer.Option(None, "--message", help="Send this message (repeatable); implies headless."),
    system: Optional[str] = typer.Option(None, "--system", help="System prompt for a new chat."),
    no_input: bool = typer.Option(False, "--no-input", help="Never open the TUI; read the message from stdin."),
    draft: Optional[str] = DraftOpt, temperature: Optional[float] = TempOpt, seed: Optional[int] = SeedOpt,
    max_new: Optional[int] = MaxNewOpt, max_draft: Optional[int] = MaxDraftOpt,
    no_save: bool = NoSaveOpt, checkpoints: Optional[int] = CheckpointsOpt,
    threads: Optional[int] = ThreadsOpt, expert_cache: Optional[str] = CacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Chat with the model (the TUI when interactive; headless with --message or piped stdin)."""
    _set_checkpoints(checkpoints)
    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing)
    if no_save and session:
        raise UsageError("--session and --no-save do not go together")
    store = _open_store(no_save)
    base = None
    if session and store is not None:
        base = GenerationSettings.from_dict(store.get_session(session).settings)
    settings = _settings(base, draft=draft, temperature=temperature, seed=seed, max_new=max_new,
                         max_draft=max_draft)
    if not message and _interactive(no_input):
        gen = _generator(model, threads, stream_opts)
        raise typer.Exit(_launch_tui(gen, mode="chat", settings=settings, store=store, session_id=session))
    texts = list(message or [])
    if not texts:
        data = sys.stdin.read()
        if not data.strip():
            raise UsageError("no message: pass --message TEXT or pipe the message on stdin")
        texts = [data.rstrip("\n")]
    from ..chat import ChatSession

    gen = _generator(model, threads, stream_opts)
    chat_session = ChatSession(gen, settings, store=store, session_id=session, system=system)
    results = []
    for text in texts:
        stream = _Stream(echo=not as_json)
        for ev in chat_session.send(text, settings):
            stream(ev)
        turn = chat_session.turns[-1]
        if not as_json:
            sys.stdout.write("\n")
        results.append({"input": text, "output": turn.output, "stop_reason": turn.stop_reason,
                        **stream.summary()})
        _progress(f"strata: {stream.tokens} tokens in {stream.windows} windows")
    if as_json:
        _print_json({"session": chat_session.session_id, "turns": results,
                     "approximate": stream_opts.approximate})
    elif chat_session.session_id:
        _progress(f"strata: session {chat_session.session_id}")


# -- edit --------------------------------------------------------------------------------------
@app.command()
def edit(
    file: Path = typer.Argument(..., help="The file to rewrite."),
    instruction: Optional[str] = typer.Option(None, "--instruction", "-i", help="What to change."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Headless: write the rewrite without asking."),
    no_input: bool = typer.Option(False, "--no-input", help="Headless: print the diff, write nothing (unless --yes)."),
    model: Optional[str] = ModelOpt,
    draft: Optional[str] = DraftOpt, temperature: Optional[float] = TempOpt, seed: Optional[int] = SeedOpt,
    max_draft: Optional[int] = MaxDraftOpt, no_save: bool = NoSaveOpt,
    checkpoints: Optional[int] = CheckpointsOpt, threads: Optional[int] = ThreadsOpt,
    expert_cache: Optional[str] = CacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Rewrite FILE under an instruction, review the diff, accept or reject."""
    from ..edit import EditSession, read_text_file

    _set_checkpoints(checkpoints)
    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing)
    read_text_file(file)  # refuse binary / non-UTF-8 / too large before loading a model
    settings = _settings(draft=draft, temperature=temperature, seed=seed, max_draft=max_draft)
    headless = yes or no_input or not _interactive(False) or as_json
    if not headless:
        gen = _generator(model, threads, stream_opts)
        raise typer.Exit(_launch_tui(gen, mode="edit", settings=settings, store=_open_store(no_save),
                                     edit_path=file, instruction=instruction))
    if not instruction or not instruction.strip():
        raise UsageError("--instruction is required when editing without the TUI (--yes/--no-input or no terminal)")
    gen = _generator(model, threads, stream_opts)
    store = _open_store(no_save)
    session = EditSession(gen, file, settings, store=store)
    stream = _Stream(echo=False)
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
        _print_json({"path": str(file), "session": session.session_id, "changed": bool(diff),
                     "written": written, "hunks": len(hunks),
                     "added": sum(h.added for h in hunks), "removed": sum(h.removed for h in hunks),
                     "stop_reason": proposal.stop_reason, "diff": diff, **stream.summary(),
                     "approximate": stream_opts.approximate})
        return
    sys.stdout.write(diff)
    sys.stdout.flush()
    if not diff:
        _stderr(f"strata: {file}: the rewrite changes nothing")
    elif written:
        _stderr(f"strata: {file}: written ({len(hunks)} hunk{'' if len(hunks) == 1 else 's'})")
    else:
        _stderr(f"strata: {file}: not written (pass --yes to write)")


def _progress_partial(stream: _Stream) -> None:
    if sys.stderr.isatty() and stream.windows % 32 == 0:
        print(f"\rstrata: {stream.tokens} tokens", end="", file=sys.stderr, flush=True)


# -- replay ------------------------------------------------------------------------------------
@app.command()
def replay(
    session: str = typer.Argument(..., help="A session file (.jsonl) or a recorded session id."),
    draft: Optional[str] = DraftOpt,
    compare: bool = typer.Option(False, "--compare", help="Report whether outputs are identical to the recording (exit 7 if not)."),
    model: Optional[str] = ModelOpt,
    temperature: Optional[float] = TempOpt, seed: Optional[int] = SeedOpt, max_draft: Optional[int] = MaxDraftOpt,
    no_input: bool = typer.Option(False, "--no-input", help="Never open the TUI."),
    threads: Optional[int] = ThreadsOpt, expert_cache: Optional[str] = CacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Re-run a recorded session's inputs with the recorded (or overridden) settings."""
    from ..replay import Replay, load_recording

    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing)
    store = None
    if not Path(session).suffix == ".jsonl" and not Path(session).exists():
        store = _open_store()
    recording = load_recording(session, store)
    overrides: dict[str, Any] = {}
    for key, value in (("draft", draft), ("temperature", temperature), ("seed", seed), ("max_draft", max_draft)):
        if value is not None:
            overrides[key] = value
    _settings(draft=draft, temperature=temperature, seed=seed, max_draft=max_draft)  # validate
    if model is None and recording.model.get("path") and Path(str(recording.model["path"])).exists():
        model = str(recording.model["path"])
    gen = _generator(model, threads, stream_opts)
    rep = Replay(gen, recording, overrides)
    if not rep.report.same_model:
        _stderr(f"strata: note: {recording.source} was recorded with {recording.model.get('name', '?')}; "
                f"replaying with {gen.model_name}")
    if _interactive(no_input) and not as_json and not compare:
        raise typer.Exit(_launch_tui(gen, mode="replay", settings=recording.generation_settings, replay=rep))
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
        _print_json(report.to_dict())
    else:
        if echo:
            sys.stdout.write("\n")
        out = sys.stdout if compare else sys.stderr
        for line in report.lines():
            print(line, file=out)
    if compare and not report.identical:
        raise typer.Exit(int(ExitCode.MISMATCH))


# -- sessions ----------------------------------------------------------------------------------
def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


@sessions_app.command("list")
def sessions_list(limit: int = typer.Option(50, "--limit", "-n", help="Most sessions to list."),
                  kind: Optional[str] = typer.Option(None, "--kind", help="chat or edit."),
                  as_json: bool = JsonOpt) -> None:
    """List recorded sessions, most recent first."""
    if kind is not None and kind not in ("chat", "edit"):
        raise UsageError(f"--kind must be chat or edit, not {kind!r}")
    rows = _open_store().list_sessions(limit=limit, kind=kind)
    if as_json:
        _print_json([r.to_dict() for r in rows])
        return
    if not rows:
        _stderr("strata: no recorded sessions")
        return
    for r in rows:
        print(f"{r.id}  {r.kind:<4}  {_when(r.updated_at)}  {r.n_turns:>3} turns  "
              f"{r.model_name or '?':<16}  {r.title or ''}".rstrip())


@sessions_app.command("show")
def sessions_show(session_id: str = typer.Argument(..., help="Session id or unique prefix."),
                  as_json: bool = JsonOpt) -> None:
    """Show one session's turns."""
    store = _open_store()
    info = store.get_session(session_id)
    turns = store.turns(info.id)
    if as_json:
        windows = store.windows(info.id)
        data = info.to_dict()
        data["turns"] = [{"index": t.index, "input": t.input, "instruction": t.instruction,
                          "file": t.file_path, "output": t.output, "stop_reason": t.stop_reason,
                          "windows": sum(1 for w in windows if w[0] == t.index)} for t in turns]
        data["edits"] = [e.__dict__ for e in store.edits(info.id)]
        _print_json(data)
        return
    print(f"session {info.id} ({info.kind}) {info.title or ''}".rstrip())
    print(f"model: {info.model_name} ({info.model_id})")
    print(f"created: {_when(info.created_at)}  updated: {_when(info.updated_at)}")
    for t in turns:
        label = f"[{t.file_path}] {t.instruction}" if t.file_path else t.input
        print(f"\n--- turn {t.index} ({t.stop_reason or '?'})\n> {label}\n{t.output}")


@sessions_app.command("export")
def sessions_export(session_id: str = typer.Argument(..., help="Session id or unique prefix."),
                    output: Optional[Path] = typer.Option(None, "--output", "-o", help="File to write (default: stdout)."),
                    force: bool = typer.Option(False, "--force", help="Replace an existing output file.")) -> None:
    """Export a session as JSONL (docs/session-format.md)."""
    from ..session_format import recording_from_store, write_session_file, write_session_stream

    rec = recording_from_store(_open_store(), session_id)
    if output is None or str(output) == "-":
        write_session_stream(rec, sys.stdout)
    else:
        write_session_file(rec, output, overwrite=force)
        _stderr(f"strata: wrote {output} ({len(rec.turns)} turns)")


@sessions_app.command("import")
def sessions_import(file: Path = typer.Argument(..., help="A session file (JSONL)."),
                    as_json: bool = JsonOpt) -> None:
    """Import a JSONL session file into the session store."""
    from ..session_format import import_recording, read_session_file

    rec = read_session_file(file)
    sid = import_recording(_open_store(), rec)
    if as_json:
        _print_json({"session": sid, "turns": len(rec.turns), "kind": rec.kind})
    else:
        print(sid)


@sessions_app.command("delete")
def sessions_delete(session_id: str = typer.Argument(..., help="Session id or unique prefix."),
                    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask.")) -> None:
    """Delete a session, its telemetry and its checkpoints."""
    store = _open_store()
    info = store.get_session(session_id)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError("refusing to delete without --yes when stdin is not a terminal")
        if not typer.confirm(f"delete session {info.id} ({info.kind}, {info.n_turns} turns)?", err=True):
            raise typer.Exit(int(ExitCode.OK))
    store.delete_session(info.id)
    _stderr(f"strata: deleted session {info.id}")


# -- info, bench, paths, version ----------------------------------------------------------------
def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)


@app.command()
def info(model: str = typer.Argument(..., help="Model folder, pack, or bundled alias."), as_json: bool = JsonOpt) -> None:
    """Show a model's metadata (config, tensors, size) without loading it."""
    from ..runtime import model_info

    data = model_info(model)
    if as_json:
        _print_json(data)
        return
    p = data.get("params") or 0
    print(f"{data['path']}")
    print(f"  format        {data['format']}")
    print(f"  type          {data.get('model_type')}")
    print(f"  layers        {data.get('layers')}" + (f"  {data['layer_types']}" if data.get("layer_types") else ""))
    print(f"  experts       {data.get('experts')} (top-{data.get('experts_per_token')})")
    print(f"  params        {p:,} ({p / 1e9:.2f} B)" if p >= 1e9 else f"  params        {p:,} ({p / 1e6:.1f} M)")
    print(f"  dtype         {data.get('dtype')}")
    print(f"  size on disk  {_human(data.get('size_on_disk') or 0)}")
    io = data.get("pack_io")
    if io:  # what decides a pack's IO (see docs/streaming.md)
        print(f"  experts file  {io['experts_file']}: {io['moe_layers']} MoE layers x {io['experts_per_layer']} "
              f"experts, one {io['expert_dtype']} blob of {_human(io['blob_bytes'])} each "
              f"(stride {_human(io['blob_stride'])}), {_human(data.get('expert_bytes') or 0)} in all")
        print(f"  dense file    {io['dense_file']}: {_human(io['dense_bytes'])} (always resident)")
        print(f"  per layer     all experts {_human(io['layer_bytes'])}; "
              f"one token's top-{data.get('experts_per_token')} {_human(io['topk_bytes_per_layer'])}")
        direct = {True: "yes (--io-mode direct reads around the page cache)",
                  False: "no, this file system refuses it (--io-mode direct falls back to buffered "
                         "reads plus a drop-cache hint)",
                  None: "unknown"}[io["direct_io"]]
        print(f"  O_DIRECT      {direct}")


def _bench_files(paths: list[Path]) -> list[Path]:
    if paths:
        return paths
    for root in (Path.cwd() / "sessions", Path(__file__).resolve().parents[3] / "sessions"):
        found = sorted(root.glob("*/*.jsonl")) + sorted(root.glob("*.jsonl"))
        if found:
            return found
    raise UsageError("no session files to benchmark: pass SESSION.jsonl files")


@app.command()
def bench(
    sessions: Optional[List[Path]] = typer.Argument(None, help="Session files (default: sessions/**.jsonl)."),
    model: Optional[str] = ModelOpt, threads: Optional[int] = ThreadsOpt,
    expert_cache: Optional[str] = CacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay session workloads with drafting off and on; report output identity and the speed ratio."""
    from ..replay import load_recording

    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing)
    gen = _generator(model, threads, stream_opts)
    rows = []
    from ..errors import StrataError

    for path in _bench_files(list(sessions or [])):
        try:
            rec = load_recording(path)
            row = _bench_one(gen, rec, path)
        except StrataError as exc:  # one unusable workload does not end the benchmark
            _stderr(f"strata: {path}: skipped: {exc}")
            rows.append({"session": str(path), "error": str(exc)})
            continue
        rows.append(row)
    done = [r for r in rows if "error" not in r]
    if as_json:
        _print_json({"model": gen.model_name, "sessions": rows})
    else:
        print(f"model: {gen.model_name}")
        for r in done:
            print(f"{Path(r['session']).name}: {r['suffix']['tokens_per_window']:.2f} tokens/window, "
                  f"acceptance {r['suffix']['acceptance']:.0%}, speedup {r['speedup']:.2f}x "
                  f"(suffix {r['suffix']['tokens_per_s']:.1f} tok/s vs none {r['none']['tokens_per_s']:.1f}), "
                  f"drafting {'lossless' if r['lossless'] else 'CHANGED THE OUTPUT'}")
    if not all(r["lossless"] for r in done):
        raise typer.Exit(int(ExitCode.MISMATCH))
    if not done:
        raise typer.Exit(int(ExitCode.ERROR))


def _bench_one(gen, rec, path: Path) -> dict[str, Any]:
    from ..replay import Replay

    row: dict[str, Any] = {"session": str(path), "kind": rec.kind, "turns": len(rec.turns)}
    outputs: dict[str, list[str]] = {}
    for mode in ("none", "suffix"):
        rep = Replay(gen, rec, {"draft": mode})
        t0 = time.perf_counter()
        rep.run()
        secs = time.perf_counter() - t0
        tot = rep.report.total("replayed")
        outputs[mode] = [t.output for t in rep.report.turns]
        same_model = rep.report.same_model
        row[mode] = {"seconds": round(secs, 4), "tokens": tot.emitted, "windows": tot.windows,
                     "tokens_per_s": round(tot.emitted / secs, 2) if secs > 0 else 0.0,
                     "tokens_per_window": round(tot.tokens_per_window, 3),
                     "acceptance": round(tot.acceptance, 4),
                     "matches_recording": rep.report.identical if same_model else None}
        _progress(f"strata: {path.name} draft={mode}: {tot.emitted} tokens in {secs:.2f}s")
    none_s, suffix_s = row["none"]["seconds"], row["suffix"]["seconds"]
    row["speedup"] = round(none_s / suffix_s, 3) if suffix_s > 0 else 0.0
    # drafting is lossless: both runs must write exactly the same text
    row["lossless"] = outputs["none"] == outputs["suffix"]
    return row


@app.command()
def paths(as_json: bool = JsonOpt) -> None:
    """Print where strata keeps its files."""
    from .. import paths as paths_mod

    data = paths_mod.all_paths()
    if as_json:
        _print_json(data)
        return
    for key, value in data.items():
        print(f"{key:<12} {value}")


@app.command()
def version(as_json: bool = JsonOpt) -> None:
    """Print strata's version."""
    from .. import __version__

    try:
        from .. import _engine  # noqa: F401
        engine = "built"
    except ImportError:
        engine = "missing"
    if as_json:
        _print_json({"version": __version__, "engine": engine, "python": sys.version.split()[0]})
    else:
        print(f"strata {__version__} (engine {engine})")
