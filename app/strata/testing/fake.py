"""A deterministic stand-in for the engine: `FakeGenerator` speaks `strata.protocol.TextGenerator`
without a model, for tests of the shell, the TUI, sessions and replay.

It is not a toy echo: it keeps a committed token history, drafts by suffix lookup over that
history and verifies drafts against its target text exactly like the real decode loop (so
drafting on/off gives identical output, and repetitive edits accept long drafts), and it
simulates expert routing and a resident expert cache so the telemetry (experts per layer,
unions, hits, cold misses, prefetch, bytes read) moves the way a real run's would.

Tokens are Unicode code points (offset past a few special tokens), so `decode(encode(s)) == s`
for every string and a window never splits a character.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from collections import OrderedDict
from typing import Callable, Iterator

from .. import prompts
from ..errors import ModelError, WindowError
from ..protocol import GenerationSettings, WindowEvent, WindowStats, check_prompt_fits

SPECIAL_IDS = {tok: i for i, tok in enumerate(prompts.SPECIAL_TOKENS)}
SPECIAL_BY_ID = {i: tok for tok, i in SPECIAL_IDS.items()}
CHAR_OFFSET = 16
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(t) for t in prompts.SPECIAL_TOKENS) + ")")
EOS_IDS = frozenset({SPECIAL_IDS[prompts.ENDOFTEXT], SPECIAL_IDS[prompts.IM_END]})

_CHAT_RE = re.compile(
    re.escape(prompts.IM_START) + r"user\n(.*?)" + re.escape(prompts.IM_END), re.S)
_WORDS = ("amber", "basalt", "cobalt", "delta", "ember", "fjord", "granite", "harbor")


def default_responder(context: str, settings: GenerationSettings) -> str:
    """The text the fake model "wants" to write after `context` (end token included).

    Edit prompts get a rewrite of the file: `replace A with B` instructions are applied
    literally, anything else adds a comment line naming the instruction (so every rewrite
    differs from the original and repeats most of it, as real edits do). Chat prompts get a
    reply quoting the last user message.
    """
    rewrite_at = context.rfind(prompts.REWRITE)
    if rewrite_at >= 0 and context.endswith(prompts.REWRITE):
        head = context[:rewrite_at]
        file_at = head.rfind(prompts.FILE)
        instr_at = head.rfind(prompts.INSTRUCTION)
        body = head[file_at + len(prompts.FILE):instr_at]
        _, _, original = body.partition("\n")
        instruction = head[instr_at + len(prompts.INSTRUCTION):].rstrip("\n")
        m = re.fullmatch(r"\s*replace\s+(.+?)\s+with\s+(.+?)\s*", instruction, re.I | re.S)
        if m and m.group(1) in original:
            new = original.replace(m.group(1), m.group(2))
        else:
            lines = original.splitlines(keepends=True)
            note = f"# strata: {instruction.strip()}\n"
            insert_at = 1 if lines and lines[0].startswith("#!") else 0
            new = "".join(lines[:insert_at] + [note] + lines[insert_at:])
        return new + prompts.ENDOFTEXT
    users = _CHAT_RE.findall(context)
    last = users[-1].strip() if users else context[-80:].strip()
    reply = f"You said: {last}"
    if settings.temperature > 0:
        # sampled output depends on the seed, reproducibly, as the real sampler does
        reply += f" ({_WORDS[(settings.seed * 7 + len(last)) % len(_WORDS)]})"
    reply += f"\nThat was message {len(users)} of this conversation."
    return reply + prompts.IM_END


class FakeGenerator:
    """Deterministic `TextGenerator`. Knobs:

    - `responder(context_text, settings) -> target text` replaces the default behaviour;
    - `n_layers`, `n_experts`, `top_k`, `cache_slots` shape the simulated expert telemetry;
    - `window_delay` (seconds) sleeps per window, for UI tests that need a generation in flight;
    - `hold_at` ("N" = before window N, "end" = before the last window) with `hold_file`: there
      the generator creates `hold_file` and blocks for good, so a test can kill the process at
      a known point instead of after a guessed delay.
    """

    def __init__(self, *, model_name: str = "fake-moe", context_limit: int = 8192,
                 n_layers: int = 8, n_experts: int = 64, top_k: int = 4,
                 cache_slots: int | None = None, expert_bytes: int = 3 << 20,
                 responder: Callable[[str, GenerationSettings], str] | None = None,
                 window_delay: float = 0.0, hold_at: str | None = None,
                 hold_file: str | None = None) -> None:
        self.model_name = model_name
        self.context_limit = context_limit
        self.n_layers = n_layers
        self.n_experts = n_experts
        self.top_k = top_k
        self.cache_slots = cache_slots if cache_slots is not None else n_layers * n_experts // 4
        self.expert_bytes = expert_bytes
        self.responder = responder or default_responder
        self.window_delay = window_delay
        self.hold_at = hold_at
        self.hold_file = hold_file
        self._window_no = 0
        ident = f"{model_name}|{n_layers}|{n_experts}|{top_k}|{context_limit}"
        self.model_id = hashlib.sha256(ident.encode()).hexdigest()[:16]
        self.vocab_size = CHAR_OFFSET + 0x110000
        self._tokens: list[int] = []
        self._cache: OrderedDict[tuple[int, int], None] = OrderedDict()
        self._prefetched: set[tuple[int, int]] = set()
        self._streaming = False
        self._kgram: dict[tuple[int, ...], list[int]] = {}
        self._kgram_k = 0
        self._kgram_n = 0
        self._docs: list[list[int]] = []   # earlier sessions' tokens (add_history)
        self._doc_index: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        self._doc_index_k: tuple[int, int] = (0, 0)

    # -- tokenizer ---------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for part in _SPECIAL_RE.split(text):
            if part in SPECIAL_IDS:
                ids.append(SPECIAL_IDS[part])
            else:
                ids.extend(CHAR_OFFSET + ord(c) for c in part)
        return ids

    def decode(self, ids: list[int], *, skip_special: bool = False) -> str:
        out = []
        for i in ids:
            if i >= CHAR_OFFSET:
                out.append(chr(i - CHAR_OFFSET))
            elif not skip_special:
                out.append(SPECIAL_BY_ID.get(i, ""))
        return "".join(out)

    # -- state -------------------------------------------------------------------------------
    @property
    def pos(self) -> int:
        return len(self._tokens)

    @property
    def tokens(self) -> list[int]:
        """The committed history (a copy)."""
        return list(self._tokens)

    def add_history(self, ids: list[int]) -> None:
        """Tokens of earlier sessions for the drafter only (never fed to the model); they
        survive reset(), as in the real decoder."""
        if ids:
            self._docs.append([int(t) for t in ids])

    def reset(self) -> None:
        self._check_idle("reset")
        self._tokens = []
        self._kgram_k = 0
        self._cache.clear()
        self._prefetched.clear()

    def snapshot(self) -> bytes:
        self._check_idle("snapshot")
        state = {"kind": "strata-fake-state", "model_id": self.model_id, "tokens": self._tokens,
                 "cache": [list(k) for k in self._cache]}
        return json.dumps(state, separators=(",", ":")).encode()

    def restore(self, blob: bytes) -> None:
        self._check_idle("restore")
        try:
            state = json.loads(blob.decode("utf-8"))
            assert state["kind"] == "strata-fake-state"
            model_id, tokens, cache = state["model_id"], state["tokens"], state["cache"]
        except Exception as exc:  # noqa: BLE001 - any malformed blob is one error
            raise ModelError(f"engine state blob is not a {self.model_name} state ({exc.__class__.__name__})") from None
        if model_id != self.model_id:
            raise ModelError(f"engine state was saved by model {model_id}, not {self.model_id} ({self.model_name})")
        if len(tokens) > self.context_limit:
            raise ModelError("engine state blob is longer than the context limit")
        self._tokens = [int(t) for t in tokens]
        self._kgram_k = 0
        self._cache = OrderedDict((tuple(k), None) for k in cache)
        self._prefetched.clear()

    def _check_idle(self, what: str) -> None:
        if self._streaming:
            raise WindowError(f"{what} while a generation is in progress")

    # -- generation --------------------------------------------------------------------------
    def stream(self, prompt_ids: list[int], settings: GenerationSettings,
               should_stop: Callable[[], bool] | None = None) -> Iterator[WindowEvent]:
        self._check_idle("stream")
        check_prompt_fits(len(prompt_ids), self.pos, self.context_limit)
        self._tokens.extend(int(t) for t in prompt_ids)
        target = self.encode(self.responder(self.decode(self._tokens), settings))
        return self._windows(target, settings, should_stop)

    def _windows(self, target: list[int], settings: GenerationSettings,
                 should_stop: Callable[[], bool] | None) -> Iterator[WindowEvent]:
        self._streaming = True
        try:
            produced = 0
            while True:
                if should_stop is not None and should_stop():
                    yield self._final("stopped")
                    return
                if produced >= settings.max_new:
                    yield self._final("max_new")
                    return
                if produced >= len(target):  # responder gave no end token
                    yield self._final("eos")
                    return
                if self.pos >= self.context_limit:
                    yield self._final("context")
                    return
                drafts, match_len = self._draft(settings)
                room = min(settings.max_new - produced, self.context_limit - self.pos)
                drafts = drafts[:max(0, room - 1)]
                pos0 = self.pos
                # verification: row i's output is target[produced + i]; accept while it equals
                # the next draft; EOS ends the emitted prefix
                emitted: list[int] = []
                for i in range(len(drafts) + 1):
                    out = target[produced + i] if produced + i < len(target) else None
                    if out is None:
                        break
                    emitted.append(out)
                    if out in EOS_IDS or i == len(drafts) or drafts[i] != out:
                        break
                n_accept = sum(1 for a, b in zip(drafts, emitted[:-1]) if a == b)
                T = 1 + len(drafts)
                rows = [self._tokens[-1] if self._tokens else 0] + drafts
                self._tokens.extend(emitted)
                produced += len(emitted)
                stats = self._telemetry(pos0, T, rows, len(drafts), n_accept, len(emitted),
                                        match_len, settings)
                if self.window_delay:
                    time.sleep(self.window_delay)
                eos = emitted[-1] in EOS_IDS
                done = eos or produced >= settings.max_new or self.pos >= self.context_limit
                self._window_no += 1
                self._maybe_hold(done)
                reason = "eos" if eos else "max_new" if produced >= settings.max_new else \
                    "context" if self.pos >= self.context_limit else None
                yield WindowEvent(tokens=emitted, text=self.decode(emitted, skip_special=True),
                                  stats=stats, finished=done, stop_reason=reason)
                if done:
                    return
        finally:
            self._streaming = False

    def _maybe_hold(self, last: bool) -> None:
        if self.hold_at is None or self.hold_file is None:
            return
        if self.hold_at == ("end" if last else str(self._window_no)):
            with open(self.hold_file, "w") as f:
                f.write(f"{self._window_no}\n")
            while True:  # the test kills us here
                time.sleep(3600)

    def _final(self, reason: str) -> WindowEvent:
        return WindowEvent(tokens=[], text="", stats=WindowStats(pos0=self.pos, drafter="none"),
                           finished=True, stop_reason=reason)

    def _draft(self, settings: GenerationSettings) -> tuple[list[int], int]:
        """Suffix lookup over the committed history: the most recent earlier occurrence of the
        longest suffix (at least min_match tokens) proposes the tokens that followed it."""
        if settings.draft == "none":
            return [], 0
        hist = self._tokens
        n = len(hist)
        k = max(1, settings.min_match)
        if n <= k:
            return [], 0
        # None = adaptive in the real engine; 3 is its usual choice at high acceptance
        max_draft = settings.max_draft if settings.max_draft is not None else 3
        self._index_upto(k)
        best_len, best_end = 0, -1
        # most recent occurrences first; a bounded look-back keeps this cheap on long histories
        for end in reversed(self._kgram.get(tuple(hist[n - k:]), [])[-64:]):
            if end >= n:
                continue
            length = k
            while length < end and length < 64 and hist[end - length - 1] == hist[n - length - 1]:
                length += 1
            if length > best_len:
                best_len, best_end = length, end
            if best_len >= 64:
                break
        # earlier sessions too (matches never span documents); the longest match wins, the
        # session's own history on a tie
        best_doc: list[int] = hist
        for d, end in reversed(self._doc_kgrams(k).get(tuple(hist[n - k:]), [])[-64:]):
            doc = self._docs[d]
            length = k
            while length < end and length < n and length < 64 and doc[end - length - 1] == hist[n - length - 1]:
                length += 1
            if length > best_len:
                best_len, best_end, best_doc = length, end, doc
        if best_end < 0 or best_end >= len(best_doc):
            return [], 0
        return best_doc[best_end:best_end + max_draft], best_len

    def _doc_kgrams(self, k: int) -> dict[tuple[int, ...], list[tuple[int, int]]]:
        if self._doc_index_k != (k, len(self._docs)):
            index: dict[tuple[int, ...], list[tuple[int, int]]] = {}
            for d, doc in enumerate(self._docs):
                for end in range(k, len(doc)):
                    index.setdefault(tuple(doc[end - k:end]), []).append((d, end))
            self._doc_index, self._doc_index_k = index, (k, len(self._docs))
        return self._doc_index

    def _index_upto(self, k: int) -> None:
        """Index every k-gram of the history by the position after it (incrementally)."""
        hist = self._tokens
        if self._kgram_k != k or self._kgram_n > len(hist):
            self._kgram, self._kgram_k, self._kgram_n = {}, k, k
        for end in range(max(self._kgram_n, k), len(hist) + 1):
            self._kgram.setdefault(tuple(hist[end - k:end]), []).append(end)
        self._kgram_n = len(hist) + 1

    def _experts(self, token: int, position: int, layer: int) -> list[int]:
        # routing depends mostly on the token, a little on position: similar text reuses experts
        h = hashlib.blake2b(f"{token}:{layer}:{position % 7}".encode(), digest_size=16).digest()
        chosen: list[int] = []
        for b in h:
            e = b % self.n_experts
            if e not in chosen:
                chosen.append(e)
            if len(chosen) == self.top_k:
                break
        return sorted(chosen)

    def _telemetry(self, pos0: int, T: int, rows: list[int], n_drafted: int, n_accept: int,
                   emitted: int, match_len: int, settings: GenerationSettings) -> WindowStats:
        hits = misses = prefetch_used = extra_cold = 0
        experts: list[list[int]] = []
        cold_experts: list[list[int]] = []
        union_sizes: list[int] = []
        for layer in range(self.n_layers):
            per_row = [self._experts(tok, pos0 + r, layer) for r, tok in enumerate(rows)]
            union = sorted(set().union(*per_row))
            root = set(per_row[0])
            experts.append(union)
            union_sizes.append(len(union))
            cold_experts.append([])
            for e in union:
                key = (layer, e)
                if key in self._cache:
                    hits += 1
                    self._cache.move_to_end(key)
                    if key in self._prefetched:
                        prefetch_used += 1
                        self._prefetched.discard(key)
                else:
                    misses += 1
                    cold_experts[-1].append(e)
                    if e not in root:
                        extra_cold += 1
                    self._insert(key)
        # read-ahead: predict the next window's root experts for the first layers
        prefetch_issued = 0
        nxt = self._tokens[-1] if self._tokens else 0
        for layer in range(min(2, self.n_layers)):
            for e in self._experts(nxt, self.pos, layer):
                key = (layer, e)
                if key not in self._cache:
                    self._insert(key)
                    self._prefetched.add(key)
                    prefetch_issued += 1
        prefetch_wasted = max(0, len(self._prefetched) - 2 * self.top_k)
        for key in list(self._prefetched)[:prefetch_wasted]:
            self._prefetched.discard(key)
        run_us = 900.0 + 110.0 * T + 2.0 * pos0 ** 0.5 * T
        late_wait_us = 240.0 * misses
        fold_us = 15.0 * T if T > 1 else 0.0
        window_us = run_us + late_wait_us + fold_us + 40.0
        drafter = "none" if settings.draft == "none" else settings.drafter
        return WindowStats(
            pos0=pos0, T=T, n_drafted=n_drafted, n_accept=n_accept, keep=emitted,
            emitted=emitted, match_len=match_len, drafter=drafter, window_us=window_us,
            run_us=run_us, fold_us=fold_us, hits=hits, cold_misses=misses, urgent_loads=misses,
            prefetch_issued=prefetch_issued, prefetch_used=prefetch_used,
            prefetch_wasted=prefetch_wasted, late_wait_us=late_wait_us,
            bytes_read=(misses + prefetch_issued) * self.expert_bytes,
            prefetched_bytes=prefetch_issued * self.expert_bytes, extra_cold=extra_cold,
            cache_slots_used=len(self._cache), cache_slots_total=self.cache_slots,
            approximate=False, union_per_layer=union_sizes, experts=experts,
            cold_experts=cold_experts)

    def _insert(self, key: tuple[int, int]) -> None:
        self._cache[key] = None
        while len(self._cache) > self.cache_slots:
            old, _ = self._cache.popitem(last=False)
            self._prefetched.discard(old)
