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
PACK_VERSION = 1
HEADER_NAME = "strata-pack.json"
DENSE_NAME = "dense.safetensors"
EXPERTS_NAME = "experts.bin"
ALIGN = 4096
EXPERTS_MAGIC = b"STRATAX1"
# magic, version, pack_id(16), n_layers, n_experts, blob_bytes, stride, data_offset, table_crc
EXPERTS_HEAD = struct.Struct("<8sI16sIIQQQI")

# bytes per element of the expert dtypes a pack stores
EXPERT_DTYPES = {"bf16": 2, "f32": 4}


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
    if dtype not in EXPERT_DTYPES or len(layers) != geo["num_layers"] or \
            geo["blob_bytes"] != 3 * geo["hidden_size"] * geo["moe_intermediate_size"] * EXPERT_DTYPES[dtype] or \
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
