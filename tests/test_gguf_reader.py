"""GGUF reading: metadata and tensor infos through gguf-py, and one-line errors (never a crash, a
traceback or a huge allocation) on corrupt files: bad magic, truncation, wrong block counts,
unknown or unsupported types, absurd counts and sizes, and random byte damage."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from gguf import GGUFReader, GGUFWriter, quants

from strata.errors import ModelError
from strata.gguf import open_gguf, spec_from_metadata


def small_gguf(path, *, block_count=2) -> str:
    rng = np.random.default_rng(0)
    w = GGUFWriter(str(path), "qwen3moe")
    w.add_block_count(block_count)
    w.add_string("general.name", "tiny")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_tensor("a.weight", rng.standard_normal((4, 8)).astype(np.float32))
    w.add_tensor("b.weight", quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), GT.Q8_0), raw_dtype=GT.Q8_0)
    w.add_tensor("c.weight", rng.standard_normal((3, 32)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


def tensor_info_offsets(path, name):
    """Byte offsets of (n_dims, dims, type, data offset) in the tensor info of `name`."""
    r = GGUFReader(path)
    t = next(t for t in r.tensors if t.name == name)
    off = t.field.offset + 8 + len(t.name.encode())
    n_dims = int(t.field.parts[2][0])
    return off, off + 4, off + 4 + 8 * n_dims, off + 4 + 8 * n_dims + 4


def patched(src, dst, offset, fmt, value):
    data = bytearray(open(src, "rb").read())
    struct.pack_into(fmt, data, offset, value)
    open(dst, "wb").write(bytes(data))
    return str(dst)


def assert_one_line(exc_info, *needles):
    msg = str(exc_info.value)
    assert "\n" not in msg and msg
    for n in needles:
        assert n in msg, msg


def test_reads_metadata_and_tensors(tmp_path):
    m = open_gguf(small_gguf(tmp_path / "m.gguf"))
    assert m.get("general.name") == "tiny" and m.get("tokenizer.ggml.tokens") == ["a", "b", "c"]
    assert {n: (t.type, t.shape) for n, t in m.tensors.items()} == {
        "a.weight": ("F32", (4, 8)), "b.weight": ("Q8_0", (2, 64)), "c.weight": ("F16", (3, 32))}
    b = m.tensors["b.weight"]
    raw = np.fromfile(b.path, np.uint8, count=b.nbytes, offset=b.offset)
    assert b.nbytes == 2 * 2 * 34 and raw.size == b.nbytes


def test_bad_magic_and_tiny_files(tmp_path):
    for i, data in enumerate([b"", b"GGU", b"GGML" + b"\0" * 40, b"GGUF"]):
        p = tmp_path / f"f{i}.gguf"
        p.write_bytes(data)
        with pytest.raises(ModelError) as e:
            open_gguf(p)
        assert_one_line(e, str(p))
    with pytest.raises(ModelError) as e:
        open_gguf(tmp_path / "f2.gguf")
    assert_one_line(e, "bad magic")


def test_truncated_files(tmp_path):
    src = small_gguf(tmp_path / "m.gguf")
    data = open(src, "rb").read()
    for cut in list(range(4, 200, 7)) + [len(data) - 1, len(data) - 64]:
        p = tmp_path / "cut.gguf"
        p.write_bytes(data[:cut])
        with pytest.raises(ModelError) as e:
            open_gguf(p)
        assert_one_line(e, str(p))
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:-1])
    with pytest.raises(ModelError) as e:
        open_gguf(p)
    assert_one_line(e, "tensor c.weight", "truncated")


def test_unknown_and_unsupported_types(tmp_path):
    src = small_gguf(tmp_path / "m.gguf")
    _, _, type_off, _ = tensor_info_offsets(src, "a.weight")
    with pytest.raises(ModelError) as e:
        open_gguf(patched(src, tmp_path / "u.gguf", type_off, "<I", 99))
    assert_one_line(e, "tensor a.weight", "unknown type id 99")
    with pytest.raises(ModelError) as e:
        open_gguf(patched(src, tmp_path / "q3.gguf", type_off, "<I", int(GT.Q3_K)))
    assert_one_line(e, "tensor a.weight", "type Q3_K", "Q4_K")


def test_wrong_block_counts_and_absurd_dims(tmp_path):
    src = small_gguf(tmp_path / "m.gguf")
    ndim_off, dims_off, _, data_off = tensor_info_offsets(src, "b.weight")
    with pytest.raises(ModelError) as e:  # a Q8_0 row of 48 weights is 1.5 blocks
        open_gguf(patched(src, tmp_path / "b.gguf", dims_off, "<Q", 48))
    assert_one_line(e, "tensor b.weight", "whole number")
    with pytest.raises(ModelError) as e:
        open_gguf(patched(src, tmp_path / "d.gguf", dims_off + 8, "<Q", 1 << 62))
    assert_one_line(e, "tensor b.weight")
    with pytest.raises(ModelError) as e:
        open_gguf(patched(src, tmp_path / "n.gguf", ndim_off, "<I", 1000))
    assert_one_line(e)
    with pytest.raises(ModelError) as e:
        open_gguf(patched(src, tmp_path / "o.gguf", data_off, "<Q", 1 << 50))
    assert_one_line(e)


def test_absurd_counts_and_string_sizes(tmp_path):
    src = small_gguf(tmp_path / "m.gguf")
    for off, fmt, value in [(8, "<Q", 1 << 60), (16, "<Q", 1 << 60), (24, "<Q", 1 << 62), (16, "<Q", 0xFFFFFFFFFFFFFFFF)]:
        with pytest.raises(ModelError) as e:  # tensor count, kv count, first key's length
            open_gguf(patched(src, tmp_path / "c.gguf", off, fmt, value))
        assert_one_line(e)


def test_absurd_metadata_values(tmp_path):
    m = open_gguf(small_gguf(tmp_path / "m.gguf", block_count=10**9))
    with pytest.raises(ModelError) as e:
        spec_from_metadata(m)
    assert_one_line(e, "qwen3moe.block_count")


def test_random_damage_never_crashes(tmp_path):
    """Fuzz: random byte damage anywhere in the header gives a model or a ModelError, nothing else."""
    src = small_gguf(tmp_path / "m.gguf")
    data = open(src, "rb").read()
    header_end = GGUFReader(src).data_offset
    rng = np.random.default_rng(1234)
    p = tmp_path / "fuzz.gguf"
    outcomes = {"ok": 0, "error": 0}
    for _ in range(300):
        buf = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(4, header_end))
            buf[at] = int(rng.integers(0, 256)) if rng.random() < 0.7 else 0xFF
        p.write_bytes(bytes(buf))
        try:
            open_gguf(p)
            outcomes["ok"] += 1
        except ModelError as e:
            assert "\n" not in str(e)
            outcomes["error"] += 1
    assert outcomes["error"] > 0


def test_a_header_read_again_is_reused_only_while_its_bytes_are_unchanged(tmp_path, monkeypatch):
    import strata.gguf.reader as reader

    path = small_gguf(tmp_path / "m.gguf")
    made = []
    real_class = reader._reader_class

    def counting_class():
        cls = real_class()

        def make(*args, **kwargs):
            made.append(args[0])
            return cls(*args, **kwargs)
        return make

    monkeypatch.setattr(reader, "_reader_class", counting_class)
    first = open_gguf(path)
    second = open_gguf(path)  # what loading does: the engine's tensors, then the tokenizer
    assert len(made) == 1
    assert second.metadata == first.metadata and second.tensors == first.tensors
    assert second.metadata is not first.metadata
    # the same size, one metadata byte changed: parsed again, and the new value is seen
    data = bytearray(open(path, "rb").read())
    at = data.index(b"tiny")
    data[at:at + 4] = b"tinz"
    open(path, "wb").write(bytes(data))
    assert open_gguf(path).get("general.name") == "tinz"
    assert len(made) == 2
