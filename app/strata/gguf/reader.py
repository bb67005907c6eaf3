"""Reading GGUF files: metadata and tensor infos through gguf-py's GGUFReader, every size checked
against the file before anything is mapped, split sets (``-00001-of-0000N.gguf``) merged.

GGUF files come from the internet: every count, size, offset and type is untrusted. Problems are
one-line ModelErrors naming the file (and the tensor or key); nothing is allocated from a size
the file states, since GGUFReader maps the file and takes views.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelError

GGUF_MAGIC = b"GGUF"
# The weight formats strata computes with: GGUF type name -> (weights per block, bytes per block).
SUPPORTED_TYPES = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34), "Q4_K": (256, 144),
    "Q5_K": (256, 176), "Q6_K": (256, 210), "IQ4_XS": (256, 136),
}
MAX_DIMS = 4
MAX_DIM = 1 << 40           # no real tensor dimension comes near this
MAX_KEY_LEN = 1 << 16
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class GGUFTensor:
    name: str            # as stored (blk.0.attn_q.weight)
    type: str            # GGUF type name (Q4_K)
    shape: tuple[int, ...]  # row-major, outermost first (numpy order: ggml's ne reversed)
    path: str
    offset: int          # absolute byte offset of the data in `path`
    nbytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class GGUFModel:
    """The metadata and tensors of one GGUF model (one file or a whole split set)."""
    path: str                       # the first file
    files: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, GGUFTensor] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)


def is_gguf(path: str | os.PathLike) -> bool:
    p = os.fspath(path)
    if not os.path.isfile(p):
        return False
    try:
        with open(p, "rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


def _reader_class():
    from gguf import GGUFReader
    from gguf.constants import GGMLQuantizationType

    class CheckedReader(GGUFReader):
        """GGUFReader that checks each tensor info (type, dims, bytes inside the file) before the
        library builds its views, so a bad entry is reported by name instead of by a numpy error."""

        def _build_tensors(self, start_offs, fields):  # noqa: ANN001 - the library's signature
            size = len(self.data)
            for fld in fields:
                _name_len, name_data, _n_dims, dims, raw_dtype, offset_tensor = fld.parts
                name = bytes(name_data).decode("utf-8", errors="replace")
                raw = int(raw_dtype[0])
                try:
                    tname = GGMLQuantizationType(raw).name
                except ValueError:
                    raise _Bad(f"tensor {name} has unknown type id {raw}") from None
                if tname not in SUPPORTED_TYPES:
                    raise _Bad(f"tensor {name} has type {tname}, which strata does not support "
                               f"({', '.join(SUPPORTED_TYPES)})")
                ne = [int(d) for d in dims.tolist()]
                if not 1 <= len(ne) <= MAX_DIMS or any(d < 1 or d > MAX_DIM for d in ne):
                    raise _Bad(f"tensor {name} has bad dimensions {ne}")
                elems, nbytes_block = SUPPORTED_TYPES[tname]
                if ne[0] % elems:
                    raise _Bad(f"tensor {name}: a {tname} row of {ne[0]} weights is not a whole number "
                               f"of {elems}-weight blocks")
                n = 1
                for d in ne:
                    n *= d
                nbytes = n // elems * nbytes_block
                off = int(start_offs) + int(offset_tensor[0])
                if off % self.alignment:
                    raise _Bad(f"tensor {name}: data offset {off} is not aligned to {self.alignment}")
                if off + nbytes > size:
                    raise _Bad(f"tensor {name}: data ends at byte {off + nbytes} but the file has {size} "
                               f"bytes (truncated file?)")
            return super()._build_tensors(start_offs, fields)

    return CheckedReader


class _Bad(Exception):
    """A problem found while reading one file (the file name is added by read_file)."""


def _value(fld) -> Any:  # noqa: ANN001 - a gguf ReaderField
    return fld.contents() if fld.types else None


# gguf-py parses a header one field item at a time: for a real vocabulary (~150k tokens and as
# many merges) that takes seconds, and loading a model reads the file twice (the engine's tensor
# table, then the tokenizer). So the headers read last are kept (path -> size, header length,
# SHA-256 of the header, metadata, tensor infos) and reused only for the same path and size while
# every byte of the header (metadata and tensor infos, up to the tensor data) is unchanged.
_headers: dict[str, tuple[int, int, bytes, dict[str, Any], list[GGUFTensor]]] = {}
_MAX_HEADERS = 16  # the parts of a split set


def _digest(path: str, end: int) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while end > 0:
            chunk = f.read(min(end, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            end -= len(chunk)
    return h.digest()


def read_file(path: str) -> tuple[dict[str, Any], list[GGUFTensor]]:
    """Metadata and tensor infos of one .gguf file."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror})") from None
    if magic != GGUF_MAGIC:
        raise ModelError(f"{path}: not a GGUF file (bad magic {magic!r})")
    if size < 24:
        raise ModelError(f"{path}: truncated GGUF header ({size} bytes)")
    known = _headers.get(path)
    try:
        if known is not None and known[0] == size and _digest(path, known[1]) == known[2]:
            return dict(known[3]), list(known[4])
    except OSError as e:
        raise ModelError(f"{path}: cannot read ({e.strerror})") from None
    try:
        reader = _reader_class()(path, "r")
        meta: dict[str, Any] = {}
        for key, fld in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            if len(key) > MAX_KEY_LEN:
                raise _Bad(f"metadata key of {len(key)} characters")
            meta[key] = _value(fld)
        tensors = [
            GGUFTensor(t.name, t.tensor_type.name, tuple(int(d) for d in reversed(t.shape.tolist())), path,
                       int(t.data_offset), int(t.n_bytes))
            for t in reader.tensors
        ]
    except _Bad as e:
        raise ModelError(f"{path}: {e}") from None
    except (IndexError, ValueError, KeyError, TypeError, OverflowError, UnicodeDecodeError, MemoryError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:200]
        if isinstance(e, (IndexError, OverflowError, MemoryError)) or "dtype" in first or "reshape" in first:
            # gguf-py ran off the end of the mapped file following a count or a length
            raise ModelError(f"{path}: corrupt or truncated GGUF header (a count or length runs past the end "
                             f"of the file)") from None
        raise ModelError(f"{path}: malformed GGUF file ({first})") from None
    header_end = int(reader.data_offset)  # the bytes just parsed: hashed from the same mapping
    if len(_headers) >= _MAX_HEADERS:
        _headers.clear()
    _headers[path] = (size, header_end, hashlib.sha256(reader.data[:header_end]).digest(), meta, tensors)
    return dict(meta), list(tensors)


def split_files(path: str) -> list[str]:
    """All files of a split set given any one of them (or [path] for a single file)."""
    m = _SPLIT.match(path)
    if not m:
        return [path]
    count = int(m.group("count"))
    if count < 1 or count > 9999:
        raise ModelError(f"{path}: bad split count {count}")
    files = [f"{m.group('stem')}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise ModelError(f"{missing[0]}: part of the split set {os.path.basename(path)} is missing")
    return files


def open_gguf(path: str | os.PathLike) -> GGUFModel:
    """Read a GGUF model: a single file or every part of a split set."""
    first = os.fspath(path)
    files = split_files(first)
    model = GGUFModel(path=files[0], files=files)
    for i, f in enumerate(files):
        meta, tensors = read_file(f)
        if len(files) > 1:
            no = meta.get("split.no")
            if no is not None and no != i:
                raise ModelError(f"{f}: metadata split.no is {no}, expected {i}")
        if i == 0:
            model.metadata = meta
        for t in tensors:
            if t.name in model.tensors:
                raise ModelError(f"{f}: tensor {t.name} also appears in {model.tensors[t.name].path}")
            model.tensors[t.name] = t
    return model
