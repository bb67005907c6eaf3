"""The bundled strata-tiny model: sane config and tokenizer, loads in transformers as saved, is
trained (not random), and strata's engine picks the same greedy tokens as transformers."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from strata import prompts
from strata.models import bundled_model_path, resolve_model

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

MODEL = bundled_model_path()

SNIPPET = '''import os


def read_lines(path):
    """Return the lines of the file at path."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\\n") for line in f]


class Counter:
    def __init__(self):
        self.count = 0

    def increment(self):
        self.count += 1
        return self.count
'''


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(MODEL / "tokenizer.json"))


@pytest.fixture(scope="module")
def hf_model():
    from transformers import Qwen3NextForCausalLM

    model, info = Qwen3NextForCausalLM.from_pretrained(MODEL, dtype=torch.float32, output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    return model.eval()


def test_bundled_model_resolves_and_fits_the_size_budget():
    assert resolve_model(None) == MODEL
    weights = sorted(MODEL.glob("*.safetensors"))
    assert [p.name for p in weights] == ["model.safetensors"]
    # at most 50 MB: the checkout (~10 MB besides the model) plus a training call's scripts
    # (.devtrain/, ~1 MB) must stay under the 64 MiB one GPU call carries (train/README.md)
    assert sum(p.stat().st_size for p in weights) <= 50_000_000
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "MODEL_CARD.md"):
        assert (MODEL / name).is_file(), name


def test_config_is_hybrid_moe():
    cfg = json.loads((MODEL / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_next" and cfg["architectures"] == ["Qwen3NextForCausalLM"]
    types = cfg["layer_types"]
    assert len(types) == cfg["num_hidden_layers"]
    # a hybrid with attention in all but two layers (whole-file copying is attention's job; v2 had
    # 6 of 8, v9 grew two more) and Gated DeltaNet in layers 0 and 5, listed in layer_types
    assert types.count("linear_attention") >= 2 and types.count("full_attention") >= 2
    assert [i for i, t in enumerate(types) if t == "linear_attention"] == [0, 5]
    assert "full_attention_interval" not in cfg
    assert 16 <= cfg["num_experts"] <= 64 and cfg["num_experts_per_tok"] == 4
    assert cfg["shared_expert_intermediate_size"] > 0 and not cfg["mlp_only_layers"]
    assert cfg["eos_token_id"] == 0


def test_safetensors_header_is_bf16_and_complete():
    from safetensors import safe_open

    with safe_open(str(MODEL / "model.safetensors"), "pt") as f:
        keys = list(f.keys())
        dtypes = {f.get_slice(k).get_dtype() for k in keys}
    assert dtypes == {"BF16"}
    cfg = json.loads((MODEL / "config.json").read_text())
    per_expert = [k for k in keys if ".mlp.experts." in k]
    assert len(per_expert) == cfg["num_hidden_layers"] * cfg["num_experts"] * 3
    assert "lm_head.weight" in keys and "model.embed_tokens.weight" in keys


def test_tokenizer_special_tokens_and_chat_template(tokenizer):
    for i, special in enumerate(prompts.SPECIAL_TOKENS):
        assert tokenizer.token_to_id(special) == i
    added = {t.content: t for t in tokenizer.get_added_tokens_decoder().values()}
    assert set(added) == set(prompts.SPECIAL_TOKENS) and all(t.special for t in added.values())
    ex = prompts.edit_example("pkg/mod.py", SNIPPET, "Rename `count` to `total`.",
                              SNIPPET.replace("count", "total"))
    ids = tokenizer.encode(ex).ids
    assert ids[0] == tokenizer.token_to_id(prompts.FILE) and ids[-1] == tokenizer.token_to_id(prompts.ENDOFTEXT)
    assert tokenizer.decode(ids, skip_special_tokens=False) == ex  # byte-level: lossless
    tcfg = json.loads((MODEL / "tokenizer_config.json").read_text())
    assert tcfg["chat_template"] == prompts.CHAT_TEMPLATE
    assert tcfg["eos_token"] == prompts.ENDOFTEXT
    assert tokenizer.get_vocab_size() == json.loads((MODEL / "config.json").read_text())["vocab_size"]


def test_transformers_tokenizer_renders_the_chat_template():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == prompts.ENDOFTEXT


def test_model_is_trained(hf_model, tokenizer):
    """A random model scores about ln(8192) = 9.0 nats per token; the trained one far lower."""
    ids = torch.tensor([[0] + tokenizer.encode(SNIPPET).ids])
    with torch.no_grad():
        logits = hf_model(input_ids=ids).logits
    nll = torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).item()
    assert nll < 2.5, nll


def test_strata_picks_the_same_greedy_tokens_as_transformers(hf_model, tokenizer):
    """strata decodes greedily; one transformers forward over prompt + strata's tokens must
    pick the same token at every generated position (so transformers' greedy decode of the
    prompt yields the same sequence)."""
    import strata

    eng = strata.load(MODEL, threads=2)
    cases = [
        "import os\nimport sys\n\n\ndef main(argv):",
        prompts.edit_prompt("util.py", "import os\n\n\ndef size(path):\n    return os.path.getsize(path)\n",
                            "Add `import json`."),
        "class Stack:\n    def __init__(self):",
    ]
    for text in cases:
        ids = tokenizer.encode(text).ids
        eng.reset()
        logits = eng.run(ids)
        eng.commit(len(ids))
        new = [int(np.argmax(logits[-1]))]
        while len(new) < 24 and new[-1] != 0:
            logits = eng.run([new[-1]])
            eng.commit(1)
            new.append(int(np.argmax(logits[-1])))
        with torch.no_grad():
            ref = hf_model(input_ids=torch.tensor([ids + new])).logits[0].numpy()
        ref_choice = ref[len(ids) - 1:len(ids) - 1 + len(new)].argmax(-1).tolist()
        assert ref_choice == new, (text, tokenizer.decode(new), tokenizer.decode(ref_choice))


def test_the_readme_first_edit_is_right():
    """The README's first command (`strata edit examples/arith.py -i 'Add `import math`.'`) on
    the bundled model: strata, greedy with drafting on and `strata edit`'s copy bias (v9 without
    the bias drops `add`), writes exactly that edit and stops."""
    import strata  # noqa: F401 - the engine must be importable
    from strata.edit import EDIT_COPY_BIAS
    from strata.generate import Generator
    from strata.settings import GenerationSettings

    source = (Path(__file__).resolve().parents[1] / "examples" / "arith.py").read_text()
    gen = Generator.from_path(MODEL, threads=2)
    ids = gen.encode(prompts.edit_prompt("arith.py", source, "Add `import math`."))
    tokens, reason = gen.generate(ids, GenerationSettings(max_new=len(gen.encode(source)) + 64, draft="suffix",
                                                           copy_bias=EDIT_COPY_BIAS))
    assert reason == "eos"
    out = gen.decode([t for t in tokens if t not in gen.eos_ids])
    assert out == source.replace("import os\n", "import math\nimport os\n", 1)
