"""Train strata-tiny's byte-level BPE tokenizer on the training corpus.

Special tokens are exactly strata.prompts.SPECIAL_TOKENS (ids 0..5, in that order); the chat
template is strata.prompts.CHAT_TEMPLATE; eos is <|endoftext|>.

    python train/train_tokenizer.py --corpus .devdata/corpus/train.jsonl.gz --out .devdata/tok
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "app"))
from strata import prompts  # noqa: E402

VOCAB_SIZE = 8192
SAMPLE_BYTES = 48_000_000


def corpus_sample(path: Path, limit: int):
    used = 0
    with gzip.open(path, "rt") as f:
        for i, line in enumerate(f):
            if i % 3:  # every third file, spread over all sources
                continue
            text = json.loads(line)["text"]
            used += len(text)
            if used > limit:
                return
            yield text


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": prompts.ENDOFTEXT,
        "pad_token": prompts.ENDOFTEXT,
        "unk_token": None,
        "additional_special_tokens": list(prompts.SPECIAL_TOKENS[1:]),
        "chat_template": prompts.CHAT_TEMPLATE,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": False,
        "add_eos_token": False,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    args = ap.parse_args()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=args.vocab_size,
        min_frequency=2,
        special_tokens=list(prompts.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_sample(args.corpus, SAMPLE_BYTES), trainer=trainer)
    for i, special in enumerate(prompts.SPECIAL_TOKENS):
        assert tok.token_to_id(special) == i, special
    args.out.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out / "tokenizer.json"))
    (args.out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    print(f"vocab {tok.get_vocab_size()} saved to {args.out}")


if __name__ == "__main__":
    main()
