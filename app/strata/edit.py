"""Edit loop core: the model rewrites a whole file under an instruction; the user reviews the
diff and accepts or rejects; repeat.

- The file is read once per base version and refused when binary, not UTF-8, or too large
  for the model's context.
- The engine reads the file (prompt prefix) once; a checkpoint taken right after it lets every
  new instruction roll back to that point, so a retry costs no re-prefill of the file.
- Nothing is written before `accept()`; then the write is atomic (temp, fsync, os.replace)
  and refused if the file changed on disk since it was read. `undo()` is hash-checked the
  same way.
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from . import prompts
from .chat import open_recorded
from .filesafety import (check_name, clean_stale_temps, display_name, rewrite_checks, write_file,
                         write_target)
from .errors import EditError, ModelError, SessionError
from .protocol import GenerationSettings, TextGenerator, WindowEvent, WindowStats
from .store import CheckpointRing, SessionStore, TurnRecord, model_identity, sha256_bytes
from .telemetry import Collector
from .textcheck import checked_text

MAX_FILE_BYTES = 1 << 20
# earlier edit sessions of the same file whose last rewrite seeds the drafter
PRIOR_SESSIONS = 4
# room the prompt needs beyond the file itself: instruction, markers, and the rewrite's slack
REWRITE_SLACK_TOKENS = 64
# The copy bias a rewrite runs with unless the settings give one (docs/decoding.md, "Copy bias"):
# a rewrite copies most of the file, and the bundled model's slips are copy slips. Chosen on a
# development set of held-out tasks (train/copy_bias.py), not on the reported ones.
EDIT_COPY_BIAS = 2.0


def rewrite_token_limit(file_tokens: int) -> int:
    """How many tokens a rewrite of a file of `file_tokens` may run to (before the context's own
    limit): twice the file and some slack, so a rewrite that grows the file still ends by itself."""
    return 2 * file_tokens + REWRITE_SLACK_TOKENS


def read_text_file(path: str | os.PathLike, max_bytes: int = MAX_FILE_BYTES) -> tuple[str, str]:
    """(text, sha256 of the bytes). EditError for missing, binary, non-UTF-8 or too large files."""
    p = Path(path)
    check_name(p)
    if not p.exists():
        raise EditError(f"{display_name(p)}: no such file")
    if not p.is_file():
        raise EditError(f"{display_name(p)}: not a regular file")
    size = p.stat().st_size
    if size > max_bytes:
        raise EditError(f"{p}: file is {size} bytes, more than the edit limit of {max_bytes} bytes")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise EditError(f"{p}: cannot read ({exc.strerror})") from None
    if b"\x00" in data:
        raise EditError(f"{p}: looks like a binary file (contains NUL bytes); strata edits text files")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise EditError(f"{p}: not valid UTF-8 (byte {exc.start}, line {line}); strata edits UTF-8 text") from None
    return text, sha256_bytes(data)


def prompt_name(name: str) -> str:
    """The file name as the prompt gives it: the edit format ends the name at a newline, so
    control characters (a newline in a name is legal) are written as escapes."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in name)


def _same_file(stored: Path, path: Path) -> bool:
    try:
        if stored.resolve() == path.resolve():
            return True
    except OSError:
        pass
    # a relative path was recorded from another folder: the name is all there is to compare
    return not stored.is_absolute() and stored.name == path.name


def stored_edit_file(store: SessionStore, session_id: str) -> Path:
    """The file a recorded edit session edits (for `strata edit --session ID` without FILE)."""
    info = store.get_session(session_id)
    if info.kind != "edit":
        raise SessionError(f"session {info.id} is a {info.kind} session, not an edit session")
    path = next((t.file_path for t in reversed(store.turns(info.id)) if t.file_path), None)
    if path is None:
        raise SessionError(f"session {info.id} has no edit recorded yet; give the file: "
                           f"strata edit FILE --session {info.id}")
    return Path(path)


def edit_statuses(store: SessionStore, session_id: str) -> dict[int, str]:
    """What became of each round's rewrite: turn index -> proposed/accepted/rejected/undone, or
    unchanged for a rewrite that is the file itself (stored as proposed: there is nothing to
    accept or reject, so it would stay "proposed" for ever)."""
    return {e.turn_idx: "unchanged" if e.status == "proposed" and e.before_sha256 == e.after_sha256 else e.status
            for e in store.edits(session_id)}


# -- diffs -------------------------------------------------------------------------------------
@dataclass
class Hunk:
    old_start: int      # 1-based first line in the old text (0 when old_len == 0)
    old_len: int
    new_start: int
    new_len: int
    lines: list[str]    # each starts with " ", "-" or "+" and keeps its line ending

    @property
    def header(self) -> str:
        # unified-diff convention: a length of 1 is left out
        def rng(start: int, length: int) -> str:
            return f"{start}" if length == 1 else f"{start},{length}"

        return f"@@ -{rng(self.old_start, self.old_len)} +{rng(self.new_start, self.new_len)} @@"

    @property
    def added(self) -> int:
        return sum(1 for line in self.lines if line.startswith("+"))

    @property
    def removed(self) -> int:
        return sum(1 for line in self.lines if line.startswith("-"))


def _hunks_from(old_lines: list[str], new_lines: list[str], context: int,
                drop_trailing_delete: bool = False) -> list[Hunk]:
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    opcodes = matcher.get_opcodes()
    if drop_trailing_delete and opcodes and opcodes[-1][0] in ("delete", "replace"):
        # streaming: the old tail has simply not been rewritten yet
        tag, i1, i2, j1, j2 = opcodes[-1]
        # a trailing replace keeps as many old lines as the rewrite has written so far
        opcodes = opcodes[:-1] + ([("replace", i1, min(i2, i1 + j2 - j1), j1, j2)]
                                  if tag == "replace" and j2 > j1 else [])
    hunks = []
    for group in _group(opcodes, context):
        i1, j1 = group[0][1], group[0][3]
        i2, j2 = group[-1][2], group[-1][4]
        lines: list[str] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [" " + x for x in old_lines[a1:a2]]
                continue
            if tag in ("replace", "delete"):
                lines += ["-" + x for x in old_lines[a1:a2]]
            if tag in ("replace", "insert"):
                lines += ["+" + x for x in new_lines[b1:b2]]
        hunks.append(Hunk(i1 + 1 if i2 > i1 else i1, i2 - i1, j1 + 1 if j2 > j1 else j1, j2 - j1, lines))
    return hunks


def _group(opcodes: list[tuple[str, int, int, int, int]], n: int) -> list[list[tuple[str, int, int, int, int]]]:
    # difflib.SequenceMatcher.get_grouped_opcodes, but over a possibly edited opcode list
    if not any(op[0] != "equal" for op in opcodes):
        return []
    codes = list(opcodes)
    if codes[0][0] == "equal":
        t, i1, i2, j1, j2 = codes[0]
        codes[0] = (t, max(i1, i2 - n), i2, max(j1, j2 - n), j2)
    if codes[-1][0] == "equal":
        t, i1, i2, j1, j2 = codes[-1]
        codes[-1] = (t, i1, min(i2, i1 + n), j1, min(j2, j1 + n))
    groups, group = [], []
    for t, i1, i2, j1, j2 in codes:
        if t == "equal" and i2 - i1 > 2 * n:
            group.append((t, i1, min(i2, i1 + n), j1, min(j2, j1 + n)))
            groups.append(group)
            group = []
            i1, j1 = max(i1, i2 - n), max(j1, j2 - n)
        group.append((t, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        groups.append(group)
    return [g for g in groups if any(op[0] != "equal" for op in g)]


def split_lines(text: str) -> list[str]:
    """Lines as a file has them: split after "\n" only (str.splitlines also splits on \r,
    form feeds and Unicode separators, which would invent lines the file does not have)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def diff_hunks(old: str, new: str, context: int = 3) -> list[Hunk]:
    return _hunks_from(split_lines(old), split_lines(new), context)


def live_hunks(old: str, partial: str, context: int = 3) -> list[Hunk]:
    """Hunks of a rewrite still streaming: only complete lines count, and the part of the old
    file the rewrite has not reached yet is not shown as deleted."""
    complete = partial[:partial.rfind("\n") + 1]
    return _hunks_from(split_lines(old), split_lines(complete), context, drop_trailing_delete=True)


def unified_diff(old: str, new: str, path: str = "file", context: int = 3) -> str:
    name = path.lstrip("/")
    out = [f"--- a/{name}\n", f"+++ b/{name}\n"]
    for h in diff_hunks(old, new, context):
        out.append(h.header + "\n")
        for line in h.lines:
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out) if len(out) > 2 else ""


# -- the loop ----------------------------------------------------------------------------------
@dataclass
class Proposal:
    instruction: str
    text: str                       # the rewritten file
    stop_reason: str
    base_sha256: str                # the file version it rewrites
    turn: int
    windows: list[WindowStats] = field(default_factory=list)
    edit_id: int | None = None
    # why writing it may break the file (filesafety.rewrite_checks); accept needs force then
    warnings: list[str] = field(default_factory=list)
    # what the user should know about a rewrite that does what was asked (accept writes it)
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.stop_reason == "eos"


@dataclass
class _Applied:
    before: str
    before_sha256: str
    after_sha256: str
    edit_id: int | None


class EditSession:
    """One file, many rounds. `store=None` keeps the history in memory only."""

    def __init__(self, generator: TextGenerator, path: str | os.PathLike,
                 settings: GenerationSettings | None = None, *, store: SessionStore | None = None,
                 session_id: str | None = None, ring_size: int | None = None,
                 max_bytes: int = MAX_FILE_BYTES, title: str | None = None,
                 force: bool = False) -> None:
        self.generator = generator
        self.path = Path(path)
        # where accept() writes (a symlink's target), or why it must not; and what was cleaned up
        self.target = write_target(self.path, force=force)
        self.notes: list[str] = list(self.target.notes) + clean_stale_temps(self.target.real)
        if self.target.refusal:
            self.notes.append(f"{self.target.refusal}; rewrites can be reviewed, not written")
        self.settings = settings or GenerationSettings()
        self.store = store
        self.max_bytes = max_bytes
        self.proposal: Proposal | None = None
        self.turns: list[TurnRecord] = []
        self._applied: list[_Applied] = []
        self.base_text, self.base_sha256 = read_text_file(self.path, max_bytes)
        self.display_path = display_name(self.path)
        self.session_id: str | None = None
        if store is not None and session_id is not None:
            info = open_recorded(store, session_id, "edit", generator)
            self.session_id = info.id
            self.turns = store.turns(info.id)
            self._check_same_file(info.id)
        self._check_fits(self.base_text)  # before a new session is recorded: a refusal leaves none
        created = False
        if store is not None and session_id is None:
            self.session_id = store.create_session("edit", model_identity(generator), self.settings,
                                                   title=title or self.path.name)
            created = True
        try:
            self.ring = CheckpointRing.for_session(store, self.session_id, generator.model_id, ring_size)
            self.prior_documents = self._feed_prior_sessions()
            self._read_file()
        except BaseException:  # Ctrl-C while the file is read, a bad ring size: no empty session left
            if created and store is not None and self.session_id is not None:
                try:
                    store.delete_session(self.session_id)
                except Exception:  # noqa: BLE001 - the original error is the one to report
                    pass
            raise

    def _check_same_file(self, session_id: str) -> None:
        """A resumed edit session goes on with the file it edited, not another one."""
        stored = next((t.file_path for t in reversed(self.turns) if t.file_path), None)
        if stored is None or _same_file(Path(stored), self.path):
            return
        raise EditError(f"session {session_id} edits {stored}, not {self.display_path}; "
                        f"run strata edit --session {session_id} without a file, or start a new session")

    # -- engine ------------------------------------------------------------------------------
    def _prefix(self, text: str) -> str:
        return prompts.edit_file_prefix(prompt_name(self.path.name), text)

    def _check_fits(self, text: str) -> None:
        n_file = len(self.generator.encode(self._prefix(text)))
        need = 2 * n_file + REWRITE_SLACK_TOKENS
        if need > self.generator.context_limit:
            raise EditError(f"{self.display_path}: file is {n_file} tokens; reading and rewriting it needs about "
                            f"{need}, more than the model's context of {self.generator.context_limit}")

    def _feed_prior_sessions(self) -> int:
        """Give the suffix drafter the last rewrite of each recent edit session of this file:
        repeated edits of a file repeat text. Drafting only: the output cannot change."""
        add = getattr(self.generator, "add_history", None)
        if add is None or self.store is None:
            return 0
        target = self.path.resolve()
        fed = 0
        # a resumed session's own last rewrite counts too: it is the likeliest text to repeat
        for info in self.store.list_sessions(limit=50, kind="edit"):
            for turn in reversed(self.store.turns(info.id)):
                if turn.file_path and turn.output and Path(turn.file_path).resolve() == target:
                    add(self.generator.encode(turn.output))
                    fed += 1
                    break
            if fed >= PRIOR_SESSIONS:
                break
        return fed

    def _read_file(self) -> None:
        """Put the engine right after the file prefix: from the ring when this version of the
        file was read before, else by prefilling it (and checkpointing)."""
        cp = self.ring.find(label="file", key=self.base_sha256)
        if cp is not None:
            try:
                self.ring.restore(self.generator, cp)
                return
            except (SessionError, ModelError):
                pass
        self.generator.reset()
        ids = self.generator.encode(self._prefix(self.base_text))
        for _ in self.generator.stream(ids, GenerationSettings(max_new=0)):
            pass  # max_new=0: prefill only
        self.ring.push(len(self.turns) - 1, self.generator.pos, self.generator.snapshot(),
                       label="file", key=self.base_sha256)

    def _max_new(self, settings: GenerationSettings, prompt_tokens: int) -> int:
        room = self.generator.context_limit - self.generator.pos - prompt_tokens
        wanted = max(settings.max_new, rewrite_token_limit(len(self.generator.encode(self.base_text))))
        return max(1, min(room, wanted))

    # -- rounds ------------------------------------------------------------------------------
    def propose(self, instruction: str, settings: GenerationSettings | None = None,
                should_stop: Callable[[], bool] | None = None, *,
                max_tokens: int | None = None) -> Iterator[WindowEvent]:
        """Stream a rewrite under `instruction`. When the stream ends, `self.proposal` holds it.
        `max_tokens` caps the rewrite below the usual room (replay of a stopped round)."""
        if not instruction.strip():
            raise EditError("the instruction is empty; say what to change")
        checked_text(instruction, "the instruction")
        settings = settings or self.settings
        if settings.copy_bias is None:  # recorded as run, so a replay runs it the same way
            settings = settings.replace(copy_bias=EDIT_COPY_BIAS)
        self.proposal = None
        self._read_file()  # every round starts from the checkpoint after the file
        ids = self.generator.encode(prompts.edit_instruction_suffix(instruction))
        max_new = self._max_new(settings, len(ids))
        if max_tokens is not None:
            max_new = max(0, min(max_new, max_tokens))
        run_settings = GenerationSettings.from_dict({**settings.to_dict(), "max_new": max_new})
        return self._run(instruction, ids, run_settings, settings, should_stop)

    def _run(self, instruction: str, ids: list[int], run_settings: GenerationSettings,
             settings: GenerationSettings, should_stop: Callable[[], bool] | None) -> Iterator[WindowEvent]:
        rec = Collector()
        stream = self.generator.stream(ids, run_settings, should_stop)  # refusals record nothing
        try:
            yield from rec.follow(stream)
        finally:
            self._record(instruction, rec.text, rec.stop_reason, settings, rec.windows)

    def _record(self, instruction: str, text: str, stop_reason: str, settings: GenerationSettings,
                windows: list[WindowStats]) -> None:
        index = len(self.turns)
        turn = TurnRecord(index=index, input=instruction, output=text, instruction=instruction,
                          file_path=self.display_path, file_content=self.base_text,
                          stop_reason=stop_reason, settings=settings.to_dict())
        self.turns.append(turn)
        warnings, notes = rewrite_checks(self.path, self.base_text, text, instruction)
        self.proposal = Proposal(instruction, text, stop_reason, self.base_sha256, index, windows,
                                 warnings=warnings, notes=notes)
        if self.store is not None and self.session_id is not None:
            self.store.add_turn(self.session_id, turn)
            self.store.add_windows(self.session_id, index, windows)
            self.proposal.edit_id = self.store.add_edit(self.session_id, index, self.display_path,
                                                        self.base_sha256, sha256_bytes(text.encode()))

    def hunks(self, context: int = 3) -> list[Hunk]:
        if self.proposal is None:
            return []
        return diff_hunks(self.base_text, self.proposal.text, context)

    def diff(self, context: int = 3) -> str:
        if self.proposal is None:
            return ""
        return unified_diff(self.base_text, self.proposal.text, self.display_path, context)

    def _check_disk(self, expected_sha: str, action: str) -> None:
        try:
            _, sha = read_text_file(self.path, max(self.max_bytes, 1 << 30))
        except EditError as exc:
            raise EditError(f"{self.display_path}: changed on disk since strata read it ({exc}); not {action}") from None
        if sha != expected_sha:
            raise EditError(f"{self.display_path}: changed on disk since strata read it; not {action} "
                            "(re-run strata edit to start from the current file)")

    def accept(self, *, allow_incomplete: bool = False, force: bool = False) -> None:
        """Write the proposal to the file (atomically) and make it the new base. A rewrite with
        warnings (it no longer parses, or deletes most of the file) needs `force`."""
        p = self.proposal
        if p is None:
            raise EditError("nothing to accept: no rewrite has been proposed")
        if not p.complete and not allow_incomplete:
            raise EditError(f"{self.display_path}: the rewrite stopped early ({p.stop_reason}) and may be "
                            "truncated; not written")
        if p.warnings and not force:
            raise EditError(f"{self.display_path}: not written: {'; '.join(p.warnings)}; "
                            "pass --force to write it anyway")
        if self.target.refusal:
            raise EditError(self.target.refusal)
        self._check_disk(self.base_sha256, "written")
        data = p.text.encode("utf-8")
        write_file(self.target, data)
        after = sha256_bytes(data)
        self._applied.append(_Applied(self.base_text, self.base_sha256, after, p.edit_id))
        if self.store is not None and p.edit_id is not None:
            self.store.set_edit_status(p.edit_id, "accepted")
        self.base_text, self.base_sha256 = p.text, after
        self.proposal = None
        self._read_file()

    def reject(self) -> None:
        p = self.proposal
        if p is None:
            raise EditError("nothing to reject: no rewrite has been proposed")
        if self.store is not None and p.edit_id is not None:
            self.store.set_edit_status(p.edit_id, "rejected")
        self.proposal = None

    @property
    def can_undo(self) -> bool:
        return bool(self._applied)

    def undo(self) -> None:
        """Put back the file as it was before the last accepted rewrite, if nobody changed it since."""
        if not self._applied:
            raise EditError("nothing to undo: no rewrite has been accepted in this session")
        last = self._applied[-1]
        self._check_disk(last.after_sha256, "undone")
        write_file(self.target, last.before.encode("utf-8"))
        self._applied.pop()
        if self.store is not None and last.edit_id is not None:
            self.store.set_edit_status(last.edit_id, "undone")
        self.base_text, self.base_sha256 = last.before, last.before_sha256
        self.proposal = None
        self._read_file()
