"""Atomic file replacement: write a temp file beside the target, fsync it, `os.replace` it
over the target, fsync the directory. A crash at any point leaves the old file or the new
one, never a mix or a truncation."""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

TMP_PREFIX = ".strata-"
TMP_SUFFIX = ".tmp"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # e.g. Windows: directories cannot be opened; os.replace is still atomic
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, mode: int | None = None) -> None:
    """Replace `path` with `data` atomically. Keeps the permission bits of an existing file
    unless `mode` is given."""
    target = Path(path)
    directory = target.parent if str(target.parent) else Path(".")
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = None
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{target.name}.", suffix=TMP_SUFFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            view = memoryview(data)
            while view:
                n = f.write(view[: 1 << 20])
                view = view[n:]
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)


def atomic_write_text(path: str | os.PathLike, text: str, *, mode: int | None = None) -> None:
    # newline="" semantics: the text is written exactly as given (no newline translation)
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def stale_temp_files(path: str | os.PathLike) -> list[Path]:
    """Temp files a killed writer left beside `path` (safe to delete; the target is intact)."""
    target = Path(path)
    return sorted(target.parent.glob(f"{TMP_PREFIX}{target.name}.*{TMP_SUFFIX}"))
