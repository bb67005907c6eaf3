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
BACKUP_SUFFIX = ".bak"  # filesafety: the old version kept while a file is rewritten in place


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
    unless `mode` is given. A symlink is followed: its target is replaced, the link stays.
    The temp file's name carries the writer's pid, so a later run can tell a killed writer's
    leftovers from a live one's (filesafety.clean_stale_temps)."""
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    directory = target.parent if str(target.parent) else Path(".")
    if mode is None:
        try:
            mode = target.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = None
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{target.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=directory)
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
    """Temp files (and in-place backups) that writers left beside `path`: a killed writer's are
    safe to delete, the target being intact; see temp_file_pid for telling whose they are."""
    target = Path(path)
    found = []
    for suffix in (TMP_SUFFIX, BACKUP_SUFFIX):
        found += target.parent.glob(f"{glob_escape(TMP_PREFIX + target.name)}.*{suffix}")
    return sorted(found)


def glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)


def temp_file_pid(tmp: Path) -> int | None:
    """The pid of the process that made a temp file of atomic_write_bytes (None for names
    without one, e.g. from older versions)."""
    parts = tmp.name[:-len(tmp.suffix)].split(".") if tmp.suffix else []
    # .strata-<name>.<pid>.<random> (temp) or .strata-<name>.<pid> (backup): try both places
    for cand in (parts[-2:-1], parts[-1:]):
        if cand and cand[0].isdigit():
            return int(cand[0])
    return None
