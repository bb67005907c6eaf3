"""Helpers for the TUI tests: settle an app by waiting on its workers (never sleeping) and
compare SVG snapshots stored under tests/snapshots/."""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path

SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("STRATA_UPDATE_SNAPSHOTS", "") not in ("", "0")


async def settle(app, pilot, rounds: int = 6) -> None:
    """Wait until no worker runs and the message queues are drained. Workers may post messages
    whose handlers start more workers, so repeat until a round finds nothing running."""
    for _ in range(rounds):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if not any(w.is_running for w in app.workers):
            await pilot.pause()
            if not any(w.is_running for w in app.workers):
                return
    raise AssertionError("workers kept starting; the app did not settle")


async def until(pilot, predicate, what: str, rounds: int = 2000) -> None:
    """Let the event loop run until `predicate()` holds (bounded, no fixed sleeps)."""
    for _ in range(rounds):
        if predicate():
            return
        await pilot.pause()
    raise AssertionError(f"timed out waiting for {what}")


def normalise_svg(svg: str) -> str:
    """Remove what differs between identical screens: the content-hash ids Rich prefixes its
    classes and clip paths with."""
    svg = re.sub(r"terminal-\d+", "terminal", svg)
    return svg.replace("\r\n", "\n")


def freeze_cursors(app) -> None:
    from textual.widgets import Input

    for box in app.screen.query(Input):
        box.cursor_blink = False


def assert_snapshot(app, name: str) -> None:
    """Compare the current screen with tests/snapshots/<name>.svg (STRATA_UPDATE_SNAPSHOTS=1
    rewrites it). On a mismatch the new picture is written next to it as <name>.new.svg."""
    svg = normalise_svg(app.export_screenshot(title=name))
    path = SNAPSHOTS / f"{name}.svg"
    if UPDATE or not path.exists():
        if not UPDATE:
            raise AssertionError(f"no snapshot {path}; run with STRATA_UPDATE_SNAPSHOTS=1 to create it")
        SNAPSHOTS.mkdir(parents=True, exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        return
    expected = path.read_text(encoding="utf-8")
    if svg != expected:
        new = path.with_suffix(".new.svg")
        new.write_text(svg, encoding="utf-8")
        raise AssertionError(f"screen differs from snapshot {path.name}; see {new} "
                             "(STRATA_UPDATE_SNAPSHOTS=1 accepts it)")


def asynctest(fn):
    """Run an async test function with asyncio (no pytest plugin needed)."""
    import asyncio
    import functools
    import inspect

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))

    wrapper.__signature__ = inspect.signature(fn)  # keep fixtures visible to pytest
    return wrapper


class CountingGenerator:
    """Wraps a generator and counts prefill-only streams (max_new=0), so a test can tell a
    checkpoint restore from a re-prefill."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.prefills = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stream(self, ids, settings, should_stop=None):
        if settings.max_new == 0:
            self.prefills += 1
        return self.inner.stream(ids, settings, should_stop)


class GatedGenerator:
    """A FakeGenerator whose generations pause after `after` windows until `gate` opens, so a
    test can act while a generation is certainly in flight (no sleeps, no timing)."""

    def __init__(self, inner, after: int) -> None:
        self.inner, self.after = inner, after
        self.reached, self.gate = threading.Event(), threading.Event()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stream(self, ids, settings, should_stop=None):
        events = self.inner.stream(ids, settings, should_stop)

        def gated():
            for n, event in enumerate(events, 1):
                yield event
                if n == self.after and settings.max_new > 0:
                    self.reached.set()
                    self.gate.wait(30)
        return gated()


def frozen_reply(context: str, settings=None) -> str:
    """What the test models write after `context`: an edit prompt gets the file with
    `replace A with B` applied (else a comment line naming the instruction added on top); a
    chat gets a reply quoting the last user message. Usable as FakeGenerator's responder, so
    the tests fix the text while the fake supplies drafting and telemetry."""
    import re

    if context.endswith("<|rewrite|>"):
        body = context[context.rfind("<|file|>") + 8:context.rfind("<|instruction|>")]
        original = body.partition("\n")[2]
        instruction = context[context.rfind("<|instruction|>") + 15:-len("<|rewrite|>")].strip()
        m = re.fullmatch(r"replace (.+) with (.+)", instruction)
        new = original.replace(m.group(1), m.group(2)) if m else f"# {instruction}\n{original}"
        return new + "<|endoftext|>"
    users = re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", context, re.S)
    if not users:  # not a prompt that asks for anything (e.g. a prefill-only file prefix)
        return "<|endoftext|>"
    return f"You said: {users[-1]}\nThat was message {len(users)}.<|im_end|>"


class FrozenGenerator:
    """A complete `TextGenerator` whose text, drafting and telemetry are defined here, for the
    SVG snapshots: the pictures then change only when the TUI does (the shared FakeGenerator
    may evolve). Chat replies quote the last user message; edits apply `replace A with B`."""

    SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|file|>", "<|instruction|>",
                "<|rewrite|>")
    OFFSET = 16

    def __init__(self, *, n_layers: int = 8, n_experts: int = 64, cache_slots: int = 128) -> None:
        self.model_name = "frozen-moe"
        self.model_id = "frozen-moe-0001"
        self.context_limit = 8192
        self.n_layers, self.n_experts, self.cache_slots = n_layers, n_experts, cache_slots
        self._tokens: list[int] = []
        self._cache: dict[tuple[int, int], None] = {}

    def encode(self, text: str) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            special = next((s for s in self.SPECIALS if text.startswith(s, i)), None)
            if special is not None:
                ids.append(self.SPECIALS.index(special))
                i += len(special)
            else:
                ids.append(self.OFFSET + ord(text[i]))
                i += 1
        return ids

    def decode(self, ids, *, skip_special: bool = False) -> str:
        return "".join(chr(t - self.OFFSET) if t >= self.OFFSET else
                       ("" if skip_special else self.SPECIALS[t]) for t in ids)

    @property
    def pos(self) -> int:
        return len(self._tokens)

    def reset(self) -> None:
        self._tokens, self._cache = [], {}

    def snapshot(self) -> bytes:
        import json
        return json.dumps({"model": self.model_id, "tokens": self._tokens}).encode()

    def restore(self, blob: bytes) -> None:
        import json
        self._tokens = list(json.loads(blob)["tokens"])

    def _reply(self, context: str) -> str:
        return frozen_reply(context, None)

    def stream(self, prompt_ids, settings, should_stop=None):
        from strata.protocol import WindowEvent, WindowStats

        self._tokens += list(prompt_ids)
        if settings.max_new == 0:  # prefill only
            yield WindowEvent([], "", WindowStats(pos0=self.pos), True, "max_new")
            return
        target = self.encode(self._reply(self.decode(self._tokens)))
        done = 0
        while True:
            if done >= min(settings.max_new, len(target)) or (should_stop and should_stop()):
                reason = "stopped" if should_stop and should_stop() else "max_new"
                yield WindowEvent([], "", WindowStats(pos0=self.pos), True, reason)
                return
            drafts = self._drafts(settings)
            emitted = []
            for i in range(len(drafts) + 1):
                if done + i >= len(target):
                    break
                emitted.append(target[done + i])
                if emitted[-1] < self.OFFSET or i == len(drafts) or drafts[i] != emitted[-1]:
                    break
            stats = self._stats(drafts, emitted)
            self._tokens += emitted
            done += len(emitted)
            eos = emitted[-1] < self.OFFSET
            finished = eos or done >= settings.max_new
            yield WindowEvent(emitted, self.decode(emitted, skip_special=True), stats, finished,
                              ("eos" if eos else "max_new") if finished else None)
            if finished:
                return

    def _drafts(self, settings) -> list[int]:
        hist, k = self._tokens, 4
        if settings.draft == "none" or len(hist) <= k:
            return []
        limit = settings.max_draft if settings.max_draft is not None else 3
        for end in range(len(hist) - 1, k - 1, -1):
            if hist[end - k:end] == hist[-k:]:
                return hist[end:end + limit]
        return []

    def _stats(self, drafts, emitted):
        from strata.protocol import WindowStats

        rows = [self._tokens[-1] if self._tokens else 0] + drafts
        experts, cold, hits, misses = [], [], 0, 0
        for layer in range(self.n_layers):
            union = sorted({(t * 7 + layer * 13 + j * 17) % self.n_experts for t in rows for j in range(4)})
            experts.append(union)
            cold.append([])
            for e in union:
                if (layer, e) in self._cache:
                    hits += 1
                    self._cache.pop((layer, e))
                else:
                    misses += 1
                    cold[-1].append(e)
                self._cache[(layer, e)] = None
                if len(self._cache) > self.cache_slots:
                    self._cache.pop(next(iter(self._cache)))
        T = len(rows)
        n_accept = max(0, len(emitted) - 1)
        return WindowStats(
            pos0=self.pos, T=T, n_drafted=len(drafts), n_accept=n_accept, keep=len(emitted),
            emitted=len(emitted), drafter="suffix" if drafts else "none",
            window_us=900.0 + 110.0 * T + 240.0 * misses, run_us=900.0 + 110.0 * T,
            hits=hits, cold_misses=misses, urgent_loads=misses, bytes_read=misses * (3 << 20),
            cache_slots_used=len(self._cache), cache_slots_total=self.cache_slots,
            union_per_layer=[len(u) for u in experts], experts=experts, cold_experts=cold)
