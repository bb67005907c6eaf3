"""`strata convert`: a Hugging Face MoE checkpoint folder becomes a strata pack.

Conversion writes into a temporary sibling folder, fsyncs, and renames it into place, so a
half-written pack never looks valid.
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

from ..config import read_config_json
from ..errors import AlreadyExistsError, ModelError, UsageError
from ..safetensors_io import TensorInfo, checkpoint_tensors
from .format import (ALIGN, DENSE_NAME, EXPERT_DTYPES, EXPERTS_HEAD, EXPERTS_MAGIC, EXPERTS_NAME,
                     HEADER_NAME, PACK_FORMAT, PACK_VERSION, QUANT_PACK_VERSION, align_up, config_digest,
                     is_pack, layer_blob_bytes)

# safetensors dtype name -> (numpy dtype for raw views, bytes per element)
_ST_DTYPES = {
    "F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2),
    "F64": (np.float64, 8), "I64": (np.int64, 8), "I32": (np.int32, 4), "I16": (np.int16, 2),
    "I8": (np.int8, 1), "U8": (np.uint8, 1), "BOOL": (np.uint8, 1),
    "F8_E4M3": (np.uint8, 1), "F8_E5M2": (np.uint8, 1), "U16": (np.uint16, 2),
    "U32": (np.uint32, 4), "U64": (np.uint64, 8),
}

# `...layers.N.mlp.experts.E.gate_proj.weight` (per expert) or `...layers.N.mlp.experts.gate_up_proj`
# (fused, [E, 2I, H]) / `...experts.down_proj` ([E, H, I]).
_EXPERT_RE = re.compile(
    r"^(?P<prefix>.*layers\.)(?P<layer>\d+)\.mlp\.experts\."
    r"(?:(?P<expert>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight"
    r"|(?P<fused>gate_up_proj|gate_proj|up_proj|down_proj))$"
)

# Files never copied into a pack: weights (rewritten) and pickles (never loaded anywhere).
_SKIP_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".msgpack", ".h5")


def source_identity(config: dict, tensors: dict[str, TensorInfo]) -> str:
    """A hash of the config and the tensor table (names, dtypes, shapes): same model, same id."""
    h = hashlib.sha256()
    h.update(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"\n{name}:{t.dtype}:{','.join(map(str, t.shape))}".encode())
    return h.hexdigest()


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
        return 3 * self.hidden * self.inter * EXPERT_DTYPES[self.dtype]

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


class _Progress:
    """Counts written bytes and reports (done, total) to an optional callback."""

    def __init__(self, total: int, report: Callable[[int, int], None] | None) -> None:
        self.total, self.done, self.report = total, 0, report

    def __call__(self, n: int) -> None:
        self.done += int(n)
        if self.report:
            self.report(min(self.done, self.total), self.total)


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
                   blob: Callable[[int, int], bytes], progress: Callable[[int], None],
                   layer_bytes: list[int] | None = None) -> tuple[int, int]:
    """Writes experts.bin: header page(s) with the CRC32 table, then one aligned blob per expert.
    `layer_bytes`: each layer's blob size where they differ (quantized packs; `blob_bytes` is the largest)."""
    n_blobs = n_layers * n_experts
    data_offset = -(-(EXPERTS_HEAD.size + 4 * n_blobs) // ALIGN) * ALIGN
    crcs = np.zeros(n_blobs, dtype="<u4")
    with open(path, "wb") as f:
        f.write(b"\0" * data_offset)
        for li in range(n_layers):
            want = layer_bytes[li] if layer_bytes is not None else blob_bytes
            pad = b"\0" * (stride - want)
            for e in range(n_experts):
                data = blob(li, e)
                if len(data) != want:
                    raise ModelError(f"layer {li} expert {e}: blob of {len(data)} bytes, expected {want}")
                crcs[li * n_experts + e] = zlib.crc32(data)
                f.write(data)
                f.write(pad)
                progress(want)
        table = crcs.tobytes()
        table_crc = zlib.crc32(table)
        f.seek(0)
        f.write(EXPERTS_HEAD.pack(EXPERTS_MAGIC, PACK_VERSION, pack_id, n_layers, n_experts, blob_bytes,
                                   stride, data_offset, table_crc))
        f.write(table)
        f.flush()
        os.fsync(f.fileno())
    return data_offset, table_crc


def check_destination(dst: str, force: bool) -> None:
    """An existing DST is replaced only with `force`, and only when it is a strata pack (or an empty
    folder): --force never deletes a folder of other files (`strata convert M ~/models --force`, or
    `.`), a file (`strata convert m.gguf m.gguf --force` deleted the source) or a link."""
    if not os.path.lexists(dst):
        return
    if not force:
        raise AlreadyExistsError(f"{dst}: already exists (use --force to replace it)")
    empty_folder = os.path.isdir(dst) and not os.path.islink(dst) and not os.listdir(dst)
    if os.path.islink(dst) or not (is_pack(dst) or empty_folder):
        what = "a symbolic link" if os.path.islink(dst) else "a folder" if os.path.isdir(dst) else "a file"
        raise AlreadyExistsError(f"{dst}: already exists and is {what}, not a strata pack; --force replaces "
                                 "only a pack (give a new folder name)")


def _assemble(dst: str, force: bool, fill: Callable[[str, bytes], dict]) -> dict:
    """Builds a pack in a temporary sibling folder with `fill(tmp, pack_id) -> header`, fsyncs it
    and renames it into place, so an interrupted run never leaves a valid-looking pack."""
    check_destination(dst, force)
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
                    table_crc: int, formats: list[list[str]] | None = None) -> dict:
    """The header's expert section; `formats` ([gate, up, down] per layer) makes a quantized pack."""
    if formats is not None:
        blob_bytes = max(layer_blob_bytes(f, hidden, inter) for f in formats)
    else:
        blob_bytes = 3 * hidden * inter * EXPERT_DTYPES[dtype]
    extra = {"formats": formats} if formats is not None else {}
    return {**extra,
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
            force: bool = False, quantize: str | None = None) -> dict:
    """Converts a Hugging Face checkpoint folder (or a .gguf file) into a strata pack at `dst`.
    Returns the header. `quantize` ("q8_0"): store the experts in that block format.

    Atomic: the pack is assembled in a temporary sibling folder and renamed into place.
    """
    from .quantize import QUANTIZE_FORMATS, QUANTIZERS

    src = os.path.abspath(src)
    dst = os.path.abspath(dst.rstrip("/") or dst)
    qfmt = None
    if quantize is not None:
        qfmt = QUANTIZE_FORMATS.get(str(quantize).lower())
        if qfmt is None:
            raise UsageError(f"--quantize: {quantize!r} is not one of {', '.join(QUANTIZE_FORMATS)}")
    if os.path.isfile(src) and src.lower().endswith(".gguf"):
        if qfmt is not None:
            raise UsageError(f"--quantize: {src} is a GGUF file, whose blocks are kept as they are")
        from .gguf_converter import convert_gguf

        return convert_gguf(src, dst, progress=progress, force=force)
    if not os.path.exists(src):
        raise ModelError(f"{src}: no such file or folder")
    if not os.path.isdir(src):
        raise ModelError(f"{src}: not a folder")
    if is_pack(src):
        raise ModelError(f"{src}: is already a strata pack")
    check_destination(dst, force)
    config = read_config_json(src)
    tensors = checkpoint_tensors(src)
    lay = find_experts(tensors)
    dense = [tensors[n] for n in sorted(tensors) if n not in lay.tensor_names]
    formats = None
    blob_bytes, stride = lay.blob_bytes, lay.stride
    if qfmt is not None:
        formats = [[qfmt] * 3 for _ in lay.layers]
        try:
            blob_bytes = layer_blob_bytes(formats[0], lay.hidden, lay.inter)
        except ValueError as e:
            raise ModelError(f"{src}: experts of {lay.inter}x{lay.hidden} cannot be stored as {qfmt} ({e})") from None
        stride = align_up(blob_bytes)
    step = _Progress(sum(t.nbytes for t in dense) + len(lay.layers) * lay.num_experts * blob_bytes, progress)

    reader = _SourceReader()

    def blob(li: int, e: int) -> bytes:
        parts = lay.layers[li].experts[e]
        if qfmt is None:
            return b"".join(reader.rows(parts[p], lay.dtype) for p in ("gate", "up", "down"))
        out = []
        for p in ("gate", "up", "down"):
            rows = np.frombuffer(reader.rows(parts[p], "f32"), dtype="<f4").reshape(parts[p][3], -1)
            out.append(QUANTIZERS[qfmt](rows))
        return b"".join(out)

    def fill(tmp: str, pack_id: bytes) -> dict:
        for fn in sorted(os.listdir(src)):
            p = os.path.join(src, fn)
            if os.path.isfile(p) and not fn.endswith(_SKIP_SUFFIXES) and fn != "model.safetensors.index.json":
                shutil.copyfile(p, os.path.join(tmp, fn))
                _fsync_path(os.path.join(tmp, fn))
        _write_dense(os.path.join(tmp, DENSE_NAME), dense, reader, step)
        data_offset, table_crc = _write_experts(os.path.join(tmp, EXPERTS_NAME), len(lay.layers),
                                                lay.num_experts, blob_bytes, stride, pack_id, blob, step)
        return {
            "format": PACK_FORMAT,
            "version": PACK_VERSION if formats is None else QUANT_PACK_VERSION,
            "pack_id": pack_id.hex(),
            "source": {
                "path": src,
                "source_id": source_identity(config, tensors),
                "config_sha256": config_digest(config),
                "model_type": config.get("model_type"),
                "architectures": config.get("architectures"),
            },
            "dense": {"file": DENSE_NAME, "bytes": os.path.getsize(os.path.join(tmp, DENSE_NAME)),
                      "tensors": len(dense)},
            "experts": _experts_header(tmp, [el.layer for el in lay.layers], lay.num_experts, lay.hidden,
                                       lay.inter, lay.dtype if qfmt is None else qfmt.lower(),
                                       sorted(lay.source_dtypes), lay.prefix, data_offset, table_crc, formats),
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
    # `dtype` "bf16"/"f32", or a block format name ("q4_k", "q8_0") for a quantized pack
    formats = None if dtype in EXPERT_DTYPES else [[dtype.upper()] * 3 for _ in layers]
    blob_bytes = layer_blob_bytes(formats[0], hidden, inter) if formats else 3 * hidden * inter * EXPERT_DTYPES[dtype]
    step = _Progress(len(layers) * num_experts * blob_bytes, progress)

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
        stride = align_up(blob_bytes)
        data_offset, table_crc = _write_experts(os.path.join(tmp, EXPERTS_NAME), len(layers), num_experts,
                                                blob_bytes, stride, pack_id, blob, step)
        return {
            "format": PACK_FORMAT,
            "version": PACK_VERSION if formats is None else QUANT_PACK_VERSION,
            "pack_id": pack_id.hex(),
            "source": {"path": None, "source_id": "synthetic", "config_sha256": config_digest(config),
                       "model_type": config.get("model_type"), "architectures": config.get("architectures")},
            "dense": {"file": DENSE_NAME, "bytes": os.path.getsize(dp), "tensors": len(arrays)},
            "experts": _experts_header(tmp, layers, num_experts, hidden, inter, dtype, [dtype.upper()],
                                       "model.layers.", data_offset, table_crc, formats),
        }

    return _assemble(dst, force, fill)
