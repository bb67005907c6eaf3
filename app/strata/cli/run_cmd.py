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

from ..errors import UsageError
from . import app
from .options import EvictionOpt, ExpertCacheOpt, IoModeOpt, ReadaheadOpt, RoutingOpt, StreamOptions


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
    if prompt is not None:
        return prompt, None
    if prompt_file is not None:
        try:
            return prompt_file.read_text(encoding="utf-8"), None
        except UnicodeDecodeError:
            raise UsageError(f"{prompt_file}: not UTF-8 text") from None
    if sys.stdin is None or sys.stdin.isatty():
        raise UsageError("no prompt: give --prompt TEXT, --prompt-file F, --prompt-ids IDS or pipe text to stdin")
    return sys.stdin.read(), None


@app.command("run")
def run_command(
    model: Optional[str] = typer.Option(None, "--model", "-m", help="model folder or pack, or a bundled alias (default: the bundled model)"),
    prompt: Optional[str] = typer.Option(None, "--prompt", "-p", help="prompt text"),
    prompt_file: Optional[Path] = typer.Option(None, "--prompt-file", "-f", help="read the prompt from a file"),
    prompt_ids: Optional[str] = typer.Option(None, "--prompt-ids", help="prompt as token ids ('1 2 3'), for models without a tokenizer"),
    chat: bool = typer.Option(False, "--chat", help="wrap the prompt as one user message in the model's chat template"),
    max_new: int = typer.Option(256, "--max-new", "-n", help="most tokens to generate"),
    temperature: float = typer.Option(0.0, "--temperature", "-t", help="0 = greedy"),
    top_k: int = typer.Option(0, "--top-k", help="0 = off"),
    top_p: float = typer.Option(1.0, "--top-p", help="1 = off"),
    repetition_penalty: float = typer.Option(1.0, "--repetition-penalty"),
    presence_penalty: float = typer.Option(0.0, "--presence-penalty"),
    frequency_penalty: float = typer.Option(0.0, "--frequency-penalty"),
    seed: int = typer.Option(0, "--seed", help="sampling seed (output is identical with drafting on or off)"),
    draft: str = typer.Option("suffix", "--draft", help="none | suffix | baseline"),
    max_draft: Optional[int] = typer.Option(None, "--max-draft", help="fixed draft length K (0..15); default: adaptive"),
    min_match: int = typer.Option(4, "--min-match", help="shortest suffix match that may propose a draft"),
    threads: Optional[int] = typer.Option(None, "--threads", help="engine threads (default: one per physical core, one left free above 4)"),
    expert_cache: Optional[str] = ExpertCacheOpt,
    io_mode: Optional[str] = IoModeOpt,
    eviction: Optional[str] = EvictionOpt,
    readahead: Optional[bool] = ReadaheadOpt,
    routing: Optional[str] = RoutingOpt,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object: text, tokens, stop_reason, stats"),
    stats: bool = typer.Option(False, "--stats", help="print the window statistics to stderr"),
) -> None:
    """Generate once from a prompt and print the text (no session is saved)."""
    from ..generate import Generator, summarize
    from ..models import resolve_model
    from ..protocol import GenerationSettings

    if draft not in ("none", "suffix", "baseline"):
        raise UsageError(f"--draft must be none, suffix or baseline, not {draft!r}")
    if max_new < 0:
        raise UsageError(f"--max-new must be >= 0, not {max_new}")
    if max_draft is not None and not 0 <= max_draft <= 15:
        raise UsageError(f"--max-draft must be in 0..15, not {max_draft}")
    if min_match < 1:
        raise UsageError(f"--min-match must be >= 1, not {min_match}")
    stream_opts = StreamOptions.from_cli(expert_cache, io_mode, eviction, readahead, routing)
    text, ids = _read_prompt(prompt, prompt_file, prompt_ids)
    settings = GenerationSettings(
        max_new=max_new, temperature=temperature, top_k=top_k, top_p=top_p,
        repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
        frequency_penalty=frequency_penalty, seed=seed,
        draft="none" if draft == "none" else "suffix", drafter="baseline" if draft == "baseline" else "suffix",
        max_draft=max_draft, min_match=min_match)

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

    out_tokens: list[int] = []
    stop_reason = None
    pieces: list[str] = []
    echo = not as_json
    for ev in gen.stream(ids, settings):
        out_tokens.extend(ev.tokens)
        pieces.append(ev.text)
        if echo and ev.text:
            sys.stdout.write(ev.text)
            sys.stdout.flush()
        if ev.finished:
            stop_reason = ev.stop_reason
    if echo and gen.tokenizer is None:
        # no tokenizer: the ids are the output
        sys.stdout.write(" ".join(map(str, out_tokens)))
    if echo:
        sys.stdout.write("\n")
    summary = summarize(gen.last_stats, gen.last_prefill_s).to_dict()
    summary.update(prompt_tokens=len(ids), load_s=load_s, stop_reason=stop_reason,
                   approximate=stream_opts.approximate or any(s.approximate for s in gen.last_stats))
    if as_json:
        obj = {"model": str(path), "text": "".join(pieces), "tokens": out_tokens,
               "stop_reason": stop_reason, "settings": settings.to_dict(), "stats": summary}
        sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
    if stats:
        s = summary
        print(f"strata: {s['tokens']} tokens in {s['windows']} windows, {s['tokens_per_s']:.1f} tok/s "
              f"(prefill {len(ids)} tokens in {s['prefill_s'] * 1e3:.1f} ms); acceptance {s['acceptance']:.2f}, "
              f"mean keep {s['mean_keep']:.2f}, window p50 {s['window_p50_ms']:.2f} ms p95 {s['window_p95_ms']:.2f} ms; "
              f"T {s['t_hist']}; stop: {stop_reason}", file=sys.stderr)
