"""Bad-input corpus: config.json values of the wrong type or absurd size, and damaged config files.

Every case is generated from one valid tiny checkpoint: each key the architecture reads gets
values of the wrong type, out of range, past the engine's integers, one off from the weights, and
absurdly large (a 1 KB config must not make strata allocate gigabytes: counts are checked
against the safetensors tensors before any per-layer or per-expert table is built). Each must be a
ModelError naming config.json (or the tensor that disagrees), exit code 3 from the CLI.
"""
from __future__ import annotations

import json
import math
import os
import resource

import pytest

import strata
from strata.cli import ExitCode
from strata.errors import ModelError
from strata.testing.devmodel import write_random_model

from bad_inputs import assert_one_line_error, run_cli

# keys whose value fixes a tensor shape or count: one off from the weights is wrong too
SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "num_experts", "moe_intermediate_size", "shared_expert_intermediate_size",
              "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
              "linear_conv_kernel_dim")
INT_KEYS = SHAPE_KEYS + ("num_experts_per_tok", "max_position_embeddings", "decoder_sparse_step")
BAD_INTS = (-1, 2**31, 2**63, 10**30, 1.5, "8", True, [], {"n": 1})
HUGE = (10**6, 10**9, 2**31 - 1)  # the size of a model nobody has: caught before allocating
FLOAT_KEYS = ("rms_norm_eps",)
BAD_FLOATS = (math.nan, math.inf, -math.inf, -1.0, 0.0, "1e-6", [1e-6])


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    write_random_model(folder, "qwen3_next", seed=0, preset="tiny")
    with open(folder / "config.json") as f:
        return folder, json.load(f)


def _variant(good, tmp_path, mutate) -> str:
    folder, cfg = good
    cfg = json.loads(json.dumps(cfg))
    mutate(cfg)
    out = tmp_path / "m"
    out.mkdir()
    os.symlink(folder / "model.safetensors", out / "model.safetensors")  # the weights stay valid
    (out / "config.json").write_text(json.dumps(cfg))  # NaN/Infinity are written as JS literals
    return str(out)


def _set(key, value):
    def mutate(cfg):
        cfg[key] = value
    return mutate


def _load_fails_cleanly(path: str, *needles: str) -> str:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ModelError) as info:
        strata.load(path, threads=1)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 400, msg
    assert "config.json" in msg or "tensor" in msg, msg
    for n in needles:
        assert n in msg, msg
    assert grown_kib < 256 * 1024, f"refusing {path} grew the process by {grown_kib} KiB"
    return msg


def test_the_unchanged_checkpoint_loads(good):
    strata.load(str(good[0]), threads=1)


@pytest.mark.parametrize("key", INT_KEYS)
@pytest.mark.parametrize("value", BAD_INTS, ids=repr)
def test_integers_of_the_wrong_type_or_range(good, tmp_path, key, value):
    _load_fails_cleanly(_variant(good, tmp_path, _set(key, value)), key)


@pytest.mark.parametrize("key", SHAPE_KEYS)
@pytest.mark.parametrize("value", HUGE, ids=repr)
def test_absurd_sizes_are_refused_before_allocating(good, tmp_path, key, value):
    _load_fails_cleanly(_variant(good, tmp_path, _set(key, value)))


@pytest.mark.parametrize("key", SHAPE_KEYS)
def test_one_off_from_the_weights(good, tmp_path, key):
    _load_fails_cleanly(_variant(good, tmp_path, lambda cfg: cfg.__setitem__(key, cfg.get(key, 4) + 1)))


@pytest.mark.parametrize("key", FLOAT_KEYS)
@pytest.mark.parametrize("value", BAD_FLOATS, ids=repr)
def test_floats_that_are_not_finite_positive_numbers(good, tmp_path, key, value):
    _load_fails_cleanly(_variant(good, tmp_path, _set(key, value)), key)


ROPE_CASES = [{"rope_theta": v} for v in (math.nan, math.inf, -1.0, 0, "big")] + \
             [{"partial_rotary_factor": v} for v in (math.nan, 2.0, -0.5, 0)] + \
             [{"rope_type": "yarn"}, {"rope_type": 7}]


@pytest.mark.parametrize("rope", ROPE_CASES, ids=repr)
def test_rope_parameters(good, tmp_path, rope):
    _load_fails_cleanly(_variant(good, tmp_path, lambda cfg: cfg["rope_parameters"].update(rope)))


STRUCTURE_CASES = {
    "layer_types not a list": _set("layer_types", "linear_attention"),
    "layer_types too short": lambda cfg: cfg.__setitem__("layer_types", cfg["layer_types"][:-1]),
    "layer_types unknown kind": lambda cfg: cfg.__setitem__("layer_types", ["mamba"] * 4),
    "layer_types huge": _set("layer_types", ["full_attention"] * 100_000),
    "mlp_only_layers not a list": _set("mlp_only_layers", 3),
    "mlp_only_layers of strings": _set("mlp_only_layers", ["0"]),
    "rope_parameters not an object": _set("rope_parameters", [1, 2]),
    "hidden_act": _set("hidden_act", "gelu"),
    "model_type unknown": _set("model_type", "llama"),
    "model_type missing": lambda cfg: cfg.pop("model_type"),
    "model_type a number": _set("model_type", 3),
    "vocab_size missing": lambda cfg: cfg.pop("vocab_size"),
    "hidden_size missing": lambda cfg: cfg.pop("hidden_size"),
    "top-k above experts": _set("num_experts_per_tok", 9),
    "heads not a multiple of kv heads": _set("num_key_value_heads", 3),
    "text_config not an object": lambda cfg: cfg.update(model_type="qwen3_5_moe", text_config=[1]),
}


@pytest.mark.parametrize("case", sorted(STRUCTURE_CASES))
def test_config_structure(good, tmp_path, case):
    _load_fails_cleanly(_variant(good, tmp_path, STRUCTURE_CASES[case]))


def _raw_config(good, tmp_path, data: bytes) -> str:
    out = tmp_path / "m"
    out.mkdir()
    os.symlink(good[0] / "model.safetensors", out / "model.safetensors")
    (out / "config.json").write_bytes(data)
    return str(out)


RAW_CASES = {
    "empty": b"",
    "not json": b"{model_type: qwen3_next",
    "a list": b"[1, 2, 3]",
    "a string": b'"qwen3_next"',
    "not UTF-8": b'{"model_type": "\xff\xfe"}',
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "nested objects": b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    "NUL bytes": b"\x00" * 64,
    "truncated": b'{"model_type": "qwen3_next", "vocab_size": 51',
}


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_damaged_config_files(good, tmp_path, case):
    _load_fails_cleanly(_raw_config(good, tmp_path, RAW_CASES[case]), "config.json")


def test_config_json_that_is_a_folder_or_too_large(good, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "config.json").mkdir()
    os.symlink(good[0] / "model.safetensors", out / "model.safetensors")
    with pytest.raises(ModelError, match="config.json"):
        strata.load(str(out))
    big = tmp_path / "big"
    big.mkdir()
    os.symlink(good[0] / "model.safetensors", big / "model.safetensors")
    with open(big / "config.json", "wb") as f:
        f.write(b'{"pad": "' + b"x" * (17 << 20) + b'"}')
    _load_fails_cleanly(str(big), "MiB")


# the CLI says the same in one line, exit 3, for a sample of the cases above
CLI_CASES = [("vocab_size", 10**9), ("num_hidden_layers", 2**31), ("num_experts", 10**6),
             ("rms_norm_eps", math.nan), ("hidden_size", "64"), ("head_dim", -1)]


@pytest.mark.parametrize("key, value", CLI_CASES, ids=repr)
@pytest.mark.parametrize("command", ["run", "info"])
def test_cli_reports_one_line_with_exit_3(good, tmp_path, capsys, monkeypatch, key, value, command):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    path = _variant(good, tmp_path, _set(key, value))
    if command == "info":
        code, _, err = run_cli(capsys, "info", path)
        # info reads metadata only: it may show a bad value, but never crashes
        assert "Traceback" not in err and code in (0, int(ExitCode.MODEL)), err
        return
    code, _, err = run_cli(capsys, "run", "--model", path, "--prompt-ids", "1 2 3", "--max-new", "2")
    assert_one_line_error(code, err, int(ExitCode.MODEL))
