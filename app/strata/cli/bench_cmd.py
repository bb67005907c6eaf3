"""`strata bench [SESSION.jsonl ...]`: replay workloads with drafting off and on; identity and speed."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, List, Optional

import typer

from .. import diagnostics
from ..telemetry import plural
from . import ExitCode, app, common
from .common import JsonOpt, ModelOpt, ThreadsOpt
from .options import BackendOpt, EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions
from ..errors import UsageError


def _bench_files(paths: list[Path]) -> list[Path]:
    if paths:
        return paths
    # every .jsonl below sessions/ (the help's sessions/**.jsonl): "*/*.jsonl" left out the
    # sessions recorded with the bundled model, in sessions/demo/strata-tiny/
    for root in (Path("sessions"), Path(__file__).resolve().parents[3] / "sessions"):
        found = sorted(root.glob("**/*.jsonl"))
        if found:
            return found
    raise UsageError("no session files to benchmark: pass SESSION.jsonl files")


@app.command(short_help="Replay workloads with drafting off and on; compare speed.")
def bench(
    sessions: Optional[List[Path]] = typer.Argument(None, metavar="SESSION.jsonl", help="Session files (default: sessions/**.jsonl)."),
    model: Optional[str] = ModelOpt, threads: Optional[int] = ThreadsOpt,
    expert_cache: Optional[str] = ExpertCacheOpt,
    io_mode: Optional[str] = IoModeOpt, eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt, routing: Optional[str] = RoutingOpt,
    backend: Optional[str] = BackendOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Replay session workloads with drafting off and on; report output identity and the speed ratio."""
    from ..errors import StrataError
    from ..replay import load_recording

    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing, backend)
    # read every workload before loading a model: a bad file costs no load, and when none is
    # usable the first one's error is the command's (one line, exit 4)
    rows: list[dict[str, Any]] = []
    workloads = []
    first_error: StrataError | None = None
    for path in _bench_files(list(sessions or [])):
        try:
            workloads.append((path, load_recording(path)))
        except StrataError as exc:  # one unusable workload does not end the benchmark
            diagnostics.say(f"{path}: skipped: {exc}")
            rows.append({"session": str(path), "error": str(exc)})
            first_error = first_error or exc
    if not workloads:
        assert first_error is not None
        raise first_error
    gen = common.generator(model, threads, stream_opts)
    for path, rec in workloads:
        try:
            rows.append(_bench_one(gen, rec, path))
        except StrataError as exc:
            diagnostics.say(f"{path}: skipped: {exc}")
            rows.append({"session": str(path), "error": str(exc)})
    done = [r for r in rows if "error" not in r]
    if as_json:
        common.print_json({"model": gen.model_name, "sessions": rows})
    else:
        print(f"model: {gen.model_name}")
        for r in done:
            print(f"{r['session']}: {r['suffix']['tokens_per_window']:.2f} tokens/window, "
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
        diagnostics.progress(f"{path.name} draft={mode}: {plural(tot.emitted, 'token')} in {secs:.2f}s")
    none_s, suffix_s = row["none"]["seconds"], row["suffix"]["seconds"]
    row["speedup"] = round(none_s / suffix_s, 3) if suffix_s > 0 else 0.0
    # drafting is lossless: both runs must write exactly the same text
    row["lossless"] = outputs["none"] == outputs["suffix"]
    return row
