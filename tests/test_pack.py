"""strata packs: conversion (per-expert and fused layouts, dtypes), atomicity, header validation,
and the --expert-cache parser."""
from __future__ import annotations

import json
import os
import shutil
import zlib

import numpy as np
import pytest

from _stream_util import expected_blob, write_checkpoint
from strata import pack
from strata.pack.format import EXPERTS_HEAD
from strata.safetensors_io import checkpoint_tensors
from strata.errors import ModelError, UsageError


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ckpt") / "m", layers=3, experts=8)


@pytest.fixture(scope="module")
def packed(ckpt, tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("pack") / "m.strata")
    pack.convert(ckpt, dst)
    return dst


def _blob(info, ord_, e):
    ex = info.ex
    with open(info.experts_path, "rb") as f:
        f.seek(ex["data_offset"] + (ord_ * ex["num_experts"] + e) * ex["stride"])
        return f.read(ex["stride"])


@pytest.mark.parametrize("dtype,fused", [("bf16", False), ("bf16", True), ("f16", False), ("f32", True)])
def test_convert_blobs_match_source(tmp_path, dtype, fused):
    src = write_checkpoint(tmp_path / "src", layers=2, experts=5, hidden=24, inter=8, dtype=dtype,
                           fused=fused, seed=3)
    header = pack.convert(src, str(tmp_path / "dst"))
    ex = header["experts"]
    want_dtype = "bf16" if dtype == "bf16" else "f32"
    assert ex["dtype"] == want_dtype
    assert ex["stride"] % 4096 == 0 and ex["data_offset"] % 4096 == 0
    info = pack.read_pack(str(tmp_path / "dst"))
    for li in range(2):
        for e in range(5):
            raw = _blob(info, li, e)
            want = expected_blob(src, li, e, want_dtype)
            assert raw[:len(want)] == want, (li, e)
            assert raw[len(want):] == b"\0" * (len(raw) - len(want))
            assert zlib.crc32(want) == int(info.crcs[li * 5 + e])


def test_dense_file_holds_every_other_tensor(ckpt, packed):
    from safetensors import safe_open

    with safe_open(os.path.join(ckpt, "model.safetensors"), "pt") as f:
        src = {k: f.get_tensor(k) for k in f.keys() if ".mlp.experts." not in k}
    info = pack.read_pack(packed)
    with safe_open(info.dense_path, "pt") as f:
        assert sorted(f.keys()) == sorted(src)
        for k in src:
            assert (f.get_tensor(k).view(-1) == src[k].view(-1)).all()
    table = pack.pack_tensor_table(info)
    assert {t[0] for t in table} == set(src)
    name, path, off, dtype, shape = next(t for t in table if t[0] == "model.norm.weight")
    assert path == info.dense_path and dtype == "BF16" and shape == (32,)
    # pack folders keep the non-weight files and are detected as packs
    assert os.path.isfile(os.path.join(packed, "config.json"))
    assert os.path.isfile(os.path.join(packed, "tokenizer.json"))
    assert pack.is_pack(packed) and not pack.is_pack(ckpt)


def test_header_identity(ckpt, packed):
    h = json.load(open(os.path.join(packed, pack.HEADER_NAME)))
    assert h["format"] == "strata-pack" and h["version"] == 1
    assert h["source"]["model_type"] == "qwen3_moe"
    tensors = checkpoint_tensors(ckpt)
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    assert h["source"]["source_id"] == pack.source_identity(cfg, tensors)
    cfg["hidden_size"] += 1
    assert pack.source_identity(cfg, tensors) != h["source"]["source_id"]


def test_convert_refuses_existing_and_is_atomic(ckpt, tmp_path, monkeypatch):
    dst = tmp_path / "out"
    dst.mkdir()
    with pytest.raises(UsageError, match="already exists"):
        pack.convert(ckpt, str(dst))

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    dst2 = tmp_path / "out2"
    from strata.pack import converter

    monkeypatch.setattr(converter, "_write_experts", boom)
    with pytest.raises(OSError):
        pack.convert(ckpt, str(dst2))
    assert not dst2.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no partial folder left behind


def test_force_replaces(ckpt, tmp_path):
    dst = str(tmp_path / "p")
    h1 = pack.convert(ckpt, dst)
    h2 = pack.convert(ckpt, dst, force=True)
    assert h1["pack_id"] != h2["pack_id"]
    assert pack.read_pack(dst).header["pack_id"] == h2["pack_id"]
    assert sorted(os.listdir(tmp_path)) == ["p"]


def test_not_moe_and_bad_inputs(tmp_path):
    from safetensors.numpy import save_file

    d = tmp_path / "dense"
    d.mkdir()
    save_file({"model.embed_tokens.weight": np.zeros((4, 4), np.float32)}, str(d / "model.safetensors"))
    (d / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="no routed expert tensors"):
        pack.convert(str(d), str(tmp_path / "x"))
    with pytest.raises(ModelError, match="config.json"):
        pack.convert(str(tmp_path), str(tmp_path / "y"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    (bad / "model.safetensors").write_bytes(b"\xff" * 16)
    with pytest.raises(ModelError, match="model.safetensors"):
        pack.convert(str(bad), str(tmp_path / "z"))


def test_incomplete_expert_named(tmp_path):
    src = write_checkpoint(tmp_path / "src", layers=1, experts=3)
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
        t = {k: f.get_tensor(k) for k in f.keys() if k != "model.layers.0.mlp.experts.1.up_proj.weight"}
    save_file(t, os.path.join(src, "model.safetensors"))
    with pytest.raises(ModelError, match=r"layers\.0\.mlp\.experts: expert 1 has no up"):
        pack.convert(src, str(tmp_path / "dst"))


def _copy_pack(packed, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(packed, dst)
    return str(dst)


def test_truncated_pack_names_layer_and_expert(packed, tmp_path):
    p = _copy_pack(packed, tmp_path)
    info = pack.read_pack(p)
    ex = info.ex
    cut = ex["data_offset"] + (1 * ex["num_experts"] + 5) * ex["stride"] + 100
    with open(info.experts_path, "r+b") as f:
        f.truncate(cut)
    with pytest.raises(ModelError, match=r"truncated .* layer 1 expert 5 onwards"):
        pack.read_pack(p)


def test_experts_file_from_another_pack(ckpt, packed, tmp_path):
    other = str(tmp_path / "other")
    pack.convert(ckpt, other)
    p = _copy_pack(packed, tmp_path)
    shutil.copyfile(os.path.join(other, pack.EXPERTS_NAME), os.path.join(p, pack.EXPERTS_NAME))
    with pytest.raises(ModelError, match="different pack"):
        pack.read_pack(p)


def test_corrupt_checksum_table_and_header(packed, tmp_path):
    p = _copy_pack(packed, tmp_path)
    with open(os.path.join(p, pack.EXPERTS_NAME), "r+b") as f:
        f.seek(EXPERTS_HEAD.size + 5)
        b = f.read(1)
        f.seek(EXPERTS_HEAD.size + 5)
        f.write(bytes([b[0] ^ 0x10]))
    with pytest.raises(ModelError, match="checksum table is corrupt"):
        pack.read_pack(p)
    hp = os.path.join(p, pack.HEADER_NAME)
    h = json.load(open(hp))
    h["version"] = 99
    json.dump(h, open(hp, "w"))
    with pytest.raises(ModelError, match="version 99"):
        pack.read_pack(p)
    open(hp, "w").write("{not json")
    with pytest.raises(ModelError, match="unreadable pack header"):
        pack.read_pack(p)


@pytest.mark.parametrize("text,want", [
    ("1000000", 1000000), ("512MiB", 512 << 20), ("1.5GiB", int(1.5 * (1 << 30))), ("2G", 2 << 30),
    ("0.25", 1000 << 20), ("25%", 1000 << 20), ("all", 4000 << 20), ("1", 4000 << 20),
    ("10GiB", 4000 << 20), ("3 mb", 3_000_000), (0.5, 2000 << 20),
])
def test_parse_cache_size(text, want):
    assert pack.parse_cache_size(text, 4000 << 20) == want


@pytest.mark.parametrize("text", ["", "abc", "1.5", "0", "-3", "12 parsecs", "150%", "0%"])
def test_parse_cache_size_errors(text):
    with pytest.raises(UsageError, match="--expert-cache") as ei:
        pack.parse_cache_size(text, 1 << 30)
    assert "\n" not in str(ei.value)


def test_cli_convert_takes_the_bundled_alias(tmp_path, monkeypatch):
    # `--model strata-tiny` works everywhere, so `strata convert strata-tiny DST` must too (it
    # said "<cwd>/strata-tiny: not a folder")
    from typer.testing import CliRunner

    from strata.cli import app

    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["convert", "strata-tiny", "tiny.strata"])
    assert r.exit_code == 0, r.output
    assert pack.is_pack(str(tmp_path / "tiny.strata")) and "10 MoE layers x 16 experts" in r.output


def test_convert_force_replaces_only_a_pack(ckpt, tmp_path, monkeypatch):
    # --force used to rmtree any DST: `strata convert M ~/models --force` (or `.`) deleted a
    # folder of other files, and a file DST was deleted too
    from strata.errors import AlreadyExistsError

    folder = tmp_path / "models"
    (folder / "other").mkdir(parents=True)
    (folder / "other" / "weights.bin").write_bytes(b"precious")
    afile = tmp_path / "notes.txt"
    afile.write_text("precious")
    link = tmp_path / "link"
    link.symlink_to(folder)
    for dst, what in ((folder, "a folder"), (afile, "a file"), (link, "a symbolic link")):
        with pytest.raises(AlreadyExistsError, match=f"is {what}, not a strata pack") as ei:
            pack.convert(ckpt, str(dst), force=True)
        assert "\n" not in str(ei.value)
    monkeypatch.chdir(folder)
    with pytest.raises(AlreadyExistsError, match="is a folder, not a strata pack"):
        pack.convert(ckpt, ".", force=True)
    assert (folder / "other" / "weights.bin").read_bytes() == b"precious" and afile.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "models", "notes.txt"]  # no leftovers
    # a pack is still replaced, and so is an empty folder
    (tmp_path / "empty").mkdir()
    pack.convert(ckpt, str(tmp_path / "empty"), force=True)
    assert pack.is_pack(str(tmp_path / "empty"))
    pack.convert(ckpt, str(tmp_path / "p"))
    pack.convert(ckpt, str(tmp_path / "p"), force=True)
    assert pack.is_pack(str(tmp_path / "p"))


def test_cli_convert(ckpt, tmp_path):
    from typer.testing import CliRunner

    from strata.cli import app

    # Typer runs a lone command without its name; with the other commands present it is a group.
    name = ["convert"] if len(app.registered_commands) + len(app.registered_groups) > 1 else []
    r = CliRunner().invoke(app, name + [ckpt, str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert "3 MoE layers x 8 experts" in r.output
    assert pack.is_pack(str(tmp_path / "c"))
    r = CliRunner().invoke(app, name + [str(tmp_path / "missing"), str(tmp_path / "d")])
    assert r.exit_code == 3
    assert "no such file or folder" in r.output and r.output.count("\n") == 1
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(app, name + [str(tmp_path / "afile"), str(tmp_path / "d")])
    assert r.exit_code == 3 and "not a folder" in r.output and r.output.count("\n") == 1
    r = CliRunner().invoke(app, name + [ckpt, str(tmp_path / "c")])
    assert r.exit_code == 2 and "already exists" in r.output
