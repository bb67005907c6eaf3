"""Session persistence: the SQLite store, checksummed engine-state blobs, the checkpoint ring
and atomic file writes. No textual or rich here."""
from __future__ import annotations

from .atomic import atomic_write_bytes, atomic_write_text, sha256_bytes, sha256_file
from .blobs import BlobRef, BlobStore
from .db import (CheckpointRecord, EditRecord, SessionInfo, SessionStore, TurnRecord,
                 model_identity)
from .migrations import LATEST as SCHEMA_VERSION
from .ring import Checkpoint, CheckpointRing

__all__ = [
    "BlobRef", "BlobStore", "Checkpoint", "CheckpointRecord", "CheckpointRing", "EditRecord",
    "SCHEMA_VERSION", "SessionInfo", "SessionStore", "TurnRecord", "atomic_write_bytes",
    "atomic_write_text", "model_identity", "sha256_bytes", "sha256_file",
]
