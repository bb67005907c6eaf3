"""`strata convert file.gguf PACK`: a GGUF model becomes a strata pack whose expert blobs keep the
GGUF blocks as they are (gate | up | down of one expert, each in its stored format (F16 as F32), which the
header records per layer), and whose dense.gguf holds the file's metadata (architecture,
tokenizer, chat template) and every other tensor, also in its stored format.

dense.gguf is the source's key/value section copied byte for byte, followed by a new tensor
table: gguf-py reads it like any GGUF file, and no metadata value is re-encoded.
"""
from __future__ import annotations

import hashlib
import os
import re
import struct
from typing import Callable

import numpy as np

from ..errors import ModelError
from .converter import _assemble, _experts_header, _fsync_path, _Progress, _write_experts
from .format import EXPERTS_NAME, MATRICES, PACK_FORMAT, QUANT_PACK_VERSION, align_up, layer_blob_bytes

DENSE_GGUF_NAME = "dense.gguf"
_EXPERT_TENSOR = re.compile(r"^blk\.(\d+)\.ffn_(?:(?:gate|up|down|gate_up)_exps|(?:gate|up|down)\.\d+)\.weight$")


def _kv_section(path: str) -> tuple[bytes, int]:
    """The first file's bytes up to the end of its key/value section, and its alignment."""
    from gguf import GGUFReader

    r = GGUFReader(path, "r")
    if r.byte_order != "I" and r.byte_order != "=":
        raise ModelError(f"{path}: big-endian GGUF files are not supported by strata convert")
    end = max(int(f.offset) + sum(int(p.nbytes) for p in f.parts) for f in r.fields.values())
    with open(path, "rb") as f:
        head = f.read(end)
    version = struct.unpack_from("<I", head, 4)[0]
    if version not in (2, 3):
        raise ModelError(f"{path}: GGUF version {version} is not supported by strata convert (2 or 3)")
    return head, int(r.alignment)


def _write_dense_gguf(path: str, src_first: str, tensors: list, progress: Callable[[int], None]) -> int:
    """Writes the metadata of `src_first` and `tensors` (GGUFTensor, bytes as stored) as one GGUF."""
    from gguf.constants import GGMLQuantizationType

    head, align = _kv_section(src_first)
    head = head[:8] + struct.pack("<Q", len(tensors)) + head[16:]
    infos = bytearray()
    offsets, off = [], 0
    for t in tensors:
        name = t.name.encode()
        dims = list(reversed(t.shape))  # GGUF stores ne, innermost first
        infos += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
        infos += struct.pack(f"<{len(dims)}Q", *dims)
        infos += struct.pack("<IQ", GGMLQuantizationType[t.type].value, off)
        offsets.append(off)
        off = -(-(off + t.nbytes) // align) * align
    maps: dict[str, np.memmap] = {}
    with open(path, "wb") as f:
        f.write(head)
        f.write(infos)
        f.write(b"\0" * (-f.tell() % align))
        base = f.tell()
        for t, o in zip(tensors, offsets):
            f.write(b"\0" * (base + o - f.tell()))
            mm = maps.get(t.path)
            if mm is None:
                mm = maps[t.path] = np.memmap(t.path, dtype=np.uint8, mode="r")
            for a in range(0, t.nbytes, 64 << 20):
                f.write(mm[t.offset + a:t.offset + min(t.nbytes, a + (64 << 20))])
            progress(t.nbytes)
        f.flush()
        os.fsync(f.fileno())
    maps.clear()
    return os.path.getsize(path)


def _stored(fmt: str) -> str:
    """The format an expert matrix stored as `fmt` in the GGUF file gets in the pack: F16 becomes
    F32 (the engine converts F16 matrices when it maps them, and has no F16 kernel for the expert
    blobs it streams), every other format is kept as it is."""
    return "F32" if fmt == "F16" else fmt


def _stored_bytes(data: np.ndarray, fmt: str) -> bytes:
    """An expert matrix's bytes as the pack stores them (see `_stored`)."""
    if fmt == "F16":  # as the engine converts an F16 matrix it maps: exact, the same logits
        return data.view("<f2").astype("<f4").tobytes()
    return data.tobytes()


def convert_gguf(src: str, dst: str, *, progress: Callable[[int, int], None] | None = None,
                 force: bool = False) -> dict:
    """Converts a .gguf file (or the first file of a split set) into a quantized strata pack."""
    from ..gguf import canonical_tensors, open_gguf, spec_from_metadata
    from ..model import model_id_of

    model = open_gguf(src)
    spec = spec_from_metadata(model)
    table = canonical_tensors(model, spec)
    E, H, I = spec["num_experts"], spec["hidden_size"], spec["moe_intermediate_size"]
    moe_layers = [l for l, m in enumerate(spec["layer_moe"]) if m]
    if not moe_layers or not E:
        raise ModelError(f"{src}: no routed experts (a pack streams experts; run the .gguf file directly)")
    refs = [[[table[f"layers.{l}.mlp.experts.{e}.{p}_proj.weight"] for p in MATRICES] for e in range(E)]
            for l in moe_layers]
    formats = []
    for li, l in enumerate(moe_layers):
        f = [r.type for r in refs[li][0]]
        for e in range(E):
            if [r.type for r in refs[li][e]] != f:
                raise ModelError(f"{src}: layer {l} expert {e} is stored as {[r.type for r in refs[li][e]]}, "
                                 f"expert 0 as {f}: a pack needs one format mix per layer")
        formats.append([_stored(x) for x in f])
    layer_bytes = [layer_blob_bytes(f, H, I) for f in formats]
    stride = align_up(max(layer_bytes))
    n_layers = spec["num_layers"]
    dense = [t for t in model.tensors.values()
             if not ((m := _EXPERT_TENSOR.match(t.name)) and int(m.group(1)) < n_layers)]
    step = _Progress(sum(t.nbytes for t in dense) + E * sum(layer_bytes), progress)
    maps: dict[str, np.memmap] = {}

    def raw(r) -> bytes:  # noqa: ANN001 - a WeightRef
        mm = maps.get(r.path)
        if mm is None:
            mm = maps[r.path] = np.memmap(r.path, dtype=np.uint8, mode="r")
        return _stored_bytes(mm[r.offset:r.offset + r.nbytes], r.type)

    def blob(li: int, e: int) -> bytes:
        return b"".join(raw(r) for r in refs[li][e])

    mid = model_id_of(spec, table, fmt="type")

    def fill(tmp: str, pack_id: bytes) -> dict:
        dense_bytes = _write_dense_gguf(os.path.join(tmp, DENSE_GGUF_NAME), model.files[0], dense, step)
        data_offset, table_crc = _write_experts(os.path.join(tmp, EXPERTS_NAME), len(moe_layers), E,
                                                max(layer_bytes), stride, pack_id, blob, step, layer_bytes)
        mix = sorted({x for f in formats for x in f})
        h = hashlib.sha256(mid.encode())
        for fn in model.files:
            h.update(f"|{os.path.basename(fn)}:{os.path.getsize(fn)}".encode())
        return {
            "format": PACK_FORMAT,
            "version": QUANT_PACK_VERSION,
            "pack_id": pack_id.hex(),
            "source": {"kind": "gguf", "path": src, "files": [os.path.basename(f) for f in model.files],
                       "source_id": h.hexdigest(), "model_id": mid,
                       "architecture": model.get("general.architecture")},
            "dense": {"file": DENSE_GGUF_NAME, "bytes": dense_bytes, "tensors": len(dense)},
            "experts": _experts_header(tmp, moe_layers, E, H, I, mix[0].lower() if len(mix) == 1 else "mixed",
                                       mix, "blk.", data_offset, table_crc, formats),
        }

    try:
        return _assemble(dst, force, fill)
    finally:
        maps.clear()
