"""`strata edit --session ID` resumes a recorded edit; `sessions show` says what became of each
rewrite; saved edits and chats feed the suffix drafter (drafting only: outputs unchanged)."""
import io
import json
import sys

import pytest

from strata.chat import ChatSession
from strata.cli import ExitCode, app
from strata.cli.runner import run_app
from strata.edit import EditSession, stored_edit_file
from strata.errors import EditError, SessionError
try:
    from strata.testing.fake import FakeGenerator
except ImportError:  # before the test doubles moved into strata.testing
    from strata.fake import FakeGenerator
from strata.store import SessionStore


@pytest.fixture
def cli_env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    return tmp_path / "home" / "data" / "sessions.sqlite3"


def run(capsys, *args):
    with pytest.raises(SystemExit) as info:
        run_app(app, list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


SOURCE = "".join(f"value_{i} = 'x{i}y'\n" for i in range(20))


def test_cli_edit_session_resumes_and_sessions_show_has_statuses(capsys, cli_env, tmp_path):
    f = tmp_path / "values.py"
    f.write_text(SOURCE)
    code, out, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace 'x1y' with 'one'", "--yes", "--json")
    assert code == 0, err
    sid = json.loads(out)["session"]
    # a second run, no file given: the session's file, the next round
    code, out, err = run(capsys, "edit", "--session", sid, "-m", "fake", "-i", "replace 'x2y' with 'two'",
                         "--yes", "--json")
    assert code == 0, err
    assert json.loads(out)["session"] == sid
    assert f.read_text() == SOURCE.replace("'x1y'", "'one'").replace("'x2y'", "'two'")
    # a round that is only shown, not written
    code, out, err = run(capsys, "edit", str(f), "--session", sid[:8], "-m", "fake", "-i", "tidy up", "--no-input")
    assert code == 0, err
    code, out, _ = run(capsys, "sessions", "show", sid, "--json")
    data = json.loads(out)
    assert [t["edit"] for t in data["turns"]] == ["accepted", "accepted", "rejected"]
    code, out, _ = run(capsys, "sessions", "show", sid)
    assert "edits: 2 accepted, 1 rejected" in out
    assert "(eos, accepted)" in out and "(eos, rejected)" in out


def test_cli_edit_session_refusals(capsys, cli_env, tmp_path):
    f = tmp_path / "a.py"
    f.write_text(SOURCE)
    other = tmp_path / "b.py"
    other.write_text(SOURCE)
    code, out, _ = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace = 3 with = 4", "--yes", "--json")
    sid = json.loads(out)["session"]
    cases = [
        (("edit", str(other), "--session", sid, "-m", "fake", "-i", "x", "--yes"), ExitCode.EDIT, "edits"),
        (("edit", "--session", sid, "--no-save", "-m", "fake", "-i", "x", "--yes"), ExitCode.USAGE, "--no-save"),
        (("edit", "-m", "fake", "-i", "x", "--yes"), ExitCode.USAGE, "--session"),
        (("edit", "--session", "", "-m", "fake", "-i", "x", "--yes"), ExitCode.SESSION, "empty"),
        (("edit", "--session", "nope", "-m", "fake", "-i", "x", "--yes"), ExitCode.SESSION, "no session"),
    ]
    run(capsys, "chat", "-m", "fake", "--message", "hi")
    chat_id = SessionStore(cli_env).list_sessions(kind="chat")[0].id
    cases.append((("edit", "--session", chat_id, "-m", "fake", "-i", "x", "--yes"), ExitCode.SESSION,
                  "not an edit session"))
    for args, want, words in cases:
        code, _, err = run(capsys, *args)
        assert code == want, (args, err)
        assert words in err and "Traceback" not in err
    assert other.read_text() == SOURCE


def test_a_resumed_edit_feeds_its_own_last_rewrite_to_the_drafter(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    f = tmp_path / "v.py"
    f.write_text(SOURCE)
    ed = EditSession(FakeGenerator(), f, store=store)
    list(ed.propose("replace = 5 with = 55"))
    ed.accept()
    gen = FakeGenerator()
    again = EditSession(gen, f, store=store, session_id=ed.session_id)
    assert again.prior_documents == 1 and gen._docs
    assert len(again.turns) == 1
    list(again.propose("replace = 6 with = 66"))
    again.accept()
    assert [t.index for t in store.turns(ed.session_id)] == [0, 1]
    assert stored_edit_file(store, ed.session_id) == f
    with pytest.raises(EditError, match="edits"):
        other = tmp_path / "w.py"
        other.write_text("x\n")
        EditSession(FakeGenerator(), other, store=store, session_id=ed.session_id)
    fresh = store.create_session("edit", {"name": "fake-moe", "id": FakeGenerator().model_id})
    with pytest.raises(SessionError, match="no edit recorded"):
        stored_edit_file(store, fresh)


def _accepted(chat):
    return sum(w.n_accept for w in chat.last_windows)


def test_saved_chats_feed_the_drafter_and_do_not_change_the_output(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    long = "please repeat this exact sentence about the quarterly figures and the budget " * 2
    first = ChatSession(FakeGenerator(), store=store)
    list(first.send(long))
    list(ChatSession(FakeGenerator(model_name="another"), store=store).send(long))  # other model: not fed

    gen = FakeGenerator()
    fed = ChatSession(gen, store=store)
    assert fed.prior_documents == 1 and len(gen._docs) == 1
    list(fed.send(long))
    plain = ChatSession(FakeGenerator())
    assert plain.prior_documents == 0
    list(plain.send(long))
    assert fed.turns[-1].output == plain.turns[-1].output          # drafting only
    assert _accepted(fed) > _accepted(plain)                       # and it helps
