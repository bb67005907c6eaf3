"""What a careful editor checks before it writes a file the user asked it to change.

- **Where to write** (`WriteTarget`): a symlink is followed, so the target changes and the link
  stays a link; a read-only file, a file in a folder strata cannot write in, or a file with
  other names (hard links, which an atomic replace would split from the rewrite) is refused
  with a line that says why and what to do. With `force`, a hard-linked file is rewritten in
  place (every name sees the rewrite) behind a backup copy.
- **Leftovers** (`clean_stale_temps`): temp files of writers that were killed (their process is
  gone) are removed; the file itself is intact by construction (see store.atomic).
- **Never a broken file** (`rewrite_checks`): a rewrite of a file that parsed (Python, JSON,
  TOML, YAML when PyYAML is installed) that no longer parses, one that deletes most of the
  file, a Python rewrite that drops a function or class the instruction does not name (a
  small model asked to rename one function may leave another out), or one that still uses a
  name it no longer defines (undefnames; NameError when that line runs), gets a warning;
  headless `--yes` refuses to write it without `--force`, the TUI shows it and asks for a
  second accept. A name the instruction asks to delete and the file still uses is a note
  instead: shown, and the rewrite, which does what was asked, is written.
"""
from __future__ import annotations

import ast
import difflib
import json
import os
import re
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .editscope import (MAX_NAMED_CHANGES, MAX_NAMED_LINES, asked_renames, asks_to_delete, deleted_definition_lines,
                        missing_imports, mismatched_signatures, undone_deletions, unexplained_changes,
                        unchanged_literals, unfinished_renames)
from .errors import EditError
from .store.atomic import (BACKUP_SUFFIX, TMP_PREFIX, atomic_write_bytes, stale_temp_files,
                           temp_file_pid)
from .undefnames import Undefined, newly_undefined

# a rewrite that keeps fewer than this share of the old lines, and is this much shorter, "deletes
# most of the file"; tiny files are left out (rewriting 3 lines is not a disaster)
KEEP_SHARE = 0.5
MIN_LINES_FOR_DELETE_CHECK = 8
# how many dropped definitions a warning names before it says "and N more"
MAX_NAMED_DROPS = 4
def display_name(path: str | os.PathLike) -> str:
    """A file name fit for one line of text, whatever bytes it has."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def check_name(path: str | os.PathLike) -> None:
    """EditError for file names strata cannot record or show faithfully (not UTF-8)."""
    raw = os.fsencode(path)
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        raise EditError(f"{display_name(path)}: the file name is not valid UTF-8; rename the file "
                        "to edit it with strata") from None


@dataclass
class WriteTarget:
    """The file that accept() writes for a path the user named, and how."""

    path: Path                  # as the user named it
    real: Path                  # the file that gets written (a symlink's target)
    in_place: bool = False      # rewrite the inode itself (hard links, with force)
    notes: list[str] = field(default_factory=list)
    refusal: str | None = None  # why it must not be written (None: it may)

    @property
    def is_link(self) -> bool:
        return self.real != self.path


def write_target(path: str | os.PathLike, *, force: bool = False) -> WriteTarget:
    p = Path(path)
    check_name(p)
    name = display_name(p)
    real = p
    notes: list[str] = []
    if p.is_symlink():
        try:
            real = Path(os.path.realpath(p, strict=True))
        except (OSError, RuntimeError):
            raise EditError(f"{name}: a symlink whose target does not exist (or a loop)") from None
        notes.append(f"{name} is a symlink: strata edits its target {display_name(real)} and keeps the link")
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise EditError(f"{name}: no such file") from None
    except OSError as exc:
        raise EditError(f"{name}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise EditError(f"{name}: not a regular file")
    target = WriteTarget(p, real, notes=notes)
    if not os.access(real, os.W_OK) or not (st.st_mode & 0o222):
        target.refusal = (f"{name} is read-only; strata does not change read-only files "
                          f"(make it writable, e.g. chmod u+w, if you mean to)")
        return target
    if st.st_nlink > 1:
        others = st.st_nlink - 1
        names = f"{others} other name{'s' if others != 1 else ''}"
        if force:
            target.in_place = True
            notes.append(f"{name} has {names} (hard links): written in place, so every name sees "
                         "the rewrite")
        else:
            target.refusal = (f"{name} has {names} (hard links): replacing it would leave them with the "
                              "old text; pass --force to write it in place (every name sees the rewrite)")
            return target
    if not target.in_place and not os.access(real.parent, os.W_OK | os.X_OK):
        target.refusal = (f"{name}: strata cannot write in the folder {display_name(real.parent)} "
                          "(it writes a temp file beside the file and renames it over the file)")
    return target


def write_file(target: WriteTarget, data: bytes) -> None:
    """Write `data` to the target: atomically (temp, fsync, rename; the link stays a link), or
    in place behind a backup copy that a killed run leaves for the next run to report."""
    if target.refusal:
        raise EditError(target.refusal)
    try:
        if not target.in_place:
            atomic_write_bytes(target.real, data)
            return
        _write_in_place(target.real, data)
    except PermissionError as exc:
        raise EditError(f"{display_name(target.path)}: not written ({exc.strerror})") from None
    except OSError as exc:
        raise EditError(f"{display_name(target.path)}: not written ({exc.strerror or exc})") from None


def _write_in_place(real: Path, data: bytes) -> None:
    backup = real.with_name(f"{TMP_PREFIX}{real.name}.{os.getpid()}{BACKUP_SUFFIX}")
    atomic_write_bytes(backup, real.read_bytes())
    with open(real, "r+b") as f:
        f.truncate(0)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    backup.unlink()


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except OSError:
        return True
    return True


def clean_stale_temps(path: str | os.PathLike) -> list[str]:
    """Remove temp files that killed strata runs left beside `path`; returns notes to show.
    A temp file of a live writer is left alone. A backup of an interrupted in-place write is
    never deleted: the file may be half written, so EditError says where the backup is."""
    p = Path(path)
    notes: list[str] = []
    removed = 0
    for tmp in stale_temp_files(p):
        pid = temp_file_pid(tmp)
        if pid is not None and _alive(pid):
            continue
        if tmp.name.endswith(BACKUP_SUFFIX):
            raise EditError(f"{display_name(p)}: an interrupted in-place write left the previous "
                            f"version in {display_name(tmp)}; check the file, then delete or restore that copy")
        try:
            tmp.unlink()
            removed += 1
        except OSError:
            pass
    if removed:
        notes.append(f"removed {removed} temp file{'s' if removed != 1 else ''} that a killed strata "
                     f"left beside {display_name(p)} (the file itself was intact)")
    return notes


# -- never write a broken file ---------------------------------------------------------------------
def _parse_error(kind: str, text: str) -> str | None:
    """None when `text` parses as `kind`, else a short reason with the line."""
    try:
        if kind == "Python":
            # a full compile to bytecode (nothing runs): an AST alone misses what only the
            # compiler checks, e.g. a `from __future__` import below other code, or `return`
            # and `break` outside their blocks; its warnings (bad escapes) are not ours to print
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(text, "<rewrite>", "exec", dont_inherit=True)
        elif kind == "JSON":
            json.loads(text)
        elif kind == "TOML":
            import tomllib

            tomllib.loads(text)
        elif kind == "YAML":
            import yaml  # type: ignore[import-untyped]

            list(yaml.safe_load_all(text))
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except json.JSONDecodeError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (RecursionError, MemoryError):
        return "nested too deeply to parse"
    except ValueError as exc:  # tomllib.TOMLDecodeError, null bytes
        return str(exc).splitlines()[0][:120] if str(exc) else exc.__class__.__name__
    except Exception as exc:  # noqa: BLE001 - yaml.YAMLError and friends: any failure is "does not parse"
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        return where + (getattr(exc, "problem", None) or exc.__class__.__name__)
    return None


def syntax_of(path: str | os.PathLike) -> str | None:
    """The language strata can check for this file name, when it has a parser at hand."""
    suffix = Path(path).suffix.lower()
    if suffix in (".py", ".pyi"):
        return "Python"
    if suffix == ".json":
        return "JSON"
    if suffix == ".toml":
        return "TOML"
    if suffix in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            return None
        return "YAML"
    return None


def _definitions(text: str) -> dict[str, int] | None:
    """Qualified names of the functions and classes in Python source (`Class.method`, `f.inner`),
    each with how often it is defined; None when it does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    out: dict[str, int] = {}
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:  # no recursion: a deeply nested file must not blow the stack
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                out[name] = out.get(name, 0) + 1
                stack.append((child, name + "."))
            elif isinstance(child, ast.stmt):
                stack.append((child, prefix))
    return out


def _named(instruction: str, word: str) -> bool:
    """Whether the instruction names `word` as a whole identifier (any case)."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", instruction, re.IGNORECASE) is not None


def dropped_definitions(old: str, new: str, instruction: str | None = None) -> list[str]:
    """The functions and classes `old` defines that `new` no longer does (fewer definitions of the
    name), leaving out those the instruction names (deleting or renaming them is what it asked
    for, matched as a whole identifier, any case) and the members of a dropped class. Empty
    when either side does not parse."""
    before, after = _definitions(old), _definitions(new)
    if before is None or after is None:
        return []
    said = instruction or ""
    gone = [q for q, n in before.items() if after.get(q, 0) < n]
    gone_set = set(gone)
    out = []
    for q in gone:
        parent = q.rpartition(".")[0]
        if parent and parent in gone_set:
            continue  # said once, with its class or function
        bare = q.rpartition(".")[2]
        if _named(said, bare):
            continue
        out.append(q)
    return out


def _uses(names: list[Undefined]) -> str:
    """`a (line 3)`, `a (lines 3, 9) and b (line 4)`, ... and N more."""
    shown = []
    for u in names[:MAX_NAMED_DROPS]:
        where = "line" if len(u.lines) == 1 else "lines"
        more = ", ..." if len(u.lines) > MAX_NAMED_LINES else ""
        shown.append(f"{u.name} ({where} {', '.join(str(n) for n in u.lines[:MAX_NAMED_LINES])}{more})")
    if len(names) > MAX_NAMED_DROPS:
        return ", ".join(shown) + f" and {len(names) - MAX_NAMED_DROPS} more"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def undefined_name_checks(old: str, new: str, instruction: str | None = None) -> tuple[list[str], list[str]]:
    """(warnings, notes) about the names a Python rewrite still uses but no longer defines (it
    parses, and those lines raise NameError). A name the instruction asks to delete (a delete
    word, and the name or, for an import, its module named) is a note: the rewrite did what was
    asked, and the user should know the file still uses it. Any other is a warning. The old name
    of a rename the instruction asks for is left to the rename check."""
    said = instruction or ""
    renamed = {was for was, _ in asked_renames(said)}
    deleting = asks_to_delete(said)
    asked, other = [], []
    for u in newly_undefined(old, new):
        if u.name in renamed:
            continue
        (asked if deleting and any(_named(said, w) for w in u.words) else other).append(u)
    warnings_ = [f"the rewrite still uses {_uses(other)}, which it no longer defines"] if other else []
    notes = [f"the rewrite still uses {_uses(asked)}, which the instruction deletes"] if asked else []
    return warnings_, notes


def rewrite_checks(path: str | os.PathLike, old: str, new: str,
                   instruction: str | None = None) -> tuple[list[str], list[str]]:
    """(warnings, notes) about writing `new` over `old`. A warning says why the rewrite may break
    the file or do what was not asked (headless --yes refuses it without --force); a note says
    what the user should know about a rewrite that does what was asked (it is written)."""
    out: list[str] = []
    notes: list[str] = []
    kind = syntax_of(path)
    if kind is not None and _parse_error(kind, old) is None:
        why = _parse_error(kind, new)
        if why is not None:
            out.append(f"the rewrite is not valid {kind} ({why}), the original was valid")
        elif kind == "Python":
            gone = dropped_definitions(old, new, instruction)
            if gone:
                shown = ", ".join(gone[:MAX_NAMED_DROPS])
                more = f" and {len(gone) - MAX_NAMED_DROPS} more" if len(gone) > MAX_NAMED_DROPS else ""
                what = "definition" if len(gone) == 1 else "definitions"
                out.append(f"the rewrite drops the {what} {shown}{more}, which the instruction does not name")
            undefined, notes = undefined_name_checks(old, new, instruction)
            out += undefined
            out += missing_imports(old, new, instruction)
            out += undone_deletions(old, new, instruction)
            out += mismatched_signatures(old, new, instruction)
    explained = False  # the instruction asks for mechanical edits that explain every change
    if kind is None or (_parse_error(kind, old) is None and _parse_error(kind, new) is None):
        out += unfinished_renames(old, new, instruction, python=kind == "Python")
        out += unchanged_literals(old, new, instruction)
        what, extra = unexplained_changes(old, new, instruction, python=kind == "Python")
        explained = bool(what) and not extra
        if extra:
            shown = ", ".join(str(n) for n in extra[:MAX_NAMED_CHANGES])
            more = ", ..." if len(extra) > MAX_NAMED_CHANGES else ""
            where = "line" if len(extra) == 1 else "lines"
            out.append(f"the rewrite also changes {where} {shown}{more}, which the {what} does not explain")
    old_lines, new_lines = old.splitlines(), new.splitlines()
    # "delete the function f" where f is most of the file: asked for, and every removed line f's
    if not explained and len(old_lines) >= MIN_LINES_FOR_DELETE_CHECK and len(new_lines) < KEEP_SHARE * len(old_lines):
        matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
        kept = sum(b.size for b in matcher.get_matching_blocks())
        # every line gone is in the definitions the instruction deletes by name: what was asked,
        # however much of the file they are (a multi-step edit whose other steps no check reads)
        asked = deleted_definition_lines(old, instruction) if kind == "Python" else set()
        gone = {i + 1 for tag, i1, i2, _, _ in matcher.get_opcodes() if tag in ("delete", "replace")
                for i in range(i1, i2) if old_lines[i].strip()}
        if kept < KEEP_SHARE * len(old_lines) and not (asked and gone <= asked):
            out.append(f"the rewrite deletes most of the file ({len(old_lines) - kept} of "
                       f"{len(old_lines)} lines gone, {len(new_lines)} left)")
    return out, notes


def rewrite_warnings(path: str | os.PathLike, old: str, new: str, instruction: str | None = None) -> list[str]:
    """The warnings of `rewrite_checks`: why writing `new` over `old` may break the file or do what
    was not asked (empty: nothing found)."""
    return rewrite_checks(path, old, new, instruction)[0]
