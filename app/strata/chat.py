"""Chat session core: turns rendered with the model's chat template (in a Jinja sandbox),
streamed through a TextGenerator, recorded in the session store, with a checkpoint after
every turn so undo and retry restore engine state instead of prefilling again.

Both fronts use it: the TUI iterates `send()` in a worker thread; `strata chat --no-input`
iterates it directly.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from . import prompts
from .errors import ModelError, SessionError, StrataError
from .protocol import GenerationSettings, TextGenerator, WindowEvent, WindowStats
from .store import CheckpointRing, SessionStore, TurnRecord, model_identity
from .textcheck import checked_text
from .telemetry import Collector


def render_chat(messages: list[dict[str, str]], *, add_generation_prompt: bool,
                template: str | None = None, special_tokens: dict[str, Any] | None = None,
                **template_kwargs: Any) -> str:
    """Render messages with a chat template (strata.templates: the one sandboxed environment,
    rendering as transformers' apply_chat_template does)."""
    from .templates import render

    return render(template or prompts.CHAT_TEMPLATE, messages, add_generation_prompt=add_generation_prompt,
                  special_tokens=special_tokens, **template_kwargs)


# earlier chats with the same model whose text seeds the drafter
PRIOR_SESSIONS = 4


class StoredTurnError(SessionError):
    """Undo would delete a turn that an earlier run stored; the caller must confirm."""


def check_model(info_model: dict[str, Any], generator: TextGenerator, what: str) -> None:
    """Refuse to continue a recording made by another model."""
    want, have = str(info_model.get("id", "")), str(getattr(generator, "model_id", ""))
    if want and have and want != have:
        raise SessionError(
            f"{what} was recorded with model {info_model.get('name', '?')} ({want}), but the loaded "
            f"model is {getattr(generator, 'model_name', '?')} ({have}); pass the same --model")


def _a(word: str) -> str:
    return f"{'an' if word[:1] in 'aeiou' else 'a'} {word}"


def open_recorded(store, session_id: str, kind: str, generator: TextGenerator):
    """The stored session `session_id`, checked to be a `kind` session of the loaded model."""
    info = store.get_session(session_id)
    if info.kind != kind:
        raise SessionError(f"session {info.id} is {_a(info.kind)} session, not {_a(kind)}")
    check_model(info.model, generator, f"session {info.id}")
    return info


class ChatSession:
    """A conversation. `store=None` keeps everything in memory (an unsaved session)."""

    def __init__(self, generator: TextGenerator, settings: GenerationSettings | None = None, *,
                 store: SessionStore | None = None, session_id: str | None = None,
                 system: str | None = None, ring_size: int | None = None,
                 title: str | None = None, template_kwargs: dict[str, Any] | None = None) -> None:
        if system is not None:
            checked_text(system, "the system prompt")  # before a session is recorded with it
        self.generator = generator
        self.settings = settings or GenerationSettings()
        self.store = store
        self.system = system
        self.template = (getattr(generator, "chat_template", None)
                         or getattr(getattr(generator, "tokenizer", None), "chat_template", None)
                         or prompts.CHAT_TEMPLATE)
        tokenizer = getattr(generator, "tokenizer", None)
        self.special_tokens = dict(getattr(tokenizer, "special_tokens_map", None) or {})
        self.template_kwargs = dict(template_kwargs or {})  # e.g. enable_thinking=False
        self.turns: list[TurnRecord] = []
        self.last_windows: list[WindowStats] = []
        self._context = ""          # the text committed to the engine so far
        self._end_text: dict[int, str] = {}  # turn -> the text of the end token it stopped on
        self.session_id: str | None = None
        # turns recorded by an earlier run: undoing one deletes stored history, so it needs a yes
        self.resumed_turns = 0
        if store is not None and session_id is not None:
            info = open_recorded(store, session_id, "chat", generator)
            self.session_id = info.id
            if settings is None:
                self.settings = GenerationSettings.from_dict(info.settings)
            self.turns = store.turns(info.id)
            self.resumed_turns = len(self.turns)
            self.system = next((m["content"] for m in store.messages(info.id) if m["role"] == "system"), system)
        elif store is not None:
            self.session_id = store.create_session("chat", model_identity(generator), self.settings, title=title)
            if system:
                store.add_message(self.session_id, -1, "system", system)
        self.ring = CheckpointRing.for_session(store, self.session_id, generator.model_id, ring_size)
        self.prior_documents = self._feed_prior_sessions()
        if self.turns:
            self._rewind(len(self.turns) - 1)
        else:
            generator.reset()

    def _feed_prior_sessions(self) -> int:
        """Give the suffix drafter the text of recent saved chats with this model: people
        repeat themselves across conversations (code, names, phrasing). Drafting only: the
        output cannot change."""
        add = getattr(self.generator, "add_history", None)
        if add is None or self.store is None:
            return 0
        fed = 0
        for info in self.store.list_sessions(limit=50, kind="chat"):
            if info.id == self.session_id or info.model_id != str(getattr(self.generator, "model_id", "")):
                continue
            turns = self.store.turns(info.id)
            if not turns:
                continue
            msgs = [m for t in turns for m in ({"role": "user", "content": t.input},
                                              {"role": "assistant", "content": t.output})]
            try:
                add(self.generator.encode(self._render_history(msgs)))
            except StrataError:
                continue  # a stored chat this template cannot render: skip it, drafting only
            fed += 1
            if fed >= PRIOR_SESSIONS:
                break
        return fed

    def _render_history(self, msgs: list[dict[str, str]]) -> str:
        return render_chat(msgs, add_generation_prompt=False, template=self.template,
                           special_tokens=self.special_tokens, **self.template_kwargs)

    # -- conversation text -------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        for t in self.turns:
            msgs.append({"role": "user", "content": t.input})
            msgs.append({"role": "assistant", "content": t.output})
        return msgs

    def _context_after(self, n_turns: int) -> str:
        """The text the engine holds after the first `n_turns` turns."""
        if n_turns == 0:
            return ""
        msgs = [{"role": "system", "content": self.system}] if self.system else []
        for t in self.turns[:n_turns - 1]:
            msgs += [{"role": "user", "content": t.input}, {"role": "assistant", "content": t.output}]
        last = self.turns[n_turns - 1]
        msgs.append({"role": "user", "content": last.input})
        text = self._render(msgs) + last.output
        return text + self._end(n_turns - 1, last.stop_reason)

    def _render(self, msgs: list[dict[str, str]]) -> str:
        return render_chat(msgs, add_generation_prompt=True, template=self.template,
                           special_tokens=self.special_tokens, **self.template_kwargs)

    def _end(self, index: int, stop_reason: str | None) -> str:
        # the end token is emitted (and stays in the engine) but its text is not in the output
        if stop_reason != "eos":
            return ""
        return self._end_text.get(index, prompts.IM_END)

    def _prefill(self, text: str) -> None:
        """Feed `text` without generating (max_new=0 is prefill-only in TextGenerator.stream)."""
        if text:
            for _ in self.generator.stream(self.generator.encode(text), GenerationSettings(max_new=0)):
                pass

    def _rewind(self, turn: int) -> None:
        """Put the engine at the end of turn `turn` (-1: empty), from a checkpoint when the ring
        still has one, else by prefilling the conversation again."""
        self.ring.drop_after(turn)
        self._context = self._context_after(turn + 1)
        if turn < 0:
            self.generator.reset()
            return
        cp = self.ring.find(turn=turn, label="turn")
        if cp is not None:
            try:
                self.ring.restore(self.generator, cp)
                return
            except (SessionError, ModelError):
                if self.store is None:
                    raise
                # a damaged checkpoint file is not fatal: the conversation text is enough
        if self._restore_saved_state(turn):
            return
        self.generator.reset()
        self._prefill(self._context)
        self.ring.push(turn, self.generator.pos, self.generator.snapshot())

    def _restore_saved_state(self, turn: int) -> bool:
        """The state `save_state()` stored, when it is the state after `turn`."""
        if self.store is None or self.session_id is None:
            return False
        recs = [r for r in self.store.checkpoints(self.session_id, label="state") if r.turn_idx == turn]
        if not recs:
            return False
        try:
            self.generator.restore(self.store.load_checkpoint(recs[-1], self.generator.model_id))
        except (SessionError, ModelError):
            return False
        if self.generator.pos != recs[-1].pos:
            self.generator.reset()
            return False
        self.ring.push(turn, self.generator.pos, self.generator.snapshot())
        return True

    # -- turns -------------------------------------------------------------------------------
    def send(self, text: str, settings: GenerationSettings | None = None,
             should_stop: Callable[[], bool] | None = None) -> Iterator[WindowEvent]:
        """Stream the reply to `text`. The turn is recorded when the stream ends (also when the
        consumer stops early: then with stop_reason "stopped")."""
        settings = settings or self.settings
        checked_text(text, "the message")
        msgs = self.messages + [{"role": "user", "content": text}]
        prompt = self._render(msgs)
        if not prompt.startswith(self._context):
            # the template rewrote earlier turns (some do): start over from the full text
            self.generator.reset()
            self._context = ""
        ids = self.generator.encode(prompt[len(self._context):])
        return self._run(text, prompt, ids, settings, should_stop)

    def _run(self, text: str, prompt: str, ids: list[int], settings: GenerationSettings,
             should_stop: Callable[[], bool] | None) -> Iterator[WindowEvent]:
        rec = Collector()
        stream = self.generator.stream(ids, settings, should_stop)  # refusals record no turn
        try:
            yield from rec.follow(stream)
        finally:
            if rec.stop_reason == "eos" and rec.last_token is not None:
                self._end_text[len(self.turns)] = self.generator.decode([rec.last_token]) or prompts.IM_END
            self._finish(text, prompt, rec.text, rec.stop_reason, settings, rec.windows)

    def _finish(self, text: str, prompt: str, output: str, stop_reason: str,
                settings: GenerationSettings, windows: list[WindowStats]) -> None:
        index = len(self.turns)
        turn = TurnRecord(index=index, input=text, output=output, stop_reason=stop_reason,
                          settings=settings.to_dict())
        self.turns.append(turn)
        self.last_windows = windows
        self._context = prompt + output + self._end(index, stop_reason)
        if self.store is not None and self.session_id is not None:
            self.store.add_turn(self.session_id, turn)
            self.store.add_message(self.session_id, index, "user", text)
            self.store.add_message(self.session_id, index, "assistant", output)
            self.store.add_windows(self.session_id, index, windows)
        self.ring.push(index, self.generator.pos, self.generator.snapshot())

    def undo_deletes_stored(self) -> bool:
        """True when undoing the last turn would delete a turn an earlier run recorded."""
        return bool(self.turns) and self.store is not None and self.turns[-1].index < self.resumed_turns

    def undo(self, *, delete_stored: bool = False) -> TurnRecord:
        """Remove the last turn and put the engine back to the turn before it. A turn recorded
        by an earlier run of a resumed session is deleted from the store only with
        `delete_stored=True` (else a StoredTurnError says so and nothing changes)."""
        if not self.turns:
            raise SessionError("nothing to undo: the conversation is empty")
        last = self.turns[-1]
        if self.undo_deletes_stored() and not delete_stored:
            raise StoredTurnError(f"turn {last.index + 1} of session {self.session_id} was recorded before "
                                  "this run; undoing it deletes it from the session store (confirm first)")
        keep = len(self.turns) - 1
        self._rewind(keep - 1)
        self.turns = self.turns[:keep]
        self.resumed_turns = min(self.resumed_turns, keep)
        self._end_text = {k: v for k, v in self._end_text.items() if k < keep}
        self._context = self._context_after(keep)
        if self.store is not None and self.session_id is not None:
            self.store.truncate_turns(self.session_id, keep)
        return last

    def retry(self, settings: GenerationSettings | None = None,
              should_stop: Callable[[], bool] | None = None, *,
              delete_stored: bool = False) -> Iterator[WindowEvent]:
        """Undo the last turn and send its input again (e.g. with other settings)."""
        last = self.undo(delete_stored=delete_stored)
        return self.send(last.input, settings, should_stop)

    def save_state(self) -> None:
        """Save the engine state with the session (a resumed session skips the prefill)."""
        if self.store is None or self.session_id is None:
            raise SessionError("this chat is not recorded in a session store")
        self.store.save_state(self.session_id, len(self.turns) - 1, self.generator.pos,
                              self.generator.snapshot(), self.generator.model_id)
