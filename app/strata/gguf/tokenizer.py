"""The tokenizer of a GGUF file, built from its metadata as a `tokenizers` object.

Only byte-level BPE vocabularies (``tokenizer.ggml.model == "gpt2"``) are built, which is what the
Qwen families use; the pre-tokenizer split pattern is chosen by ``tokenizer.ggml.pre``. Control
tokens become special added tokens, user-defined ones plain added tokens, as in the
tokenizer.json the file was converted from.
"""
from __future__ import annotations

from typing import Any

from ..errors import ModelError
from .reader import GGUFModel

# Split patterns of the pre-tokenizers llama.cpp names (the regexes of the original
# tokenizer.json files; the Qwen ones differ from GPT-2's in digits and newline handling).
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PRE_TOKENIZERS = {"qwen2": (_QWEN2, True), "qwen35": (_QWEN35, True), "llama-bpe": (_LLAMA3, False),
                  "gpt2": (_GPT2, False), "default": (_GPT2, False)}  # pattern, NFC normalizer

TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
MAX_VOCAB = 1 << 22


def _list(model: GGUFModel, key: str, kind: type, required: bool = True) -> list | None:
    v = model.get(key)
    if v is None:
        if required:
            raise ModelError(f"{model.path}: missing metadata key {key} (no tokenizer in this file)")
        return None
    if not isinstance(v, list) or len(v) > MAX_VOCAB or any(not isinstance(x, kind) or isinstance(x, bool) for x in v):
        raise ModelError(f"{model.path}: metadata key {key} is not a list of {kind.__name__}")
    return v


def build_tokenizer(model: GGUFModel) -> Any:
    """A `tokenizers.Tokenizer` equal to the one the GGUF vocabulary came from."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    kind = model.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelError(f"{model.path}: tokenizer.ggml.model {kind!r} is not supported (gpt2 byte-level BPE only)")
    pre = model.get("tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        raise ModelError(f"{model.path}: tokenizer.ggml.pre {pre!r} is not supported ({', '.join(PRE_TOKENIZERS)})")
    tokens = _list(model, "tokenizer.ggml.tokens", str)
    merges = _list(model, "tokenizer.ggml.merges", str)
    types = _list(model, "tokenizer.ggml.token_type", int, required=False)
    if types is not None and len(types) != len(tokens):
        raise ModelError(f"{model.path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")
    vocab: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)
    pairs = []
    for m in merges:
        left, sep, right = m.partition(" ")
        if not sep or not left or not right:
            raise ModelError(f"{model.path}: bad merge {m[:40]!r} in tokenizer.ggml.merges")
        pairs.append((left, right))
    try:
        tok = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    except Exception as exc:  # noqa: BLE001 - any inconsistency is one error naming the file
        raise ModelError(f"{model.path}: the GGUF vocabulary does not form a BPE tokenizer ({str(exc)[:120]})") from None
    pattern, nfc = PRE_TOKENIZERS[pre]
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    if types is not None:
        added = [AddedToken(tokens[i], special=(t == TOKEN_CONTROL), normalized=False)
                 for i, t in enumerate(types) if t in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
        special = [a for a in added if a.special]
        plain = [a for a in added if not a.special]
        if plain:
            tok.add_tokens(plain)
        if special:
            tok.add_special_tokens(special)
    return tok


def chat_template(model: GGUFModel) -> str | None:
    t = model.get("tokenizer.chat_template")
    if t is not None and not isinstance(t, str):
        raise ModelError(f"{model.path}: tokenizer.chat_template is not a string")
    return t


def load_tokenizer(model: GGUFModel):
    """strata's Tokenizer (special tokens, chat template, incremental decoding) for a GGUF model."""
    from ..tokenizer import Tokenizer

    return Tokenizer(build_tokenizer(model), chat_template=chat_template(model), source=model.path)
