"""strata.loader: the one dispatch point from a model reference to an engine."""
from __future__ import annotations

import pytest

import strata
from strata import loader
from strata.errors import ModelError, UsageError
from strata.models import bundled_model_path
from strata.pack.converter import convert


def test_strata_load_takes_a_bundled_alias():
    eng = strata.load("strata-tiny", threads=1)
    ref = strata.load(str(bundled_model_path()), threads=1)
    assert eng.model_id == ref.model_id and eng.vocab_size == ref.vocab_size
    with pytest.raises(ModelError, match="no such model folder"):
        strata.load("strata-huge")


def test_each_format_is_detected_in_one_place(tmp_path):
    tiny = bundled_model_path()
    assert loader.detect(tiny).name == "hf-checkpoint"
    pack_dir = tmp_path / "pack"
    convert(str(tiny), str(pack_dir))
    fmt = loader.detect(pack_dir)
    assert fmt.name == "strata-pack" and fmt.streams_experts
    eng = strata.load(str(pack_dir), expert_cache="50%", threads=1)
    assert eng.model_id == strata.load(str(tiny), threads=1).model_id
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert loader.detect(gguf).name == "gguf"  # by name: a damaged file gets the GGUF reader's error
    with pytest.raises(ModelError, match="truncated GGUF header"):
        strata.load(str(gguf))
    with pytest.raises(ModelError, match="not a file inside it"):
        loader.detect(tiny / "config.json")
    with pytest.raises(ModelError, match="no config.json"):
        loader.detect(tmp_path)


def test_stream_options_need_a_format_that_streams(tmp_path):
    with pytest.raises(UsageError, match="--expert-cache needs a strata pack"):
        strata.load("strata-tiny", expert_cache="1GiB")
    with pytest.raises(TypeError, match="expert_cahce"):
        strata.load("strata-tiny", expert_cahce="1GiB")
    for bad in (dict(threads=0), dict(threads=10**9), dict(ctx=-1), dict(fold="later")):
        with pytest.raises(UsageError):
            strata.load("strata-tiny", **bad)


def test_a_registered_format_is_asked_first(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "_FORMATS", list(loader.formats()))
    seen = []
    fmt = loader.ModelFormat("toy", detect=lambda p: p.suffix == ".toy",
                             load=lambda p, **kw: seen.append((p.name, kw)) or "engine", describe="a toy file")
    loader.register_format(fmt)
    f = tmp_path / "m.toy"
    f.write_bytes(b"")
    assert strata.load(str(f), threads=2) == "engine"
    assert seen == [("m.toy", {"threads": 2, "fold": "eager", "ctx": None, "backend": "cpu"})]
    with pytest.raises(UsageError, match="needs a strata pack, and .* is a toy file"):
        strata.load(str(f), routing="protect=1")
