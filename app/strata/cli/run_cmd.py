"""`strata run`: one non-interactive generation, for scripts and benchmarks.

    strata run --prompt "def fib(n):" --max-new 64
    echo "text" | strata run --json --stats
    strata run --model PATH --prompt-ids "1 2 3" --draft none
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer

from .. import diagnostics
from ..errors import UsageError
from ..telemetry import human_bytes, plural
from . import app
from .options import BackendOpt, EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions


def _read_prompt(prompt: Optional[str], prompt_file: Optional[Path], prompt_ids: Optional[str]) -> tuple[str | None, list[int] | None]:
    given = [x is not None for x in (prompt, prompt_file, prompt_ids)]
    if sum(given) > 1:
        raise UsageError("give only one of --prompt, --prompt-file and --prompt-ids")
    if prompt_ids is not None:
        try:
            ids = [int(x) for x in prompt_ids.replace(",", " ").split()]
        except ValueError:
            raise UsageError(f"--prompt-ids must be integers separated by spaces or commas, not {prompt_ids!r}") from None
        if not ids or min(ids) < 0:
            raise UsageError("--prompt-ids needs at least one token id, all >= 0")
        return None, ids
    from ..textcheck import checked_text, read_input

    if prompt is not None:
        return checked_text(prompt, "the prompt"), None  # undecodable argv bytes reached the tokenizer
    if prompt_file is not None:
        with open(prompt_file, "rb") as f:
            return read_input(f, str(prompt_file)), None
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("no prompt: give --prompt TEXT, --prompt-file F, --prompt-ids IDS or pipe text to stdin")
    return read_input(sys.stdin, "the prompt on stdin"), None


@app.command("run", short_help="Generate once from a prompt (no session is saved).")
def run_command(
    model: Optional[str] = typer.Option(None, "--model", "-m", metavar="MODEL",
                                        help="Model folder, pack or .gguf file, or a bundled alias (default: strata-tiny)."),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", metavar="PROMPT", help="The prompt."),
    prompt_file: Optional[Path] = typer.Option(None, "--prompt-file", "-f", metavar="FILE",
                                              help="Read the prompt from a file."),
    prompt_ids: Optional[str] = typer.Option(None, "--prompt-ids", metavar="IDS",
                                             help="The prompt as token ids ('1 2 3'), for models without a tokenizer."),
    chat: bool = typer.Option(False, "--chat", help="Wrap the prompt as one user message in the model's chat template."),
    max_new: int = typer.Option(256, "--max-new", "-n", metavar="N", help="Most tokens to generate (0: prefill only)."),
    temperature: float = typer.Option(0.0, "--temperature", "-t", metavar="T", help="Sampling temperature, 0..5 (0 = greedy)."),
    top_k: int = typer.Option(0, "--top-k", metavar="K", help="Sample among the K likeliest tokens (0 = off)."),
    top_p: float = typer.Option(1.0, "--top-p", metavar="P", help="Nucleus sampling mass, (0, 1] (1 = off)."),
    repetition_penalty: float = typer.Option(1.0, "--repetition-penalty", metavar="R",
                                             help="Divide the logits of seen tokens by R (1 = off)."),
    presence_penalty: float = typer.Option(0.0, "--presence-penalty", metavar="X",
                                           help="Subtract X from the logits of seen tokens (0 = off)."),
    frequency_penalty: float = typer.Option(0.0, "--frequency-penalty", metavar="X",
                                            help="Subtract X per earlier use of a token (0 = off)."),
    seed: int = typer.Option(0, "--seed", metavar="N",
                             help="Sampling seed (output is identical with drafting on or off)."),
    draft: str = typer.Option("suffix", "--draft", metavar="suffix|baseline|none",
                              help="Drafting: suffix lookup, the trigram baseline, or none."),
    max_draft: Optional[int] = typer.Option(None, "--max-draft", metavar="K",
                                            help="Fixed draft length 0..15 (default: adaptive)."),
    min_match: int = typer.Option(4, "--min-match", metavar="N",
                                  help="Shortest suffix match that may propose a draft."),
    copy_bias: float = typer.Option(0.0, "--copy-bias", metavar="B",
                                    help="Add B to the logit of the token that goes on copying the prompt (0 = off)."),
    threads: Optional[int] = typer.Option(None, "--threads", metavar="N", help="Engine threads (default: one per physical core, one left free above 4)."),
    expert_cache: Optional[str] = ExpertCacheOpt,
    io_mode: Optional[str] = IoModeOpt,
    eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt,
    routing: Optional[str] = RoutingOpt,
    backend: Optional[str] = BackendOpt,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object: text, tokens, stop_reason, stats."),
    stats: bool = typer.Option(False, "--stats", help="Print window and expert cache statistics to stderr."),
) -> None:
    """Generate once from a prompt and print the text (no session is saved)."""
    from ..generate import Generator
    from ..telemetry import Collector
    from ..models import resolve_model
    from ..settings import GenerationSettings

    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing, backend)
    text, ids = _read_prompt(prompt, prompt_file, prompt_ids)
    settings = GenerationSettings(
        max_new=max_new, temperature=temperature, top_k=top_k, top_p=top_p,
        repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty, seed=seed,
        draft=draft, max_draft=max_draft, min_match=min_match, copy_bias=copy_bias)

    path = resolve_model(model)
    t_load = time.perf_counter()
    stream_opts.check_model(path)
    gen = Generator.from_path(path, threads=threads, **stream_opts.engine_kwargs())
    load_s = time.perf_counter() - t_load
    stream_opts.note()
    if ids is None:
        if chat:
            if gen.tokenizer is None:
                raise UsageError(f"--chat needs a tokenizer, and {path} has no tokenizer.json")
            text = gen.tokenizer.render_chat([{"role": "user", "content": text or ""}])
        ids = gen.encode(text or "")
        if not ids:
            raise UsageError("the prompt is empty")
    elif chat:
        raise UsageError("--chat takes a text prompt, not --prompt-ids")
    if gen.vocab_size and max(ids) >= gen.vocab_size:
        raise UsageError(f"--prompt-ids: token id {max(ids)} is outside the vocabulary ({gen.vocab_size})")

    echo = not as_json
    rec = Collector()
    for ev in rec.follow(gen.stream(ids, settings)):
        if echo and ev.text:
            sys.stdout.write(ev.text)
            sys.stdout.flush()
    out_tokens = rec.tokens
    stop_reason = rec.stop_reason if rec.finished else None
    if echo and gen.tokenizer is None:
        # no tokenizer: the ids are the output
        sys.stdout.write(" ".join(map(str, out_tokens)))
    if echo:
        sys.stdout.write("\n")
    summary = rec.summary(gen.last_prefill_s).to_dict()
    summary.update(prompt_tokens=len(ids), load_s=load_s, stop_reason=stop_reason,
                   approximate=stream_opts.approximate or any(s.approximate for s in gen.last_stats))
    if as_json:
        obj = {"model": str(path), "text": rec.text, "tokens": out_tokens,
               "stop_reason": stop_reason, "settings": settings.to_dict(), "stats": summary}
        sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    if stats:
        diagnostics.say(stats_line(summary, len(ids), stop_reason))


def stats_line(s: dict, prompt_tokens: int, stop_reason: str | None) -> str:
    """`strata run --stats`: one line of window statistics (and the expert cache's, for packs)."""
    line = (f"{plural(s['tokens'], 'token')} in {plural(s['windows'], 'window')}, {s['tokens_per_s']:.1f} tok/s "
            f"(prefill {plural(prompt_tokens, 'token')} in {s['prefill_s'] * 1e3:.1f} ms); "
            f"acceptance {s['acceptance']:.2f}, mean keep {s['mean_keep']:.2f}, "
            f"window p50 {s['window_p50_ms']:.2f} ms p95 {s['window_p95_ms']:.2f} ms; "
            + ", ".join(f"T={t} x{n}" for t, n in sorted(s["t_hist"].items(), key=lambda kv: int(kv[0]))))
    if s["hits"] or s["cold_misses"]:  # experts stream (a pack): say how the cache did
        line += (f"; expert cache {plural(s['hits'], 'hit')}, {plural(s['cold_misses'], 'miss', 'misses')} "
                 f"(hit rate {s['hit_rate']:.0%}), {human_bytes(s['bytes_read'])} read")
    return line + f"; stop: {stop_reason}"
