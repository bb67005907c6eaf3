"""The session file format: versioned JSONL (see docs/session-format.md).

Line 1 is a header; each turn is one line; per-window telemetry lines follow their turn.
Files are untrusted: every line is checked, and a problem is one SessionError that names the
file and line. Writing is atomic, and an existing file is never replaced by `export`
unless asked.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable

from .errors import AlreadyExistsError, SessionError, UsageError
from .protocol import WindowStats
from .settings import GenerationSettings, SettingsError
from .store import SessionStore, TurnRecord, atomic_write_bytes, sha256_bytes
from .store.db import EDIT_STATUSES

FORMAT = "strata-session"
VERSION = 1
KINDS = ("chat", "edit")
MAX_FILE_BYTES = 512 << 20
_WINDOW_FIELDS = set(WindowStats.__dataclass_fields__)
_SETTINGS_FIELDS = set(GenerationSettings.__dataclass_fields__)


@dataclass
class Recording:
    """A session as data: what `strata replay` re-runs and `sessions export/import` move."""

    kind: str
    model: dict[str, Any]
    settings: dict[str, Any]
    turns: list[TurnRecord] = field(default_factory=list)
    windows: dict[int, list[WindowStats]] = field(default_factory=dict)
    # edit sessions: what became of each round's rewrite (status, before/after sha256)
    edits: dict[int, dict[str, str]] = field(default_factory=dict)
    title: str | None = None
    session_id: str | None = None
    created_at: float | None = None
    source: str = ""

    @property
    def generation_settings(self) -> GenerationSettings:
        return GenerationSettings.from_dict(self.settings)


# -- writing -----------------------------------------------------------------------------------
def _turn_line(t: TurnRecord) -> dict[str, Any]:
    line: dict[str, Any] = {
        "type": "turn", "index": t.index, "role": t.role, "input": t.input,
        "file": {"path": t.file_path, "content": t.file_content} if t.file_path is not None else None,
        "instruction": t.instruction, "output": t.output,
    }
    if t.stop_reason is not None:
        line["stop_reason"] = t.stop_reason
    if t.settings is not None:
        line["settings"] = t.settings
    line["created_at"] = t.created_at
    return line


def dump_lines(rec: Recording, *, with_version: bool = True) -> list[str]:
    from . import __version__

    header: dict[str, Any] = {"format": FORMAT, "version": VERSION, "kind": rec.kind,
                              "model": rec.model, "settings": rec.settings}
    if with_version:
        header["strata_version"] = __version__
    if rec.session_id:
        header["id"] = rec.session_id
    if rec.title:
        header["title"] = rec.title
    if rec.created_at is not None:
        header["created_at"] = rec.created_at
    lines = [header]
    for t in rec.turns:
        line = _turn_line(t)
        if t.index in rec.edits:
            line["edit"] = rec.edits[t.index]
        lines.append(line)
        for w in rec.windows.get(t.index, []):
            lines.append({"type": "window", "turn": t.index, **w.to_dict()})
    return [json.dumps(x, ensure_ascii=False, separators=(",", ":")) for x in lines]


def write_session_file(rec: Recording, path: str | os.PathLike, *, overwrite: bool = False) -> None:
    p = Path(path)
    if p.is_dir():  # --force cannot replace a folder: say so instead of suggesting it
        raise UsageError(f"{p}: is a folder; give the name of a file to write")
    if p.exists() and not overwrite:
        raise AlreadyExistsError(f"{p}: already exists; choose another file name or pass --force")
    try:
        atomic_write_bytes(p, ("\n".join(dump_lines(rec)) + "\n").encode("utf-8"))
    except OSError as exc:  # name the file asked for, not the temp file beside it
        raise OSError(exc.errno, exc.strerror or str(exc), str(p)) from None


def write_session_stream(rec: Recording, out: IO[str]) -> None:
    for line in dump_lines(rec):
        out.write(line + "\n")


# -- reading -----------------------------------------------------------------------------------
def _expect(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise SessionError(f"{where}: {message}")


def _str_or_none(v: Any) -> bool:
    return v is None or isinstance(v, str)


def parse_lines(lines: Iterable[str], source: str) -> Recording:
    rec: Recording | None = None
    expected_index = 0
    for n, raw in enumerate(lines, start=1):
        where = f"{source}:{n}"
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            raise SessionError(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
        except RecursionError:
            raise SessionError(f"{where}: JSON nested too deeply for a session record") from None
        if "\\u" in raw:  # escapes can spell lone surrogates, which no UTF-8 text may hold
            try:
                json.dumps(obj, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise SessionError(f"{where}: text with a lone surrogate escape (\\ud800-\\udfff); "
                                   "not valid Unicode") from None
        _expect(isinstance(obj, dict), where, "expected a JSON object")
        if rec is None:
            if obj.get("format") != FORMAT:
                raise SessionError(f"{where}: not a strata session file (line 1 must have "
                                   f'"format": "{FORMAT}")')
            version = obj.get("version")
            _expect(isinstance(version, int), where, "header has no integer version")
            _expect(version <= VERSION, where, f"session format version {version} is newer than this "
                    f"strata reads ({VERSION}); upgrade strata")
            _expect(version >= 1, where, f"session format version {version} is not valid")
            kind = obj.get("kind")
            _expect(kind in KINDS, where, f'"kind" must be one of {", ".join(KINDS)}')
            model = obj.get("model", {})
            settings = obj.get("settings", {})
            _expect(isinstance(model, dict), where, '"model" must be an object')
            _expect(isinstance(settings, dict), where, '"settings" must be an object')
            _check_settings(settings, where)
            _expect(_str_or_none(obj.get("title")) and _str_or_none(obj.get("id")), where,
                    '"title" and "id" must be strings')
            created = obj.get("created_at")
            _expect(created is None or _is_time(created), where, '"created_at" must be a Unix time (seconds)')
            rec = Recording(kind=kind, model=model, settings=settings, title=obj.get("title"),
                            session_id=obj.get("id"), created_at=created, source=source)
            continue
        typ = obj.get("type")
        _expect(isinstance(typ, str), where, 'record has no "type"')
        if typ == "turn":
            _expect(obj.get("index") == expected_index, where,
                    f"turn index {obj.get('index')!r}, expected {expected_index}")
            for key in ("input", "output"):
                _expect(isinstance(obj.get(key), str), where, f'turn "{key}" must be a string')
            _expect(_str_or_none(obj.get("instruction")), where, 'turn "instruction" must be a string or null')
            _expect(_str_or_none(obj.get("stop_reason")), where, 'turn "stop_reason" must be a string or null')
            role = obj.get("role", "user")
            _expect(isinstance(role, str), where, 'turn "role" must be a string')
            f = obj.get("file")
            fpath = fcontent = None
            if f is not None:
                _expect(isinstance(f, dict) and isinstance(f.get("path"), str)
                        and isinstance(f.get("content"), str), where,
                        'turn "file" must be null or {"path": str, "content": str}')
                fpath, fcontent = f["path"], f["content"]
            if rec.kind == "edit":
                _expect(fpath is not None and obj.get("instruction") is not None, where,
                        'an edit turn needs "file" and "instruction"')
            tset = obj.get("settings")
            if tset is not None:
                _expect(isinstance(tset, dict), where, 'turn "settings" must be an object')
                _check_settings(tset, where)
            created = obj.get("created_at", 0.0)
            _expect(_is_time(created), where, '"created_at" must be a Unix time (seconds)')
            edit = obj.get("edit")
            if edit is not None:
                _expect(isinstance(edit, dict) and edit.get("status") in EDIT_STATUSES
                        and all(isinstance(edit.get(k), str) and len(edit[k]) == 64
                                for k in ("before_sha256", "after_sha256")), where,
                        f'turn "edit" must be {{"status": {"|".join(EDIT_STATUSES)}, "before_sha256", "after_sha256"}}')
                rec.edits[expected_index] = {k: edit[k] for k in ("status", "before_sha256", "after_sha256")}
            rec.turns.append(TurnRecord(index=expected_index, input=obj["input"], output=obj["output"],
                                        role=role, instruction=obj.get("instruction"), file_path=fpath,
                                        file_content=fcontent, stop_reason=obj.get("stop_reason"),
                                        settings=tset, created_at=float(created)))
            expected_index += 1
        elif typ == "window":
            turn = obj.get("turn")
            _expect(isinstance(turn, int) and 0 <= turn < expected_index, where,
                    f"window refers to turn {turn!r}, which does not precede it")
            fields = {k: v for k, v in obj.items() if k in _WINDOW_FIELDS}
            try:
                stats = WindowStats.from_dict(fields)
                _check_window(stats)
            except (TypeError, ValueError) as exc:
                raise SessionError(f"{where}: bad window record ({exc})") from None
            rec.windows.setdefault(turn, []).append(stats)
        # other record types are additions of later strata versions: skipped on purpose
    if rec is None:
        raise SessionError(f"{source}: empty file, not a strata session")
    return rec


def _check_settings(settings: dict[str, Any], where: str) -> None:
    # GenerationSettings holds the one set of rules (types, ranges, finite numbers)
    try:
        GenerationSettings.from_dict(settings)
    except SettingsError as exc:
        raise SessionError(f'{where}: setting "{exc.setting}" {exc.reason}') from None
    except TypeError as exc:
        raise SessionError(f"{where}: bad settings ({exc})") from None


MAX_TIME = 1e11  # far beyond any clock (year 5138); keeps times finite and storable


def _is_time(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < MAX_TIME


MAX_COUNT = 1 << 62  # counters must fit the store's 64-bit integers


def _check_window(s: WindowStats) -> None:
    """Every field has the type of its default and a storable, finite, non-negative value."""
    for name, f in WindowStats.__dataclass_fields__.items():
        v = getattr(s, name)
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        if isinstance(default, bool):
            if not isinstance(v, bool):
                raise ValueError(f"{name} must be true or false")
        elif isinstance(default, int):
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < MAX_COUNT:
                raise ValueError(f"{name} must be a non-negative integer")
        elif isinstance(default, float):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not (0 <= v < float(MAX_COUNT)):
                raise ValueError(f"{name} must be a finite non-negative number")
        elif isinstance(default, str):
            if not isinstance(v, str) or len(v) > 64:
                raise ValueError(f"{name} must be a short string")
    if not (isinstance(s.union_per_layer, list) and all(_count(x) for x in s.union_per_layer)):
        raise ValueError("union_per_layer must be a list of non-negative integers")
    if not (isinstance(s.experts, list) and all(isinstance(x, list) and all(_count(e) for e in x)
                                                 for x in s.experts)):
        raise ValueError("experts must be a list of lists of expert ids")


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < MAX_COUNT


def read_session_file(path: str | os.PathLike) -> Recording:
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise SessionError(f"{p}: no such session file") from None
    if size > MAX_FILE_BYTES:
        raise SessionError(f"{p}: {size} bytes is too large for a session file")
    try:
        with open(p, "rb") as f:  # at most the limit: a device or a pipe has no size to check first
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise SessionError(f"{p}: more than {MAX_FILE_BYTES} bytes is too large for a session file")
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SessionError(f"{p}: not a strata session file (not UTF-8 at byte {exc.start})") from None
    except OSError as exc:
        raise SessionError(f"{p}: cannot read ({exc.strerror})") from None
    return parse_lines(text.splitlines(), str(p))


# -- store <-> file ----------------------------------------------------------------------------
def recording_from_store(store: SessionStore, session_id: str) -> Recording:
    info = store.get_session(session_id)
    rec = Recording(kind=info.kind, model=info.model, settings=info.settings,
                    turns=store.turns(info.id), title=info.title, session_id=info.id,
                    created_at=info.created_at, source=f"session {info.id}")
    for turn, stats in store.windows(info.id):
        rec.windows.setdefault(turn, []).append(stats)
    for e in store.edits(info.id):
        rec.edits[e.turn_idx] = {"status": e.status, "before_sha256": e.before_sha256,
                                 "after_sha256": e.after_sha256}
    return rec


def recording_digest(rec: Recording) -> str:
    """What identifies a recording's content (not the strata version that wrote it): importing
    the same recording twice finds the first import by it."""
    return sha256_bytes("\n".join(dump_lines(rec, with_version=False)).encode("utf-8"))


@dataclass
class ImportResult:
    session_id: str
    created: bool          # False: the store already had this recording
    turns: int


def import_recording(store: SessionStore, rec: Recording) -> str:
    """The id of the stored session holding `rec` (see import_session)."""
    return import_session(store, rec).session_id


def import_session(store: SessionStore, rec: Recording) -> ImportResult:
    """Add a recording to the store in one transaction (a killed import leaves nothing behind).
    Keeps its id unless that id is taken by another session. Idempotent: a recording the store
    already holds (imported before, or the session it was exported from) is not added again."""
    digest = recording_digest(rec)
    earlier = store.imported_as(digest)
    if earlier is not None:
        return ImportResult(earlier, False, len(rec.turns))
    sid = rec.session_id
    if sid and not (len(sid) <= 64 and sid.replace("-", "").isalnum() and sid.isascii()):
        sid = None
    if sid:
        try:
            existing = recording_from_store(store, sid) if store.resolve_id(sid) == sid else None
        except SessionError:
            existing = None
        if existing is not None:
            existing.source = rec.source
            if recording_digest(existing) == digest:
                return ImportResult(sid, False, len(rec.turns))  # exported from this very store
            sid = None
        else:
            taken = True
            try:
                store.resolve_id(sid)
            except SessionError:
                taken = False
            if taken:
                sid = None
    with store.transaction():
        sid = store.create_session(rec.kind, rec.model, rec.settings, title=rec.title, session_id=sid,
                                   created_at=rec.created_at if rec.created_at is not None else time.time())
        for t in rec.turns:
            store.add_turn(sid, t)
            if rec.kind == "chat":
                store.add_message(sid, t.index, "user", t.input)
                store.add_message(sid, t.index, "assistant", t.output)
            if t.index in rec.windows:
                store.add_windows(sid, t.index, rec.windows[t.index])
            if t.index in rec.edits:
                e = rec.edits[t.index]
                store.add_edit(sid, t.index, t.file_path or "", e["before_sha256"], e["after_sha256"], e["status"])
        store.record_import(digest, sid, rec.source)
    return ImportResult(sid, True, len(rec.turns))
