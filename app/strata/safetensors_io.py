"""Safetensors header reading (Python reads headers; the engine maps the bytes).

Every header is treated as untrusted: sizes, offsets and dtypes are checked against the file.
"""
from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

from .errors import ModelError

DTYPE_SIZES = {"F32": 4, "BF16": 2, "F16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}
ENGINE_DTYPES = ("F32", "BF16", "F16")
MAX_HEADER = 100 * 1024 * 1024


@dataclass(frozen=True)
class TensorInfo:
    name: str
    path: str
    offset: int  # absolute byte offset of the data in the file
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = DTYPE_SIZES.get(self.dtype, 0)
        for d in self.shape:
            n *= d
        return n


def read_header(path: str) -> dict[str, TensorInfo]:
    """Tensor table of one .safetensors file; ModelError naming the file (and tensor) if malformed."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ModelError(f"{path}: truncated safetensors file (no header)")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER or 8 + n > size:
                raise ModelError(f"{path}: bad safetensors header length {n} (file has {size} bytes)")
            raw = f.read(n)
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror})") from None
    try:
        hdr = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelError(f"{path}: bad safetensors header (not JSON)") from None
    if not isinstance(hdr, dict):
        raise ModelError(f"{path}: bad safetensors header (not an object)")
    base = 8 + n
    out: dict[str, TensorInfo] = {}
    for name, ent in hdr.items():
        if name == "__metadata__":
            continue
        if not isinstance(ent, dict):
            raise ModelError(f"{path}: tensor {name}: bad header entry")
        dtype, shape, offs = ent.get("dtype"), ent.get("shape"), ent.get("data_offsets")
        if (
            not isinstance(dtype, str)
            or not isinstance(shape, list)
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
            or not isinstance(offs, list)
            or len(offs) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offs)
            or offs[1] < offs[0]
        ):
            raise ModelError(f"{path}: tensor {name}: bad header entry (dtype/shape/data_offsets)")
        info = TensorInfo(name, path, base + offs[0], dtype, tuple(shape))
        if dtype in DTYPE_SIZES and offs[1] - offs[0] != info.nbytes:
            raise ModelError(
                f"{path}: tensor {name}: data_offsets span {offs[1] - offs[0]} bytes, shape {list(shape)} "
                f"of {dtype} needs {info.nbytes}"
            )
        if base + offs[1] > size:
            raise ModelError(f"{path}: tensor {name} runs past the end of the file (truncated file?)")
        out[name] = info
    return out


def checkpoint_files(folder: str) -> list[str]:
    """The .safetensors files of a checkpoint folder (index file first, else every *.safetensors)."""
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(idx):
        try:
            with open(idx, "rb") as f:
                wm = json.loads(f.read().decode("utf-8"))["weight_map"]
            files = sorted(set(wm.values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise ModelError(f"{idx}: bad safetensors index (no weight_map)") from None
        for fn in files:
            if not isinstance(fn, str) or os.sep in fn or fn.startswith("."):
                raise ModelError(f"{idx}: bad file name {fn!r} in weight_map")
        paths = [os.path.join(folder, fn) for fn in files]
        for p in paths:
            if not os.path.exists(p):
                raise ModelError(f"{idx}: shard {os.path.basename(p)} is missing")
        return paths
    paths = sorted(
        os.path.join(folder, fn) for fn in os.listdir(folder) if fn.endswith(".safetensors")
    )
    if not paths:
        raise ModelError(f"{folder}: no *.safetensors files in the model folder")
    return paths


def checkpoint_tensors(folder: str) -> dict[str, TensorInfo]:
    """All tensors of a Hugging Face checkpoint folder (one or many *.safetensors shards), each of
    a known dtype and named once."""
    table: dict[str, TensorInfo] = {}
    for path in checkpoint_files(folder):
        for name, info in read_header(path).items():
            if info.dtype not in DTYPE_SIZES:
                raise ModelError(f"{path}: tensor {name!r}: unknown dtype {info.dtype!r}")
            if name in table:
                raise ModelError(f"{folder}: tensor {name!r} appears in both "
                                 f"{os.path.basename(table[name].path)} and {os.path.basename(path)}")
            table[name] = info
    return table
