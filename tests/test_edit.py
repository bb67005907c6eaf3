import difflib
import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strata.edit import EditSession, diff_hunks, live_hunks, read_text_file, split_lines, unified_diff
from strata.errors import EditError
from strata.testing.fake import FakeGenerator
from strata.protocol import GenerationSettings
from strata.store import SessionStore, sha256_file

SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(12))


class CountingFake(FakeGenerator):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.prefilled = 0

    def stream(self, prompt_ids, settings, should_stop=None):
        self.prefilled += len(prompt_ids)
        return super().stream(prompt_ids, settings, should_stop)


@pytest.fixture
def src(tmp_path):
    p = tmp_path / "mod.py"
    p.write_text(SOURCE)
    return p


def test_refuses_binary_non_utf8_large_and_missing(tmp_path):
    binary = tmp_path / "img.png"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(EditError, match="binary"):
        EditSession(FakeGenerator(), binary)
    latin = tmp_path / "latin.txt"
    latin.write_bytes("line one\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(EditError, match="not valid UTF-8.*line 2"):
        read_text_file(latin)
    big = tmp_path / "big.txt"
    big.write_text("x" * 2000)
    with pytest.raises(EditError, match="more than the edit limit"):
        read_text_file(big, max_bytes=1000)
    with pytest.raises(EditError, match="context"):
        EditSession(FakeGenerator(context_limit=1000), big)
    with pytest.raises(EditError, match="no such file"):
        EditSession(FakeGenerator(), tmp_path / "missing.py")
    with pytest.raises(EditError, match="not a regular file"):
        EditSession(FakeGenerator(), tmp_path)


def test_a_file_past_the_context_records_no_session(tmp_path):
    # the refusal came after the session was created: every try left an empty "0 turns" session
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 2000)
    with SessionStore(tmp_path / "s.db") as store:
        with pytest.raises(EditError, match="context"):
            EditSession(FakeGenerator(context_limit=1000), big, store=store)
        assert store.list_sessions() == []


def test_an_edit_interrupted_while_reading_the_file_records_no_session(src, tmp_path, monkeypatch):
    # Ctrl-C while the file was prefilled left an empty "0 turns" session in the store
    class Interrupted(FakeGenerator):
        def stream(self, prompt_ids, settings, should_stop=None):
            raise KeyboardInterrupt

    with SessionStore(tmp_path / "s.db") as store:
        with pytest.raises(KeyboardInterrupt):
            EditSession(Interrupted(), src, store=store)
        assert store.list_sessions() == []
        ed = EditSession(FakeGenerator(), src, store=store)  # a resumed session is never deleted
        src.write_text(SOURCE + "# changed\n")  # not in the ring: read (prefilled) again
        with pytest.raises(KeyboardInterrupt):
            EditSession(Interrupted(), src, store=store, session_id=ed.session_id)
        assert [s.id for s in store.list_sessions()] == [ed.session_id]


def test_nothing_is_written_before_accept_then_atomically(src):
    gen = FakeGenerator()
    ed = EditSession(gen, src)
    before_inode = os.stat(src).st_ino
    list(ed.propose("replace return with yield"))
    assert src.read_text() == SOURCE
    assert ed.proposal.complete and len(ed.hunks()) >= 1
    assert all(h.removed == h.added for h in ed.hunks())
    ed.accept()
    assert src.read_text() == SOURCE.replace("return", "yield")
    assert os.stat(src).st_ino != before_inode  # replaced, not rewritten in place
    assert [p.name for p in src.parent.iterdir()] == ["mod.py"]  # no temp files left
    assert ed.base_text == src.read_text() and ed.proposal is None


def test_reject_leaves_the_file_alone(src):
    ed = EditSession(FakeGenerator(), src)
    list(ed.propose("add a header"))
    assert "# strata: add a header" in ed.diff()
    ed.reject()
    assert src.read_text() == SOURCE
    with pytest.raises(EditError, match="nothing to accept"):
        ed.accept()


def test_retries_roll_back_to_the_file_checkpoint_without_reprefill(src):
    gen = CountingFake()
    ed = EditSession(gen, src)
    after_file = gen.pos
    file_tokens = gen.prefilled
    list(ed.propose("add a header"))
    first_round = gen.prefilled
    list(ed.propose("replace f1 with g1"))
    # the second round fed only the instruction, not the file again
    assert gen.prefilled - first_round < file_tokens // 4
    assert "g1" in ed.proposal.text
    ed.reject()
    list(ed.propose("add a header"))
    assert gen.tokens[:after_file] == FakeGenerator().encode(ed._prefix(SOURCE))


def test_undo_is_hash_checked(src):
    ed = EditSession(FakeGenerator(), src)
    list(ed.propose("replace return with yield"))
    ed.accept()
    list(ed.propose("add a header"))
    ed.accept()
    assert src.read_text().startswith("# strata: add a header")
    ed.undo()
    assert src.read_text() == SOURCE.replace("return", "yield")
    # someone changes the file: undo refuses and says why, the file is left alone
    src.write_text("hand edited\n")
    with pytest.raises(EditError, match="changed on disk"):
        ed.undo()
    assert src.read_text() == "hand edited\n"
    with pytest.raises(EditError, match="nothing to undo"):
        EditSession(FakeGenerator(), src).undo()


def test_accept_refuses_when_the_file_changed_since_read(src):
    ed = EditSession(FakeGenerator(), src)
    list(ed.propose("add a header"))
    src.write_text(SOURCE + "# added elsewhere\n")
    with pytest.raises(EditError, match="changed on disk"):
        ed.accept()
    assert src.read_text() == SOURCE + "# added elsewhere\n"


def test_truncated_rewrite_is_not_written(src):
    ed = EditSession(FakeGenerator(), src)
    list(ed.propose("add a header", should_stop=iter([False] * 5 + [True] * 1000).__next__))
    assert ed.proposal.stop_reason == "stopped"
    with pytest.raises(EditError, match="stopped early"):
        ed.accept()
    assert src.read_text() == SOURCE


def test_permissions_are_kept(src):
    os.chmod(src, 0o640)
    ed = EditSession(FakeGenerator(), src)
    list(ed.propose("add a header"))
    ed.accept()
    assert stat.S_IMODE(os.stat(src).st_mode) == 0o640


def test_edit_session_is_recorded(src, tmp_path):
    with SessionStore(tmp_path / "s.db") as store:
        ed = EditSession(FakeGenerator(), src, GenerationSettings(seed=2), store=store)
        list(ed.propose("add a header"))
        ed.reject()
        list(ed.propose("replace return with yield"))
        ed.accept()
        ed.undo()
        turns = store.turns(ed.session_id)
        assert [t.instruction for t in turns] == ["add a header", "replace return with yield"]
        assert turns[0].file_content == SOURCE and turns[0].file_path == str(src)
        assert [e.status for e in store.edits(ed.session_id)] == ["rejected", "undone"]
        assert store.windows(ed.session_id, 1)
        info = store.get_session(ed.session_id)
        assert info.kind == "edit" and info.title == "mod.py"


def test_empty_instruction_is_refused(src):
    with pytest.raises(EditError, match="instruction is empty"):
        EditSession(FakeGenerator(), src).propose("  ")


def test_unified_diff_matches_difflib():
    old = SOURCE
    new = SOURCE.replace("x + 3", "x - 3").replace("def f9", "def g9") + "tail\n"
    ours = unified_diff(old, new, "mod.py")
    ref = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), "a/mod.py", "b/mod.py"))
    assert ours == ref


def test_lines_split_on_newline_only():
    assert split_lines("a\rb\nc\x0cd\n\u2028e") == ["a\rb\n", "c\x0cd\n", "\u2028e"]
    assert split_lines("") == [] and split_lines("\n") == ["\n"]
    assert len(diff_hunks("x\ry\n", "x\rz\n")[0].lines) == 2


@settings(max_examples=120, deadline=None)
@given(st.lists(st.sampled_from(["a\n", "b\n", "c\n", "d\n", "\n", "e", "f\r", "\x0c"]), max_size=14),
       st.lists(st.sampled_from(["a\n", "b\n", "c\n", "x\n", "\n", "e", "f\r"]), max_size=14))
def test_hunks_agree_with_difflib(a, b):
    old, new = "".join(a), "".join(b)
    ref = [line for line in difflib.unified_diff(split_lines(old), split_lines(new), n=3)][2:]
    ours = []
    for h in diff_hunks(old, new):
        ours.append(h.header + "\n")
        ours.extend(h.lines)
    assert [x.rstrip("\n") for x in ours] == [x.rstrip("\n") for x in ref]


def test_live_hunks_do_not_show_the_unwritten_tail_as_deleted():
    old = "a\nb\nc\nd\ne\n"
    assert live_hunks(old, "a\nb\n") == []
    assert live_hunks(old, "a\nb\nc") == []  # an unfinished line does not count yet
    hunks = live_hunks(old, "a\nB\n")
    assert [line for h in hunks for line in h.lines if line[0] != " "] == ["-b\n", "+B\n"]
    done = live_hunks(old, "a\nB\nc\nd\ne\n")
    assert done == diff_hunks(old, "a\nB\nc\nd\ne\n")


def test_sha_of_written_file_matches(src):
    ed = EditSession(FakeGenerator(), src)
    list(ed.propose("add a header"))
    ed.accept()
    assert sha256_file(src) == ed.base_sha256


def test_earlier_sessions_of_the_file_seed_the_drafter_without_changing_output(tmp_path):
    f = tmp_path / "mod.py"
    with SessionStore(tmp_path / "s.db") as store:
        runs = []
        for _ in range(2):
            f.write_text(SOURCE)
            ed = EditSession(FakeGenerator(), f, store=store)
            windows = [ev for ev in ed.propose("replace return x + with return 2 * x +") if ev.tokens]
            runs.append((ed.prior_documents, len(windows), ed.proposal.text))
        other = tmp_path / "other.py"
        other.write_text(SOURCE)
        assert EditSession(FakeGenerator(), other, store=store).prior_documents == 0
    (p0, w0, text0), (p1, w1, text1) = runs
    assert (p0, p1) == (0, 1)
    assert text0 == text1 and w1 < w0


# `f1(` and not `f1`: the fake replaces text, and `f1` would rename f10 and f11 too, which the
# file-safety check (rightly) refuses to write without --force
_EDIT_OPS = st.lists(st.one_of(
    st.tuples(st.just("propose"), st.sampled_from(["replace f1( with g1(", "add a header", "replace + with -"])),
    st.just(("accept",)), st.just(("reject",)), st.just(("undo",))), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None)
@given(ops=_EDIT_OPS, ring=st.integers(1, 3))
def test_any_sequence_of_edit_actions_keeps_file_and_engine_consistent(tmp_path_factory, ops, ring):
    path = tmp_path_factory.mktemp("edit") / "mod.py"
    path.write_text(SOURCE)
    gen = FakeGenerator()
    ed = EditSession(gen, path, ring_size=ring)
    history = [SOURCE]          # what undo would go back through
    for op in ops:
        if op[0] == "propose":
            list(ed.propose(op[1]))
        elif op[0] == "accept":
            if ed.proposal is None:
                with pytest.raises(EditError):
                    ed.accept()
                continue
            history.append(ed.proposal.text)
            ed.accept()
        elif op[0] == "reject":
            if ed.proposal is None:
                continue
            ed.reject()
        else:
            if len(history) == 1:
                with pytest.raises(EditError, match="nothing to undo"):
                    ed.undo()
                continue
            history.pop()
            ed.undo()
        assert path.read_text() == history[-1] == ed.base_text
        prefix = gen.encode(ed._prefix(ed.base_text))
        assert gen.tokens[:len(prefix)] == prefix
