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

    def __init__(self, tok, *, chat_template: str | None = None, source: str = "tokenizer.json",
                 special_tokens_map: dict[str, Any] | None = None) -> None:
        self._tok = tok
        self.source = source
        self.chat_template = chat_template
        # bos_token, eos_token, ... as tokenizer_config.json names them: chat templates read them
        self.special_tokens_map = dict(special_tokens_map or {})
        vocab = tok.get_vocab(with_added_tokens=True)
        self.special_ids = {t: vocab[t] for t in prompts.SPECIAL_TOKENS if t in vocab}
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.max_id = max(vocab.values(), default=-1)  # the largest id encode() can produce

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> "Tokenizer | None":
        """The tokenizer of a model folder; None when the folder has no tokenizer.json. A .gguf
        file carries its own tokenizer and chat template in its metadata."""
        from . import gguf as _gguf

        dense_gguf = Path(folder) / "dense.gguf"  # a pack converted from a GGUF file
        if _gguf.is_gguf(folder) or (dense_gguf.is_file() and (Path(folder) / "strata-pack.json").is_file()):
            model = _gguf.open_gguf(folder if _gguf.is_gguf(folder) else dense_gguf)
            return _gguf.load_tokenizer(model) if model.get("tokenizer.ggml.model") is not None else None
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
        template, special = _read_config(Path(folder))
        return cls(tok, chat_template=template, source=str(path), special_tokens_map=special)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], *, skip_special: bool = False) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    @property
    def eos_ids(self) -> list[int]:
        """Tokens that end a generation: end of text and end of a chat message."""
        return [self.special_ids[t] for t in (prompts.ENDOFTEXT, prompts.IM_END) if t in self.special_ids]

    def render_chat(self, messages: list[dict[str, str]], *, add_generation_prompt: bool = True,
                    **template_kwargs: Any) -> str:
        """The chat template applied to `messages` (strata.templates: sandboxed, as transformers
        renders it; templates come from model files, which are untrusted)."""
        from .templates import render

        return render(self.chat_template or prompts.CHAT_TEMPLATE, messages,
                      add_generation_prompt=add_generation_prompt, special_tokens=self.special_tokens_map,
                      source=self.source, **template_kwargs)


SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                      "mask_token")


def _token_text(value: Any) -> str | None:
    # a special token is a string, or an AddedToken record {"content": ...}
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _read_config(folder: Path) -> tuple[str | None, dict[str, Any]]:
    """(chat template, special tokens) of a model folder: `chat_template.jinja` when present
    (newer folders keep the template there), else `tokenizer_config.json`'s chat_template."""
    path = folder / "tokenizer_config.json"
    cfg: Any = {}
    if path.is_file():
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise ModelError(f"{path}: cannot read ({str(exc)[:200]})") from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{path}: not a JSON object")
    special: dict[str, Any] = {}
    for key in SPECIAL_TOKEN_KEYS:
        text = _token_text(cfg.get(key))
        if text is not None:
            special[key] = text
    extra = cfg.get("additional_special_tokens")
    if isinstance(extra, list):
        special["additional_special_tokens"] = [t for t in map(_token_text, extra) if t is not None]
    template = cfg.get("chat_template")
    if isinstance(template, list):  # named templates: take the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise ModelError(f"{path}: chat_template is not a string")
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        try:
            template = jinja.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ModelError(f"{jinja}: cannot read the chat template ({exc})") from None
    return template, special


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
