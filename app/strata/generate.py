"""The real `TextGenerator`: an engine, its tokenizer and the C++ decode loop (suffix drafting,
multi-token verification, seeded lossless sampling), streamed one window at a time.

    gen = Generator.from_path("path/to/model")
    for event in gen.stream(gen.encode("def f("), GenerationSettings(max_new=64)):
        print(event.text, end="")

Each `WindowEvent` carries the tokens its window verified (the first event also carries the token
the prefill produced), their text, and the window's telemetry. The last emitted token of a turn
is not fed to the engine yet: it is the root of the next window, so the next `stream` call starts
with it and a conversation continues exactly as one long generation would.
"""
from __future__ import annotations

import json
import os
import struct
from typing import Any, Callable, Iterator, Sequence

from .errors import ModelError, UsageError, WindowError
from .protocol import GenerationSettings, WindowEvent, WindowStats, check_prompt_fits
from .telemetry import Summary, summarize  # noqa: F401 (re-exported: `strata run --json` stats)
from .tokenizer import IncrementalDecoder, Tokenizer

__all__ = ["Generator", "Summary", "summarize"]

_STATE_MAGIC = b"STRGEN01"


def _engine_module():
    from . import _engine  # noqa: PLC0415

    return _engine


class Generator:
    """`strata.protocol.TextGenerator` over a `strata._engine` WindowModel (the Engine, or the
    FakeLM in tests)."""

    def __init__(self, engine, tokenizer: Tokenizer | None = None, *, model_name: str = "model",
                 eos_ids: Sequence[int] | None = None, model_id: str | None = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.model_id = model_id or str(getattr(engine, "model_id", "") or model_name)
        self.context_limit = int(engine.context_limit)
        self.vocab_size = int(getattr(engine, "vocab_size", 0) or getattr(engine, "vocab", 0))
        self.decoder = _engine_module().Decoder(engine)
        if eos_ids is None:
            eos_ids = tokenizer.eos_ids if tokenizer is not None else []
        self.eos_ids = sorted({int(i) for i in eos_ids})
        self.last_stats: list[WindowStats] = []   # the windows of the latest stream
        self.last_prefill_s = 0.0
        self._streaming = False

    @classmethod
    def from_path(cls, path: str | os.PathLike, *, threads: int | None = None, fold: str = "eager",
                  ctx: int | None = None, expert_cache=None, backend: str | None = None,
                  **engine_options: Any) -> "Generator":
        """Load a Hugging Face checkpoint folder or a strata pack (with `expert_cache`)."""
        from .loader import load, resolve

        folder = resolve(path)  # an alias names its bundled folder (the tokenizer lives there)
        engine = load(folder, threads=threads, fold=fold, ctx=ctx, backend=backend, expert_cache=expert_cache,
                      **engine_options)
        tokenizer = Tokenizer.from_folder(folder)
        vocab = int(getattr(engine, "vocab_size", 0) or 0)
        if tokenizer is not None and vocab and tokenizer.max_id >= vocab:
            raise ModelError(f"{tokenizer.source}: token ids go up to {tokenizer.max_id}, past the model's "
                             f"vocabulary of {vocab} (config.json vocab_size): the tokenizer belongs to "
                             "another model")
        eos = set(tokenizer.eos_ids) if tokenizer is not None else set()
        cfg = getattr(engine, "config", {}) or {}
        hf = cfg.get("hf_config", cfg) if isinstance(cfg, dict) else {}
        for key in ("eos_token_id",):
            v = (hf.get("text_config") or {}).get(key, hf.get(key)) if isinstance(hf, dict) else None
            if isinstance(v, int):
                eos.add(v)
            elif isinstance(v, list):
                eos.update(int(x) for x in v if isinstance(x, int))
        return cls(engine, tokenizer, model_name=folder.name, eos_ids=sorted(eos))

    # -- text ---------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ModelError(f"model {self.model_name} has no tokenizer.json, so it cannot read text "
                             "(strata run --prompt-ids takes token ids)")
        return self.tokenizer.encode(text)

    def decode(self, ids: list[int], *, skip_special: bool = False) -> str:
        if self.tokenizer is None:
            return ""
        return self.tokenizer.decode(ids, skip_special=skip_special)

    # -- state --------------------------------------------------------------------------------
    @property
    def pos(self) -> int:
        """Tokens in the session: those the engine holds plus the pending root."""
        return len(self.decoder.history)

    @property
    def history(self) -> list[int]:
        return list(self.decoder.history)

    def reset(self) -> None:
        self._check_idle("reset")
        self.decoder.reset()

    def add_history(self, ids: Sequence[int]) -> None:
        """Tokens of earlier sessions for the suffix drafter (never fed to the model)."""
        self.decoder.add_document(list(ids))

    def snapshot(self) -> bytes:
        """Engine state + session tokens (drafter history, pending root); committed state only."""
        self._check_idle("snapshot")
        engine_blob = bytes(self.engine.save_state())
        history, pending = self.decoder.history, self.decoder.pending
        header = json.dumps({"model_id": self.model_id, "n_history": len(history),
                             "n_pending": len(pending)}).encode()
        body = struct.pack(f"<{len(history)}i", *history) + struct.pack(f"<{len(pending)}i", *pending)
        return _STATE_MAGIC + struct.pack("<I", len(header)) + header + body + engine_blob

    def restore(self, blob: bytes) -> None:
        self._check_idle("restore")
        try:
            if blob[:8] != _STATE_MAGIC:
                raise ValueError("bad magic")
            (n_header,) = struct.unpack_from("<I", blob, 8)
            header = json.loads(blob[12:12 + n_header].decode())
            n_hist, n_pend = int(header["n_history"]), int(header["n_pending"])
            off = 12 + n_header
            history = list(struct.unpack_from(f"<{n_hist}i", blob, off))
            off += 4 * n_hist
            pending = list(struct.unpack_from(f"<{n_pend}i", blob, off))
            off += 4 * n_pend
            engine_blob = blob[off:]
        except (ValueError, KeyError, TypeError, struct.error, UnicodeDecodeError) as exc:
            raise ModelError(f"state blob is not a strata generator state ({exc.__class__.__name__}: {exc})") from None
        if header.get("model_id") != self.model_id:
            raise ModelError(f"state was saved by model {header.get('model_id')}, not {self.model_id} ({self.model_name})")
        self.engine.load_state(engine_blob)
        try:
            self.decoder.set_state(history, pending)
        except (ValueError, WindowError) as exc:
            self.decoder.reset()
            raise ModelError(f"state blob does not match its engine state ({exc})") from None

    def _check_idle(self, what: str) -> None:
        if self._streaming:
            raise WindowError(f"{what} while a generation is in progress")

    # -- generation ---------------------------------------------------------------------------
    def stream(self, prompt_ids: list[int], settings: GenerationSettings,
               should_stop: Callable[[], bool] | None = None) -> Iterator[WindowEvent]:
        self._check_idle("stream")
        kwargs = settings.decode_kwargs()  # validated when the settings were made
        ids = [int(t) for t in prompt_ids]
        check_prompt_fits(len(ids), self.pos, self.context_limit)
        if not ids and not self.decoder.pending:
            raise UsageError("empty prompt: give at least one token")
        return self._events(ids, kwargs, should_stop)

    def generate(self, prompt_ids: list[int], settings: GenerationSettings) -> tuple[list[int], str]:
        """Run to the end: (tokens, stop_reason)."""
        tokens: list[int] = []
        reason = ""
        for ev in self.stream(prompt_ids, settings):
            tokens.extend(ev.tokens)
            reason = ev.stop_reason or reason
        return tokens, reason

    def _events(self, ids: list[int], kwargs: dict[str, Any],
                should_stop: Callable[[], bool] | None) -> Iterator[WindowEvent]:
        dec = self.decoder
        detok = IncrementalDecoder(lambda t: self.decode(t, skip_special=True))
        self._streaming = True
        self.last_stats = []
        try:
            if kwargs.get("copy_bias"):  # the copy bias copies text, not the prompt's markers
                kwargs = {**kwargs, "copy_skip": sorted(getattr(self.tokenizer, "special_ids", {}).values())}
            first, st = dec.start(ids, stop_ids=self.eos_ids, **kwargs)
            self.last_prefill_s = dec.prefill_us / 1e6
            carry = list(first)
            while dec.active:
                if should_stop is not None and should_stop():
                    dec.stop("stopped")
                    break
                toks, st = dec.step()
                stats = self._stats(st, len(carry) + len(toks))
                tokens = carry + list(toks)
                carry = []
                text = detok.push(tokens)
                done = not dec.active
                if done:
                    text += detok.flush()
                yield WindowEvent(tokens=tokens, text=text, stats=stats, finished=done,
                                  stop_reason=dec.stop_reason if done else None)
                if done:
                    return
            # ended without a window: the prefill's token (if any) and the final reason
            stats = WindowStats(pos0=self.pos, emitted=len(carry), drafter="none")
            text = detok.push(carry) + detok.flush()
            yield WindowEvent(tokens=carry, text=text, stats=stats, finished=True,
                              stop_reason=dec.stop_reason or "stopped")
        finally:
            if dec.active:  # abandoned or interrupted between windows: the state is committed
                dec.stop("stopped")
            self._streaming = False

    def _stats(self, st: dict[str, Any], delivered: int) -> WindowStats:
        stats = WindowStats.from_dict(st)
        stats.emitted = delivered  # tokens this event delivers (the first one adds the prefill's)
        self.last_stats.append(stats)
        return stats
