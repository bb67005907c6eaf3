"""Tokenization for a checkpoint: `tokenizer.json` through the `tokenizers` library, the special
tokens of strata.prompts, the chat template of `tokenizer_config.json` rendered in a Jinja
sandbox, and incremental detokenization that never emits a broken UTF-8 character."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

from . import prompts
from .errors import ModelError

_REPLACEMENT = "\ufffd"


class Tokenizer:
    """A checkpoint's tokenizer. Special tokens in the text (``<|im_start|>`` ...) map to their ids."""

    def __init__(self, tok, *, chat_template: str | None = None, source: str = "tokenizer.json") -> None:
        self._tok = tok
        self.source = source
        self.chat_template = chat_template
        vocab = tok.get_vocab(with_added_tokens=True)
        self.special_ids = {t: vocab[t] for t in prompts.SPECIAL_TOKENS if t in vocab}
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.max_id = max(vocab.values(), default=-1)  # the largest id encode() can produce

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "Tokenizer | None":
        """The tokenizer of a model folder; None when the folder has no tokenizer.json."""
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            return None
        try:
            from tokenizers import Tokenizer as _HFTokenizer
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise ModelError(f"the tokenizers library is needed to read {path} ({exc})") from None
        try:
            tok = _HFTokenizer.from_file(str(path))
        except Exception as exc:  # noqa: BLE001 - any parse failure is one error naming the file
            raise ModelError(f"{path}: not a valid tokenizer.json ({str(exc).splitlines()[0][:200]})") from None
        return cls(tok, chat_template=_read_chat_template(Path(folder)), source=str(path))

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    @property
    def eos_ids(self) -> list[int]:
        """Tokens that end a generation: end of text and end of a chat message."""
        return [self.special_ids[t] for t in (prompts.ENDOFTEXT, prompts.IM_END) if t in self.special_ids]

    def render_chat(self, messages: list[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """The chat template applied to `messages` in a sandbox (templates come from model files,
        which are untrusted)."""
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        template = self.chat_template or prompts.CHAT_TEMPLATE
        env = ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=False, keep_trailing_newline=True)
        try:
            return env.from_string(template).render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token="", eos_token=prompts.ENDOFTEXT)
        except TemplateError as exc:
            raise ModelError(f"{self.source}: the chat template failed ({exc})") from None


def _read_chat_template(folder: Path) -> str | None:
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return None
    try:
        cfg: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read ({exc})") from None
    template = cfg.get("chat_template") if isinstance(cfg, dict) else None
    if isinstance(template, list):  # named templates: take the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise ModelError(f"{path}: chat_template is not a string")
    return template


class IncrementalDecoder:
    """Turns a growing token list into text pieces. A piece is emitted only once the bytes it ends
    with form complete characters, so a multi-byte character split across tokens (or windows)
    never shows up as a replacement character half way; `flush` gives what is left at the end."""

    def __init__(self, decode, *, window: int = 6) -> None:
        self._decode = decode           # ids -> str
        self._ids: list[int] = []
        self._prefix = 0                # start of the tokens re-decoded for context
        self._read = 0                  # tokens whose text was emitted
        self._window = window

    def push(self, ids: Sequence[int]) -> str:
        self._ids.extend(int(i) for i in ids)
        return self._emit(final=False)

    def flush(self) -> str:
        return self._emit(final=True)

    def _emit(self, *, final: bool) -> str:
        if self._read >= len(self._ids):
            return ""
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if not final and after.endswith(_REPLACEMENT) and len(after) > len(before):
            return ""  # an incomplete character: wait for the next token
        if not after.startswith(before):
            # decoding is not prefix-stable here (rare merges): emit the difference at the end only
            if not final:
                return ""
        piece = after[len(before):]
        self._read = len(self._ids)
        self._prefix = max(self._prefix, self._read - self._window)
        return piece
