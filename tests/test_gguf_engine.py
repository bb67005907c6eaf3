"""GGUF files end to end: strata.load("x.gguf") on files written from tiny random Hugging Face
checkpoints the way llama.cpp's converter writes them.

- F32 files give transformers' logits (the outside reference) and strata's on the HF folder;
- quantized files (Q8_0, Q4_K, a Q4_K/Q6_K mix) in exact-activation mode give the logits of the
  same model stored as the gguf-py dequantization in F32, bit for bit;
- with int8 activations (the default) decode windows stay exact: forced rejection equals serial
  decoding, and a row's logits do not depend on T or the other rows;
- `strata run --model x.gguf` uses the tokenizer and template from the file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import strata  # noqa: E402
from strata import _engine  # noqa: E402

from gguf_helpers import write_gguf  # noqa: E402
from hf_models import make_hf_model, reference_logits  # noqa: E402
from test_gguf_tokenizer import STRATA_TINY  # noqa: E402

ARCHS = ["qwen3_moe", "qwen3_next", "qwen3_5_moe_text"]
# rows of 256 weights everywhere, so that every matrix can be a K-quant
WIDE = dict(hidden_size=256, head_dim=64, moe_intermediate_size=256, intermediate_size=256)
WIDE_LINEAR = dict(shared_expert_intermediate_size=256, linear_key_head_dim=64, linear_value_head_dim=64)
IDS = [1, 5, 7, 2, 9, 33, 4, 8, 11, 12, 50, 3]


def wide_model(folder, arch, seed=0):
    kw = dict(WIDE)
    if arch == "qwen3_moe":
        kw["norm_topk_prob"] = True  # what llama.cpp computes for qwen3moe
    else:
        kw.update(WIDE_LINEAR)
    return make_hf_model(str(folder), arch, seed=seed, **kw)


def logits(path, ids, **kw):
    eng = strata.load(path, threads=2, **kw)
    out = np.array(eng.run(ids))
    eng.commit(len(ids))
    return out


@pytest.fixture
def exact_activations():
    _engine.quant_set_activations("f32")
    yield
    _engine.quant_set_activations("int8")


@pytest.mark.parametrize("arch", ARCHS + ["qwen3_5_moe"])
def test_f32_gguf_matches_transformers_and_hf_folder(tmp_path, arch):
    extra = {"norm_topk_prob": True} if arch == "qwen3_moe" else {}
    folder, model = make_hf_model(str(tmp_path / "hf"), arch, seed=2, **extra)
    path = write_gguf(folder, str(tmp_path / "m.gguf"))
    got = logits(path, IDS)
    ref = reference_logits(model, IDS)
    np.testing.assert_allclose(got, ref, atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(got, logits(folder, IDS), atol=5e-6, rtol=1e-5)


@pytest.mark.parametrize("arch, layout", [("qwen3_next", "fused_qkvz"), ("qwen3_moe", "split_experts"),
                                          ("qwen3_next", "split_experts")])
def test_older_gguf_layouts(tmp_path, arch, layout):
    """Older converters: qwen3next's in_proj_qkvz kept whole (ssm_in), one tensor per expert."""
    extra = {"norm_topk_prob": True} if arch == "qwen3_moe" else {}
    folder, model = make_hf_model(str(tmp_path / "hf"), arch, seed=5, **extra)
    path = write_gguf(folder, str(tmp_path / "m.gguf"), **{layout: True})
    names = {t["name"] for t in _tensor_types(path)}
    assert ("blk.0.ssm_in.weight" in names) if layout == "fused_qkvz" else ("blk.0.ffn_up.3.weight" in names)
    np.testing.assert_allclose(logits(path, IDS), logits(folder, IDS), atol=5e-6, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("qtype, expert_qtype", [("Q8_0", None), ("Q4_K", None), ("Q8_0", "Q4_K"), ("F16", None),
                                                 ("BF16", "Q4_K"), ("Q8_0", "Q5_1")])
def test_quantized_gguf_equals_its_dequantized_f32_model(tmp_path, exact_activations, arch, qtype, expert_qtype):
    folder, _ = wide_model(tmp_path / "hf", arch, seed=4)
    q = write_gguf(folder, str(tmp_path / "q.gguf"), qtype=qtype, expert_qtype=expert_qtype)
    d = write_gguf(folder, str(tmp_path / "d.gguf"), qtype=qtype, expert_qtype=expert_qtype, dequantized=True)
    kinds = {t["type"] for t in _tensor_types(q)}
    assert qtype in kinds and (expert_qtype or qtype) in kinds
    assert np.array_equal(logits(q, IDS), logits(d, IDS))


def _tensor_types(path):
    from strata.gguf import open_gguf

    return [{"name": t.name, "type": t.type} for t in open_gguf(path).tensors.values()]


@pytest.fixture(scope="module", params=["Q8_0", "Q4_K", "Q5_1"])
def quantized(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("q")
    folder, _ = wide_model(tmp / "hf", "qwen3_next", seed=7)
    path = write_gguf(folder, str(tmp / "m.gguf"), qtype=request.param)
    assert request.param in {t["type"] for t in _tensor_types(path)}
    rng = np.random.default_rng(3)
    seq = rng.integers(0, 96, 24).tolist()
    eng = strata.load(path, threads=2)
    ref, states = [], [eng.save_state()]
    for t in seq:
        ref.append(eng.run([t])[0].copy())
        eng.commit(1)
        states.append(eng.save_state())
    return path, seq, np.stack(ref), states


def test_forced_rejection_on_quantized_weights(quantized):
    path, seq, ref, states = quantized
    eng = strata.load(path, threads=2)
    for pos0 in (0, 3, 9):
        for T in (2, 4, 7):
            for keep in range(1, T + 1):
                eng.load_state(states[pos0])
                window = seq[pos0:pos0 + T]
                if keep < T:
                    window = window[:keep] + [(seq[pos0 + keep] + 1) % 96] + window[keep + 1:]
                out = eng.run(window)
                assert np.array_equal(out[:keep], ref[pos0:pos0 + keep]), (pos0, T, keep)
                eng.commit(keep)
                nxt = eng.run([seq[pos0 + keep]])
                assert np.array_equal(nxt[0], ref[pos0 + keep]), (pos0, T, keep)
                eng.commit(1)
                assert eng.save_state() == states[pos0 + keep + 1]


def test_batch_invariance_on_quantized_weights(quantized):
    path, seq, ref, states = quantized
    rng = np.random.default_rng(1)
    engines = [strata.load(path, threads=n) for n in (1, 2)]
    for trial in range(8):
        pos0 = int(rng.integers(0, 12))
        T = int(rng.integers(2, 17))
        window = rng.integers(0, 96, T).tolist()
        window[0] = seq[pos0]
        eng = engines[trial % 2]
        eng.load_state(states[pos0])
        full = eng.run(window)
        eng.commit(1)
        assert np.array_equal(full[0], ref[pos0])
        i = int(rng.integers(0, T))
        other = engines[(trial + 1) % 2]
        other.load_state(states[pos0])
        part = other.run(window[:i + 1] + rng.integers(0, 96, int(rng.integers(0, 4))).tolist())
        other.commit(1)
        assert np.array_equal(part[i], full[i]), (pos0, T, i)


def test_strata_run_with_a_gguf_file(tmp_path):
    """One .gguf is enough for `strata run`: weights, tokenizer and chat template."""
    folder, _ = make_hf_model(str(tmp_path / "hf"), "qwen3_next", seed=1, vocab_size=8192)
    template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" \
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    path = write_gguf(folder, str(tmp_path / "m.gguf"), qtype="Q8_0", tokenizer_json=STRATA_TINY,
                      chat_template=template)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(strata.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    outs = []
    for draft in ("none", "suffix"):
        r = subprocess.run([sys.executable, "-m", "strata", "run", "--model", path, "--prompt", "def add(a, b):",
                            "--max-new", "12", "--json", "--threads", "1", "--draft", draft],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(json.loads(r.stdout)["tokens"])
    assert outs[0] == outs[1] and len(outs[0]) == 12
    r = subprocess.run([sys.executable, "-m", "strata", "run", "--model", path, "--chat", "--prompt", "hi",
                        "--max-new", "4", "--threads", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr


def test_corrupt_gguf_is_a_one_line_model_error(tmp_path):
    folder, _ = make_hf_model(str(tmp_path / "hf"), "qwen3_moe", seed=1)
    path = write_gguf(folder, str(tmp_path / "m.gguf"))
    data = open(path, "rb").read()
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[: len(data) - 100])
    with pytest.raises(strata.ModelError) as e:
        strata.load(str(bad))
    assert "truncated" in str(e.value) and "\n" not in str(e.value)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(strata.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "strata", "run", "--model", str(bad), "--prompt-ids", "1 2"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
