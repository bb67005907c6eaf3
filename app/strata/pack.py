"""strata packs: a Hugging Face MoE checkpoint rearranged for streaming.

A pack is a folder:

    strata-pack.json     small versioned header (layout, dtypes, source identity)
    dense.safetensors    every tensor that stays resident (embeddings, mixers, routers, ...)
    experts.bin          page 0..: a binary header + CRC32 table; then one 4 KiB-aligned blob
                         per (MoE layer, expert) holding gate | up | down, so one read brings one
                         expert
    config.json, tokenizer files, chat template: copied from the source folder

Conversion writes into a temporary sibling folder, fsyncs, and renames it into place, so a
half-written pack never looks valid. Python reads metadata (JSON, safetensors headers, the
checksum table); the C++ store reads the blobs.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import uuid
import zlib
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .errors import ModelError, UsageError
from .safetensors_io import TensorInfo, checkpoint_files, read_header
from .telemetry import human_bytes  # noqa: F401 (strata convert reports sizes with it)

PACK_FORMAT = "strata-pack"
PACK_VERSION = 1
HEADER_NAME = "strata-pack.json"
DENSE_NAME = "dense.safetensors"
EXPERTS_NAME = "experts.bin"
ALIGN = 4096
EXPERTS_MAGIC = b"STRATAX1"
# magic, version, pack_id(16), n_layers, n_experts, blob_bytes, stride, data_offset, table_crc
_EXPERTS_HEAD = struct.Struct("<8sI16sIIQQQI")

# safetensors dtype name -> (numpy dtype for raw views, bytes per element)
_ST_DTYPES = {
    "F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2),
    "F64": (np.float64, 8), "I64": (np.int64, 8), "I32": (np.int32, 4), "I16": (np.int16, 2),
    "I8": (np.int8, 1), "U8": (np.uint8, 1), "BOOL": (np.uint8, 1),
    "F8_E4M3": (np.uint8, 1), "F8_E5M2": (np.uint8, 1), "U16": (np.uint16, 2),
    "U32": (np.uint32, 4), "U64": (np.uint64, 8),
}
_EXPERT_DTYPES = {"bf16": 2, "f32": 4}

# `...layers.N.mlp.experts.E.gate_proj.weight` (per expert) or `...layers.N.mlp.experts.gate_up_proj`
# (fused, [E, 2I, H]) / `...experts.down_proj` ([E, H, I]).
_EXPERT_RE = re.compile(
    r"^(?P<prefix>.*layers\.)(?P<layer>\d+)\.mlp\.experts\."
    r"(?:(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight"
    r"|(?P<fused>gate_up_proj|gate_proj|up_proj|down_proj))$"
)

# Files never copied into a pack: weights (rewritten) and pickles (never loaded anywhere).
_SKIP_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".msgpack", ".h5")


# --------------------------------------------------------------------------- safetensors


def _check_dtypes(path: str, tensors: dict[str, TensorInfo]) -> dict[str, TensorInfo]:
    for name, t in tensors.items():
        if t.dtype not in _ST_DTYPES:
            raise ModelError(f"{path}: tensor {name!r}: unknown dtype {t.dtype!r}")
    return tensors


def read_safetensors_header(path: str) -> dict[str, TensorInfo]:
    """The checked header of one safetensors file (strata.safetensors_io), limited to the dtypes a
    pack can copy."""
    return _check_dtypes(path, read_header(path))


def checkpoint_tensors(folder: str) -> dict[str, TensorInfo]:
    """All tensors of a Hugging Face checkpoint folder (one or many *.safetensors shards)."""
    table: dict[str, TensorInfo] = {}
    for path in checkpoint_files(folder):
        for name, info in read_safetensors_header(path).items():
            if name in table:
                raise ModelError(f"{folder}: tensor {name!r} appears in both "
                                 f"{os.path.basename(table[name].path)} and {os.path.basename(path)}")
            table[name] = info
    return table


def _read_config(folder: str) -> dict:
    path = os.path.join(folder, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except FileNotFoundError:
        raise ModelError(f"{folder}: no config.json (not a Hugging Face checkpoint folder)") from None
    except (OSError, ValueError) as e:
        raise ModelError(f"{path}: cannot read: {e}") from e
    if not isinstance(cfg, dict):
        raise ModelError(f"{path}: not a JSON object")
    return cfg


def source_identity(config: dict, tensors: dict[str, TensorInfo]) -> str:
    """A hash of the config and the tensor table (names, dtypes, shapes): same model, same id."""
    h = hashlib.sha256()
    h.update(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"\n{name}:{t.dtype}:{','.join(map(str, t.shape))}".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- expert layout


@dataclass
class _ExpertLayer:
    layer: int
    # per expert: {"gate": (TensorInfo, index-or-None, row0, rows), "up": ..., "down": ...}
    experts: dict[int, dict[str, tuple[TensorInfo, int | None, int, int]]] = field(default_factory=dict)


@dataclass
class ExpertLayout:
    prefix: str
    layers: list[_ExpertLayer]
    num_experts: int
    hidden: int
    inter: int
    source_dtypes: set[str]
    tensor_names: set[str]

    @property
    def dtype(self) -> str:
        return "bf16" if self.source_dtypes == {"BF16"} else "f32"

    @property
    def blob_bytes(self) -> int:
        return 3 * self.hidden * self.inter * _EXPERT_DTYPES[self.dtype]

    @property
    def stride(self) -> int:
        return -(-self.blob_bytes // ALIGN) * ALIGN


def find_experts(tensors: dict[str, TensorInfo]) -> ExpertLayout:
    """Finds the routed experts of the main decoder stack (the prefix with the most MoE layers)."""
    by_prefix: dict[str, dict[int, dict]] = {}
    for name, t in tensors.items():
        m = _EXPERT_RE.match(name)
        if m:
            by_prefix.setdefault(m["prefix"], {}).setdefault(int(m["layer"]), {})[name] = (m, t)
    if not by_prefix:
        raise ModelError("no routed expert tensors found (expected names like "
                         "'model.layers.0.mlp.experts.0.gate_proj.weight' or "
                         "'model.layers.0.mlp.experts.gate_up_proj'); is this an MoE checkpoint?")
    prefix = max(by_prefix, key=lambda p: (len(by_prefix[p]), p))
    layers: list[_ExpertLayer] = []
    num_experts = hidden = inter = None
    dtypes: set[str] = set()
    names: set[str] = set()
    for li in sorted(by_prefix[prefix]):
        el = _ExpertLayer(li)
        for name, (m, t) in by_prefix[prefix][li].items():
            names.add(name)
            if t.dtype not in ("BF16", "F16", "F32"):
                raise ModelError(f"tensor {name!r}: expert dtype {t.dtype} is not supported "
                                 "(bf16, f16 or f32 expected)")
            dtypes.add(t.dtype)
            if m["expert"] is not None:
                if len(t.shape) != 2:
                    raise ModelError(f"tensor {name!r}: expected a 2-D matrix, got shape {list(t.shape)}")
                e = int(m["expert"])
                part = m["proj"].split("_")[0]
                el.experts.setdefault(e, {})[part] = (t, None, 0, t.shape[0])
            else:
                if len(t.shape) != 3:
                    raise ModelError(f"tensor {name!r}: expected [experts, rows, cols], got {list(t.shape)}")
                fused = m["fused"]
                for e in range(t.shape[0]):
                    slot = el.experts.setdefault(e, {})
                    if fused == "gate_up_proj":
                        half = t.shape[1] // 2
                        slot["gate"] = (t, e, 0, half)
                        slot["up"] = (t, e, half, half)
                    else:
                        slot[fused.split("_")[0]] = (t, e, 0, t.shape[1])
        # check every expert is complete and every layer agrees on the shapes
        n = max(el.experts) + 1 if el.experts else 0
        for e in range(n):
            parts = el.experts.get(e, {})
            missing = [p for p in ("gate", "up", "down") if p not in parts]
            if missing:
                raise ModelError(f"{prefix}{li}.mlp.experts: expert {e} has no {'/'.join(missing)} "
                                 "weights (checkpoint incomplete?)")
            g, u, d = parts["gate"], parts["up"], parts["down"]
            gi, gh = g[3], g[0].shape[-1]
            di, dh = d[0].shape[-1], d[3]
            if (u[3], u[0].shape[-1]) != (gi, gh) or (dh, di) != (gh, gi):
                raise ModelError(f"{prefix}{li}.mlp.experts: expert {e} has inconsistent shapes "
                                 f"(gate {gi}x{gh}, up {u[3]}x{u[0].shape[-1]}, down {dh}x{di})")
            if hidden is None:
                num_experts, hidden, inter = n, gh, gi
            elif (n, gh, gi) != (num_experts, hidden, inter):
                raise ModelError(f"{prefix}{li}.mlp.experts: {n} experts of {gi}x{gh} differ from "
                                 f"the first MoE layer's {num_experts} experts of {inter}x{hidden}")
        layers.append(el)
    return ExpertLayout(prefix, layers, num_experts or 0, hidden or 0, inter or 0, dtypes, names)


class _SourceReader:
    """Reads tensor slices from source files through read-only memory maps."""

    def __init__(self) -> None:
        self._maps: dict[str, np.memmap] = {}

    def raw(self, t: TensorInfo) -> np.ndarray:
        mm = self._maps.get(t.path)
        if mm is None:
            mm = self._maps[t.path] = np.memmap(t.path, dtype=np.uint8, mode="r")
        return mm[t.offset:t.offset + t.nbytes]

    def rows(self, part: tuple[TensorInfo, int | None, int, int], out_dtype: str) -> bytes:
        t, idx, row0, nrows = part
        np_dt, es = _ST_DTYPES[t.dtype]
        cols = t.shape[-1]
        per_mat = t.shape[-2] * cols * es if idx is not None else 0
        start = (idx or 0) * per_mat + row0 * cols * es
        raw = self.raw(t)[start:start + nrows * cols * es]
        if out_dtype == "bf16":
            return raw.tobytes()
        if t.dtype == "F32":
            return raw.tobytes()
        if t.dtype == "F16":
            return raw.view(np.float16).astype(np.float32).tobytes()
        # bf16 -> f32 is exact: the bf16 bits are the high half of the f32 bits
        return (raw.view(np.uint16).astype(np.uint32) << 16).tobytes()

    def close(self) -> None:
        self._maps.clear()


# --------------------------------------------------------------------------- convert


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_dense(path: str, tensors: list[TensorInfo], reader: _SourceReader,
                 progress: Callable[[int], None]) -> None:
    meta: dict = {"__metadata__": {"format": "pt", "written_by": "strata convert"}}
    off = 0
    for t in tensors:
        meta[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [off, off + t.nbytes]}
        off += t.nbytes
    head = json.dumps(meta, separators=(",", ":")).encode()
    head += b" " * (-(len(head) + 8) % 8)  # keep tensor data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for t in tensors:
            raw = reader.raw(t)
            for a in range(0, t.nbytes, 64 << 20):
                f.write(raw[a:a + (64 << 20)])
            progress(t.nbytes)
        f.flush()
        os.fsync(f.fileno())


def _write_experts(path: str, n_layers: int, n_experts: int, blob_bytes: int, stride: int, pack_id: bytes,
                   blob: Callable[[int, int], bytes], progress: Callable[[int], None]) -> tuple[int, int]:
    """Writes experts.bin: header page(s) with the CRC32 table, then one aligned blob per expert."""
    n_blobs = n_layers * n_experts
    data_offset = -(-(_EXPERTS_HEAD.size + 4 * n_blobs) // ALIGN) * ALIGN
    crcs = np.zeros(n_blobs, dtype="<u4")
    pad = b"\0" * (stride - blob_bytes)
    with open(path, "wb") as f:
        f.write(b"\0" * data_offset)
        for li in range(n_layers):
            for e in range(n_experts):
                data = blob(li, e)
                if len(data) != blob_bytes:
                    raise ModelError(f"layer {li} expert {e}: blob of {len(data)} bytes, expected {blob_bytes}")
                crcs[li * n_experts + e] = zlib.crc32(data)
                f.write(data)
                f.write(pad)
                progress(blob_bytes)
        table = crcs.tobytes()
        table_crc = zlib.crc32(table)
        f.seek(0)
        f.write(_EXPERTS_HEAD.pack(EXPERTS_MAGIC, PACK_VERSION, pack_id, n_layers, n_experts, blob_bytes,
                                   stride, data_offset, table_crc))
        f.write(table)
        f.flush()
        os.fsync(f.fileno())
    return data_offset, table_crc


def _assemble(dst: str, force: bool, fill: Callable[[str, bytes], dict]) -> dict:
    """Builds a pack in a temporary sibling folder with `fill(tmp, pack_id) -> header`, fsyncs it
    and renames it into place, so an interrupted run never leaves a valid-looking pack."""
    if os.path.exists(dst) and not force:
        raise UsageError(f"{dst}: already exists (use --force to replace it)")
    parent = os.path.dirname(dst) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(dst)}.partial-", dir=parent)
    try:
        header = fill(tmp, uuid.uuid4().bytes)
        hp = os.path.join(tmp, HEADER_NAME)
        with open(hp, "w", encoding="utf-8") as f:
            json.dump(header, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private
        _fsync_path(tmp)
        if os.path.exists(dst):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(dst)}.old-", dir=parent)
            os.rename(dst, os.path.join(old, "pack"))
            os.rename(tmp, dst)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, dst)
        _fsync_path(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return header


def _experts_header(tmp: str, n_layers_list: list[int], num_experts: int, hidden: int, inter: int,
                    dtype: str, source_dtypes: list[str], prefix: str, data_offset: int,
                    table_crc: int) -> dict:
    blob_bytes = 3 * hidden * inter * _EXPERT_DTYPES[dtype]
    return {
        "file": EXPERTS_NAME,
        "bytes": os.path.getsize(os.path.join(tmp, EXPERTS_NAME)),
        "checksum": "crc32",
        "table_crc32": table_crc,
        "alignment": ALIGN,
        "data_offset": data_offset,
        "stride": -(-blob_bytes // ALIGN) * ALIGN,
        "blob_bytes": blob_bytes,
        "dtype": dtype,
        "source_dtypes": source_dtypes,
        "num_layers": len(n_layers_list),
        "num_experts": num_experts,
        "hidden_size": hidden,
        "moe_intermediate_size": inter,
        "tensor_prefix": prefix,
        "layers": list(n_layers_list),
        "layout": "gate[inter,hidden] | up[inter,hidden] | down[hidden,inter], row-major",
    }


def convert(src: str, dst: str, *, progress: Callable[[int, int], None] | None = None,
            force: bool = False) -> dict:
    """Converts a Hugging Face checkpoint folder into a strata pack at `dst`. Returns the header.

    Atomic: the pack is assembled in a temporary sibling folder and renamed into place.
    """
    src = os.path.abspath(src)
    dst = os.path.abspath(dst.rstrip("/") or dst)
    if not os.path.isdir(src):
        raise ModelError(f"{src}: not a folder")
    if is_pack(src):
        raise ModelError(f"{src}: is already a strata pack")
    if os.path.exists(dst) and not force:
        raise UsageError(f"{dst}: already exists (use --force to replace it)")
    config = _read_config(src)
    tensors = checkpoint_tensors(src)
    lay = find_experts(tensors)
    dense = [tensors[n] for n in sorted(tensors) if n not in lay.tensor_names]
    total = sum(t.nbytes for t in dense) + len(lay.layers) * lay.num_experts * lay.blob_bytes
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += int(n)
        if progress:
            progress(min(done, total), total)

    reader = _SourceReader()

    def blob(li: int, e: int) -> bytes:
        parts = lay.layers[li].experts[e]
        return b"".join(reader.rows(parts[p], lay.dtype) for p in ("gate", "up", "down"))

    def fill(tmp: str, pack_id: bytes) -> dict:
        for fn in sorted(os.listdir(src)):
            p = os.path.join(src, fn)
            if os.path.isfile(p) and not fn.endswith(_SKIP_SUFFIXES) and fn != "model.safetensors.index.json":
                shutil.copyfile(p, os.path.join(tmp, fn))
                _fsync_path(os.path.join(tmp, fn))
        _write_dense(os.path.join(tmp, DENSE_NAME), dense, reader, step)
        data_offset, table_crc = _write_experts(os.path.join(tmp, EXPERTS_NAME), len(lay.layers),
                                                lay.num_experts, lay.blob_bytes, lay.stride, pack_id, blob, step)
        return {
            "format": PACK_FORMAT,
            "version": PACK_VERSION,
            "pack_id": pack_id.hex(),
            "source": {
                "path": src,
                "source_id": source_identity(config, tensors),
                "config_sha256": _config_digest(config),
                "model_type": config.get("model_type"),
                "architectures": config.get("architectures"),
            },
            "dense": {"file": DENSE_NAME, "bytes": os.path.getsize(os.path.join(tmp, DENSE_NAME)),
                      "tensors": len(dense)},
            "experts": _experts_header(tmp, [el.layer for el in lay.layers], lay.num_experts, lay.hidden,
                                       lay.inter, lay.dtype, sorted(lay.source_dtypes), lay.prefix,
                                       data_offset, table_crc),
        }

    try:
        return _assemble(dst, force, fill)
    finally:
        reader.close()


def write_synthetic_pack(dst: str, config: dict, dense: dict[str, np.ndarray], *, layers: list[int],
                         num_experts: int, hidden: int, inter: int, dtype: str,
                         blob: Callable[[int, int], bytes], force: bool = False,
                         progress: Callable[[int, int], None] | None = None) -> dict:
    """Writes a pack straight from arrays (benchmarks, tests): no source checkpoint on disk.

    `dense`: HF tensor name -> float32 array, or uint16 array holding bf16 bits.
    `blob(pack_layer, expert)` returns that expert's gate|up|down bytes in `dtype`.
    """
    dst = os.path.abspath(dst)
    total = len(layers) * num_experts * 3 * hidden * inter * _EXPERT_DTYPES[dtype]
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += int(n)
        if progress:
            progress(min(done, total), total)

    def fill(tmp: str, pack_id: bytes) -> dict:
        with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=1)
        meta: dict = {}
        off = 0
        arrays = []
        for name in sorted(dense):
            a = np.ascontiguousarray(dense[name])
            st = "BF16" if a.dtype == np.uint16 else "F32"
            if st == "F32":
                a = a.astype("<f4")
            meta[name] = {"dtype": st, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
            off += a.nbytes
            arrays.append(a)
        head = json.dumps(meta, separators=(",", ":")).encode()
        head += b" " * (-(len(head) + 8) % 8)
        dp = os.path.join(tmp, DENSE_NAME)
        with open(dp, "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for a in arrays:
                f.write(a.tobytes())
            f.flush()
            os.fsync(f.fileno())
        blob_bytes = 3 * hidden * inter * _EXPERT_DTYPES[dtype]
        stride = -(-blob_bytes // ALIGN) * ALIGN
        data_offset, table_crc = _write_experts(os.path.join(tmp, EXPERTS_NAME), len(layers), num_experts,
                                                blob_bytes, stride, pack_id, blob, step)
        return {
            "format": PACK_FORMAT,
            "version": PACK_VERSION,
            "pack_id": pack_id.hex(),
            "source": {"path": None, "source_id": "synthetic", "config_sha256": _config_digest(config),
                       "model_type": config.get("model_type"), "architectures": config.get("architectures")},
            "dense": {"file": DENSE_NAME, "bytes": os.path.getsize(dp), "tensors": len(arrays)},
            "experts": _experts_header(tmp, layers, num_experts, hidden, inter, dtype, [dtype.upper()],
                                       "model.layers.", data_offset, table_crc),
        }

    return _assemble(dst, force, fill)


# --------------------------------------------------------------------------- reading a pack


def is_pack(path) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, HEADER_NAME))


@dataclass
class PackInfo:
    path: str
    header: dict
    experts_path: str
    dense_path: str
    crcs: np.ndarray            # uint32 [num_layers * num_experts]

    @property
    def ex(self) -> dict:
        return self.header["experts"]

    @property
    def expert_bytes(self) -> int:
        """Bytes of all experts as they sit in the cache (one slot per blob, stride each)."""
        return self.ex["num_layers"] * self.ex["num_experts"] * self.ex["stride"]


def read_pack(path: str) -> PackInfo:
    """Reads and validates a pack's header, file sizes and checksum table."""
    path = os.path.abspath(path)
    hp = os.path.join(path, HEADER_NAME)
    try:
        with open(hp, encoding="utf-8") as f:
            header = json.load(f)
    except FileNotFoundError:
        raise ModelError(f"{path}: not a strata pack (no {HEADER_NAME})") from None
    except (OSError, ValueError) as e:
        raise ModelError(f"{hp}: unreadable pack header: {e}") from e
    if not isinstance(header, dict) or header.get("format") != PACK_FORMAT:
        raise ModelError(f"{hp}: not a strata pack header")
    if header.get("version") != PACK_VERSION:
        raise ModelError(f"{hp}: pack version {header.get('version')!r} is not supported "
                         f"(this strata reads version {PACK_VERSION}; re-run strata convert)")
    try:
        ex = header["experts"]
        keys = ("num_layers", "num_experts", "blob_bytes", "stride", "data_offset", "hidden_size",
                "moe_intermediate_size", "table_crc32")
        geo = {k: int(ex[k]) for k in keys}
        dtype = ex["dtype"]
        layers = [int(x) for x in ex["layers"]]
        pack_id = bytes.fromhex(header["pack_id"])
        dense_file = header["dense"]["file"]
        experts_file = ex["file"]
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{hp}: pack header is missing or has a bad field ({e})") from e
    if dtype not in _EXPERT_DTYPES or len(layers) != geo["num_layers"] or \
            geo["blob_bytes"] != 3 * geo["hidden_size"] * geo["moe_intermediate_size"] * _EXPERT_DTYPES[dtype] or \
            geo["stride"] % ALIGN or geo["stride"] < geo["blob_bytes"] or geo["data_offset"] % ALIGN:
        raise ModelError(f"{hp}: inconsistent expert geometry in the pack header")
    for fn in (dense_file, experts_file):
        if os.sep in fn or fn.startswith("."):
            raise ModelError(f"{hp}: bad file name {fn!r}")
    ep = os.path.join(path, experts_file)
    dp = os.path.join(path, dense_file)
    n_blobs = geo["num_layers"] * geo["num_experts"]
    want = geo["data_offset"] + n_blobs * geo["stride"]
    for p, need, what in ((ep, want, "expert"), (dp, int(header["dense"].get("bytes", 0)), "dense")):
        try:
            have = os.path.getsize(p)
        except OSError as e:
            raise ModelError(f"{p}: {what} file of the pack is missing ({e.strerror})") from e
        if have < need:
            # name the first blob that is cut off, so the message says what is lost
            if what == "expert":
                first = max(0, (have - geo["data_offset"]) // geo["stride"])
                li, e = divmod(first, geo["num_experts"])
                raise ModelError(f"{p}: truncated at {have} of {want} bytes: layer {layers[min(li, len(layers) - 1)]} "
                                 f"expert {e} onwards is missing (re-run strata convert)")
            raise ModelError(f"{p}: truncated at {have} of {need} bytes (re-run strata convert)")
    with open(ep, "rb") as f:
        head = f.read(geo["data_offset"])
    try:
        magic, ver, pid, nl, ne, bb, st, do, tcrc = _EXPERTS_HEAD.unpack_from(head, 0)
    except struct.error:
        raise ModelError(f"{ep}: expert file header is cut off") from None
    if magic != EXPERTS_MAGIC:
        raise ModelError(f"{ep}: not a strata expert file (bad magic)")
    if pid != pack_id:
        raise ModelError(f"{ep}: expert file belongs to a different pack/model "
                         f"(pack id {pid.hex()[:12]}, header says {pack_id.hex()[:12]})")
    if (nl, ne, bb, st, do, tcrc) != (geo["num_layers"], geo["num_experts"], geo["blob_bytes"],
                                       geo["stride"], geo["data_offset"], geo["table_crc32"]):
        raise ModelError(f"{ep}: expert file geometry does not match {HEADER_NAME}")
    table = head[_EXPERTS_HEAD.size:_EXPERTS_HEAD.size + 4 * n_blobs]
    if zlib.crc32(table) != tcrc:
        raise ModelError(f"{ep}: checksum table is corrupt (re-run strata convert)")
    crcs = np.frombuffer(table, dtype="<u4").astype(np.uint32)
    return PackInfo(path, header, ep, dp, crcs)


def pack_tensor_table(info: PackInfo) -> list[tuple[str, str, int, str, tuple[int, ...]]]:
    """The dense tensor table (name, file path, byte offset, dtype, shape) for build_engine."""
    tensors = read_safetensors_header(info.dense_path)
    return [(t.name, t.path, t.offset, t.dtype, t.shape) for t in tensors.values()]


# --------------------------------------------------------------------------- cache size

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000 ** 2,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1000 ** 3, "gib": 1 << 30, "t": 1 << 40,
          "tb": 1000 ** 4, "tib": 1 << 40}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*|%)\s*$")


def parse_cache_size(text, expert_bytes: int) -> int:
    """Parses `--expert-cache`: bytes ("123456789"), a size ("512MiB", "8GiB", "1.5G"), a fraction
    of the expert bytes ("0.25", "25%") or "all". Returns bytes (capped at expert_bytes)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        text = repr(text)
    s = str(text).strip()
    hint = "use bytes, a size like 512MiB or 8GiB, a fraction like 0.25, or 'all'"
    if s.lower() in ("all", "full", "100%"):
        return int(expert_bytes)
    m = _SIZE_RE.match(s)
    if not m or m[2].lower() not in _UNITS and m[2] != "%":
        raise UsageError(f"--expert-cache: cannot parse {s!r} ({hint})")
    num, unit = float(m[1]), m[2].lower()
    if unit == "%":
        frac = num / 100.0
    elif unit == "" and num <= 1.0:
        frac = num
    else:
        if unit == "" and not m[1].isdigit():
            raise UsageError(f"--expert-cache: {s!r} is neither a whole number of bytes nor a "
                             f"fraction <= 1 ({hint})")
        size = int(num * _UNITS[unit])
        if size <= 0:
            raise UsageError(f"--expert-cache: {s!r} must be more than 0 bytes")
        return min(size, int(expert_bytes))
    if not 0.0 < frac <= 1.0:
        raise UsageError(f"--expert-cache: fraction {s!r} must be in (0, 1]")
    return max(1, int(frac * expert_bytes))


# --------------------------------------------------------------------------- loading


IO_MODES = ("direct", "page_cache")
EVICTIONS = ("lru", "lfu")


def _config_digest(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_pack_matches(info: PackInfo, spec: dict) -> None:
    """Refuses a pack whose experts do not fit the model its config.json describes."""
    ex = info.ex
    want_layers = [i for i, m in enumerate(spec.get("layer_moe", [])) if m]
    got = (ex["num_experts"], ex["hidden_size"], ex["moe_intermediate_size"], list(ex["layers"]))
    want = (spec.get("num_experts"), spec.get("hidden_size"), spec.get("moe_intermediate_size"), want_layers)
    if got != want:
        raise ModelError(
            f"{info.path}: the expert file holds {got[0]} experts of {got[2]}x{got[1]} for layers "
            f"{got[3][:4]}{'...' if len(got[3]) > 4 else ''}, but config.json describes {want[0]} experts of "
            f"{want[2]}x{want[1]} for layers {want[3][:4]}{'...' if len(want[3]) > 4 else ''}: "
            "the pack comes from another model (re-run strata convert)")


def open_expert_store(info: PackInfo, *, cache_bytes: int | None = None, io_mode: str = "direct",
                      eviction: str = "lru", io_threads: int = 4, readahead: bool = False,
                      prefault: bool = False):
    """The native StreamingExpertStore over a pack's expert file."""
    from . import _engine  # noqa: PLC0415 (native module)

    if io_mode not in IO_MODES:
        raise UsageError(f"--io-mode: {io_mode!r} is not one of {', '.join(IO_MODES)}")
    if eviction not in EVICTIONS:
        raise UsageError(f"--eviction: {eviction!r} is not one of {', '.join(EVICTIONS)}")
    ex = info.ex
    return _engine.StreamingExpertStore(
        info.experts_path, ex["data_offset"], ex["stride"], ex["blob_bytes"], ex["num_experts"],
        ex["hidden_size"], ex["moe_intermediate_size"], ex["dtype"], [int(x) for x in ex["layers"]],
        info.crcs, int(info.expert_bytes if cache_bytes is None else cache_bytes), io_mode=io_mode,
        eviction=eviction, io_threads=int(io_threads), readahead=bool(readahead), prefault=bool(prefault))


_ROUTING_KEYS = {
    "protect": ("protect", int), "bonus": ("bonus", float), "draft-protect": ("draft_protect", int),
    "draft-bonus": ("draft_bonus", float), "anchors": ("budget_anchors", int),
}
_ROUTING_FLAGS = {"hard-budget": "hard_budget", "root-readahead": "root_only_readahead"}


def parse_routing(text) -> dict:
    """Parses `--routing`: "off" or comma-separated protect=J, bonus=B, draft-protect=J,
    draft-bonus=B, hard-budget, anchors=N, root-readahead. Returns Engine.set_routing keywords.
    Every mode except root-readahead changes the model (outputs become approximate)."""
    if isinstance(text, dict):
        return dict(text)
    s = str(text or "").strip()
    out: dict = {}
    if s.lower() in ("", "off", "exact", "none"):
        return out
    hint = ("use 'off' or a list like protect=2,bonus=1.5,draft-protect=1,draft-bonus=3,hard-budget,"
            "anchors=4,root-readahead")
    for item in s.split(","):
        item = item.strip().lower().replace("_", "-")
        key, eq, val = item.partition("=")
        if not eq and key in _ROUTING_FLAGS:
            out[_ROUTING_FLAGS[key]] = True
        elif eq and key in _ROUTING_KEYS:
            name, conv = _ROUTING_KEYS[key]
            try:
                out[name] = conv(val)
            except ValueError:
                raise UsageError(f"--routing: {key} needs a number, got {val!r} ({hint})") from None
            if name in ("protect", "draft_protect", "budget_anchors") and out[name] < 0:
                raise UsageError(f"--routing: {key} must be >= 0")
        else:
            raise UsageError(f"--routing: unknown setting {item!r} ({hint})")
    if any(k in out for k in ("protect", "bonus", "draft_protect", "draft_bonus")):
        out["cache_aware"] = True
    if "budget_anchors" in out and not out.get("hard_budget"):
        raise UsageError("--routing: anchors=N only applies together with hard-budget")
    return out


def routing_is_approximate(routing: dict) -> bool:
    return bool(routing.get("cache_aware") or routing.get("hard_budget"))


def load_pack(path, *, expert_cache=None, io_mode: str = "direct", eviction: str = "lru",
              io_threads: int = 4, readahead: bool = False, routing=None, prefault: bool = False,
              **options):
    """Loads a strata pack into an engine whose experts stream through a resident cache.

    `expert_cache`: bytes (int), or text as `parse_cache_size` reads it ("8GiB", "0.25", ...);
    None holds every expert. `routing`: cache-aware routing (see parse_routing; default exact).
    Other options go to `strata.model.build_engine`.
    """
    from . import config as _config  # noqa: PLC0415
    from .model import build_engine  # noqa: PLC0415

    info = read_pack(os.fspath(path))
    raw, spec = _config.read_config(info.path)
    want = info.header.get("source", {}).get("config_sha256")
    if want and want != _config_digest(raw):
        raise ModelError(f"{os.path.join(info.path, 'config.json')}: does not match the pack it sits in "
                         "(the pack was converted from a different model; re-run strata convert)")
    check_pack_matches(info, spec)
    if expert_cache is None:
        cache = info.expert_bytes
    elif isinstance(expert_cache, int) and not isinstance(expert_cache, bool):
        cache = expert_cache
    else:
        cache = parse_cache_size(expert_cache, info.expert_bytes)
    store = open_expert_store(info, cache_bytes=cache, io_mode=io_mode, eviction=eviction,
                              io_threads=io_threads, readahead=readahead, prefault=prefault)
    engine = build_engine(spec, pack_tensor_table(info), expert_store=store, config=raw, **options)
    routing_kw = parse_routing(routing)
    if routing_kw:
        engine.set_routing(**routing_kw)
    return engine
