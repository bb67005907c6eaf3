"""The strata pack format: file names, the expert file's binary header, and reading a pack's
header, sizes and checksum table (Python reads metadata; the C++ store reads the blobs)."""
from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from dataclasses import dataclass

import numpy as np

from ..errors import ModelError
from ..safetensors_io import read_header

PACK_FORMAT = "strata-pack"
PACK_VERSION = 1            # bf16 / f32 experts, dense.safetensors
QUANT_PACK_VERSION = 2      # per-layer stored formats (GGUF blocks); dense.safetensors or dense.gguf
READ_VERSIONS = (PACK_VERSION, QUANT_PACK_VERSION)
HEADER_NAME = "strata-pack.json"
DENSE_NAME = "dense.safetensors"
EXPERTS_NAME = "experts.bin"
ALIGN = 4096
EXPERTS_MAGIC = b"STRATAX1"
# magic, version, pack_id(16), n_layers, n_experts, blob_bytes, stride, data_offset, table_crc
EXPERTS_HEAD = struct.Struct("<8sI16sIIQQQI")

# bytes per element of the expert dtypes a pack stores
EXPERT_DTYPES = {"bf16": 2, "f32": 4}
# Stored formats of a quantized pack's expert matrices: name -> (weights per block, bytes per block),
# the block layouts GGUF defines (the engine's kernels read them as they are).
MAT_FORMATS = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34),
               "Q4_K": (256, 144), "Q5_K": (256, 176), "Q6_K": (256, 210), "IQ4_XS": (256, 136)}
MATRICES = ("gate", "up", "down")


def mat_bytes(fmt: str, rows: int, cols: int) -> int:
    """Stored bytes of a [rows, cols] matrix in `fmt` (cols a whole number of blocks)."""
    elems, nbytes = MAT_FORMATS[fmt]
    if cols % elems:
        raise ValueError(f"a {fmt} row of {cols} weights is not a whole number of {elems}-weight blocks")
    return rows * (cols // elems) * nbytes


def layer_blob_bytes(formats, hidden: int, inter: int) -> int:
    """Bytes of one gate|up|down blob whose matrices are stored in `formats` (3 names)."""
    g, u, d = formats
    return mat_bytes(g, inter, hidden) + mat_bytes(u, inter, hidden) + mat_bytes(d, hidden, inter)


def align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def config_digest(config: dict) -> str:
    """sha256 of a config dict in canonical JSON: ties a pack to the config.json it was made from."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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

    @property
    def layer_formats(self) -> list[list[str]]:
        """[gate, up, down] stored format names per pack layer ([] for a plain bf16/f32 pack)."""
        return [list(f) for f in self.ex.get("formats") or []]

    def layer_blob_bytes(self, ord_: int) -> int:
        """Stored bytes of one expert of pack layer `ord_` (what a read of it transfers, unpadded)."""
        f = self.layer_formats
        return layer_blob_bytes(f[ord_], self.ex["hidden_size"], self.ex["moe_intermediate_size"]) if f \
            else int(self.ex["blob_bytes"])

    @property
    def stored_expert_bytes(self) -> int:
        """Bytes of every expert as stored (the sum of the blobs, without the 4 KiB padding)."""
        return self.ex["num_experts"] * sum(self.layer_blob_bytes(o) for o in range(self.ex["num_layers"]))

    def format_mix(self) -> dict[str, int]:
        """Expert bytes per stored format."""
        ex = self.ex
        H, I, E = ex["hidden_size"], ex["moe_intermediate_size"], ex["num_experts"]
        out: dict[str, int] = {}
        for o in range(ex["num_layers"]):
            names = self.layer_formats[o] if self.layer_formats else [str(ex["dtype"]).upper()] * 3
            for m, name in enumerate(names):
                rows, cols = (H, I) if m == 2 else (I, H)
                out[name] = out.get(name, 0) + E * mat_bytes(name, rows, cols)
        return out


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
    if header.get("version") not in READ_VERSIONS:
        raise ModelError(f"{hp}: pack version {header.get('version')!r} is not supported "
                         f"(this strata reads versions {', '.join(map(str, READ_VERSIONS))}; re-run strata convert)")
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
        formats = ex.get("formats")
        if formats is not None:
            formats = [[str(x) for x in f] for f in formats]
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{hp}: pack header is missing or has a bad field ({e})") from e
    if formats is not None:
        # a quantized pack: every layer's blob size follows from its formats; the stride fits the largest
        bad = next((f for f in formats if len(f) != 3 or any(n not in MAT_FORMATS for n in f)), None)
        if bad is not None or len(formats) != geo["num_layers"]:
            raise ModelError(f"{hp}: bad expert formats {bad!r} in the pack header "
                             f"(supported: {', '.join(MAT_FORMATS)})")
        try:
            sizes = [layer_blob_bytes(f, geo["hidden_size"], geo["moe_intermediate_size"]) for f in formats]
        except ValueError as e:
            raise ModelError(f"{hp}: expert formats do not fit the geometry ({e})") from None
        consistent = not sizes or geo["blob_bytes"] == max(sizes)
    else:
        consistent = dtype in EXPERT_DTYPES and \
            geo["blob_bytes"] == 3 * geo["hidden_size"] * geo["moe_intermediate_size"] * EXPERT_DTYPES[dtype]
    if not consistent or len(layers) != geo["num_layers"] or \
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
        magic, ver, pid, nl, ne, bb, st, do, tcrc = EXPERTS_HEAD.unpack_from(head, 0)
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
    table = head[EXPERTS_HEAD.size:EXPERTS_HEAD.size + 4 * n_blobs]
    if zlib.crc32(table) != tcrc:
        raise ModelError(f"{ep}: checksum table is corrupt (re-run strata convert)")
    crcs = np.frombuffer(table, dtype="<u4").astype(np.uint32)
    return PackInfo(path, header, ep, dp, crcs)


def is_gguf_pack(info: PackInfo) -> bool:
    """A pack converted from a GGUF file: its dense weights and metadata are a GGUF file."""
    return info.dense_path.endswith(".gguf")


def pack_tensor_table(info: PackInfo) -> list[tuple[str, str, int, str, tuple[int, ...]]]:
    """The dense tensor table (name, file path, byte offset, dtype, shape) for build_engine."""
    tensors = read_header(info.dense_path)
    return [(t.name, t.path, t.offset, t.dtype, t.shape) for t in tensors.values()]


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
