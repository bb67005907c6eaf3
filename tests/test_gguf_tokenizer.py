"""The tokenizer built from GGUF metadata encodes exactly like the tokenizer.json the vocabulary
came from: the bundled strata-tiny tokenizer (GPT-2 byte-level pre-tokenizer) and a BPE trained
here with Qwen2's tokenizer.json structure (NFC, split regex, byte-level)."""
from __future__ import annotations

import json
import os

import pytest
from gguf import GGUFWriter
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from gguf_helpers import add_tokenizer
from strata.errors import ModelError
from strata.gguf import load_tokenizer, open_gguf

HERE = os.path.dirname(os.path.abspath(__file__))
STRATA_TINY = os.path.join(HERE, "..", "app", "strata", "models", "strata-tiny", "tokenizer.json")

TEXTS = [
    "Hello, world! It's 2026 and we're testing 12345 tokens.",
    "def f(x):\n    return x * 2  # doubled\n\n\n\tindent\r\nwindows line",
    "Ünïcödé: café, naïve, 日本語のテキスト, emoji 🎉🚀, Cafe\u0301 (combining)",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n<think>\nok</think>",
    "   leading spaces and trailing   ",
    "I'LL SHOUT, you'd whisper; they've gone. 3.14159e-10 x 1,000,000",
    "",
]

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def qwen2_style_tokenizer(path: str) -> str:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([t * 3 for t in TEXTS] + ["the quick brown fox jumps over the lazy dog"] * 5, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False),
                    AddedToken("</think>", special=False, normalized=False)])
    tok.save(path)
    return path


def gguf_with_tokenizer(tmp_path, tokenizer_json: str, pre: str, template: str | None = "{{ messages }}") -> str:
    path = str(tmp_path / "tok.gguf")
    w = GGUFWriter(path, "qwen3moe")
    add_tokenizer(w, tokenizer_json, template, pre=pre)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("kind", ["strata-tiny", "qwen2"])
def test_gguf_tokenizer_encodes_like_tokenizer_json(tmp_path, kind):
    if kind == "strata-tiny":
        tj, pre = STRATA_TINY, "gpt2"
    else:
        tj, pre = qwen2_style_tokenizer(str(tmp_path / "tokenizer.json")), "qwen2"
    ref = Tokenizer.from_file(tj)
    ours = load_tokenizer(open_gguf(gguf_with_tokenizer(tmp_path, tj, pre)))
    assert ours.vocab_size == ref.get_vocab_size(with_added_tokens=True)
    for text in TEXTS:
        want = ref.encode(text, add_special_tokens=False).ids
        assert ours.encode(text) == want, text
        assert ours.decode(want) == ref.decode(want, skip_special_tokens=False)
    assert ours.special_ids.get("<|im_end|>") == ref.token_to_id("<|im_end|>")


def test_chat_template_comes_from_metadata(tmp_path):
    tok = load_tokenizer(open_gguf(gguf_with_tokenizer(
        tmp_path, STRATA_TINY, "gpt2", "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}")))
    assert tok.render_chat([{"role": "user", "content": "hi"}]) == "[user]hi"


def test_unsupported_tokenizers_are_one_line_errors(tmp_path):
    path = gguf_with_tokenizer(tmp_path, STRATA_TINY, "some-new-pre")
    with pytest.raises(ModelError, match="tokenizer.ggml.pre 'some-new-pre' is not supported"):
        load_tokenizer(open_gguf(path))
    path = str(tmp_path / "spm.gguf")
    w = GGUFWriter(path, "qwen3moe")
    w.add_tokenizer_model("llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelError, match="tokenizer.ggml.model 'llama' is not supported"):
        load_tokenizer(open_gguf(path))
