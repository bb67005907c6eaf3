"""A real `strata.generate.Generator` over the engine's deterministic FakeLM with a byte
tokenizer: the shell cores and the TUI tests drive the C++ decode loop with it."""
from __future__ import annotations

import strata._engine as E
from strata import prompts
from strata.generate import Generator

SPECIALS = {t: 256 + i for i, t in enumerate(prompts.SPECIAL_TOKENS)}
VOCAB = 256 + len(SPECIALS)


class ByteTokenizer:
    """UTF-8 bytes plus the special tokens (enough for the cores; not a real vocabulary)."""

    chat_template = None
    eos_ids = [SPECIALS[prompts.IM_END], SPECIALS[prompts.ENDOFTEXT]]

    def encode(self, text):
        ids, i = [], 0
        while i < len(text):
            for tok, tid in SPECIALS.items():
                if text.startswith(tok, i):
                    ids.append(tid)
                    i += len(tok)
                    break
            else:
                ids.extend(text[i].encode("utf-8"))
                i += 1
        return ids

    def decode(self, ids, *, skip_special=False):
        out, buf = [], bytearray()
        names = {v: k for k, v in SPECIALS.items()}
        for t in ids:
            if t < 256:
                buf.append(t)
                continue
            out.append(buf.decode("utf-8", "replace"))
            buf = bytearray()
            if not skip_special:
                out.append(names[t])
        out.append(buf.decode("utf-8", "replace"))
        return "".join(out)


def make_generator(seed=3):
    lm = E.FakeLM(VOCAB, seed=seed, context_limit=4096, copy_bias=14.0)
    return Generator(lm, ByteTokenizer(), model_name=f"fakelm-{seed}", model_id=f"fakelm-{seed}")
