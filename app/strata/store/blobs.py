"""Checksummed engine-state blob files.

Layout: a one-line magic, a one-line JSON header (format version, model id, payload size
and sha256), then the payload bytes. Files are named by the payload's sha256 and written
atomically; reading checks every field and refuses with one SessionError line that names the
file. A blob is never rewritten in place.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import SessionError
from .atomic import atomic_write_bytes, sha256_bytes

MAGIC = b"STRATA-STATE\n"
BLOB_VERSION = 1
_MAX_HEADER = 4096


@dataclass(frozen=True)
class BlobRef:
    sha256: str
    size: int
    model_id: str

    @property
    def name(self) -> str:
        return f"{self.sha256}.state"


class BlobStore:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)

    def path(self, ref: BlobRef | str) -> Path:
        sha = ref.sha256 if isinstance(ref, BlobRef) else ref
        if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
            raise SessionError(f"bad state blob reference {sha!r}")
        return self.directory / f"{sha}.state"

    def write(self, payload: bytes, model_id: str) -> BlobRef:
        ref = BlobRef(sha256_bytes(payload), len(payload), model_id)
        path = self.path(ref)
        if path.exists():
            try:
                self.read(ref, model_id)
                return ref  # same content already stored, and intact
            except SessionError:
                # never overwrite a file we cannot vouch for; the caller sees the problem
                raise
        self.directory.mkdir(parents=True, exist_ok=True)
        header = {"version": BLOB_VERSION, "model_id": model_id, "size": ref.size,
                  "sha256": ref.sha256, "created": time.time()}
        atomic_write_bytes(path, MAGIC + json.dumps(header).encode() + b"\n" + payload)
        return ref

    def read(self, ref: BlobRef | str, model_id: str | None = None) -> bytes:
        """The payload, checked. `model_id` given: refuse a blob saved by another model."""
        path = self.path(ref)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SessionError(f"{path}: engine state blob is missing") from None
        except OSError as exc:
            raise SessionError(f"{path}: cannot read engine state blob ({exc.strerror})") from None
        if not data.startswith(MAGIC):
            raise SessionError(f"{path}: not a strata engine state blob (bad magic)")
        end = data.find(b"\n", len(MAGIC), len(MAGIC) + _MAX_HEADER)
        if end < 0:
            raise SessionError(f"{path}: engine state blob header is corrupt")
        try:
            header = json.loads(data[len(MAGIC):end])
            version, blob_model, size, sha = (header["version"], header["model_id"],
                                              int(header["size"]), header["sha256"])
        except (ValueError, KeyError, TypeError):
            raise SessionError(f"{path}: engine state blob header is corrupt") from None
        if version != BLOB_VERSION:
            raise SessionError(f"{path}: engine state blob version {version} is not supported "
                               f"(this strata reads version {BLOB_VERSION})")
        payload = data[end + 1:]
        if len(payload) != size or sha256_bytes(payload) != sha:
            raise SessionError(f"{path}: engine state blob is corrupt (checksum mismatch)")
        expected = ref.sha256 if isinstance(ref, BlobRef) else ref
        if sha != expected:
            raise SessionError(f"{path}: engine state blob holds different content than its name says")
        if model_id is not None and blob_model != model_id:
            raise SessionError(f"{path}: engine state was saved with model {blob_model}, "
                               f"but the loaded model is {model_id}; refusing to restore it")
        return payload

    def delete(self, ref: BlobRef | str) -> None:
        try:
            self.path(ref).unlink()
        except FileNotFoundError:
            pass
