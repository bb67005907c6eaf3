"""Replay of a turn the user stopped (Esc) regenerates as many tokens as it had and compares that
prefix, so it is not a false mismatch and later turns see the same context; sessions record
the routing mode, so a replay says why an approximate recording differs."""
import pytest

from strata.chat import ChatSession
from strata.edit import EditSession
try:
    from strata.testing.fake import FakeGenerator
except ImportError:  # before the test doubles moved into strata.testing
    from strata.fake import FakeGenerator
from strata.replay import Replay
from strata.session_format import read_session_file, recording_from_store, write_session_file
from strata.store import SessionStore


def stop_after(n_windows):
    calls = {"n": 0}

    def should_stop():
        calls["n"] += 1
        return calls["n"] > n_windows

    return should_stop


@pytest.fixture
def store(tmp_path):
    s = SessionStore(tmp_path / "s.db")
    yield s
    s.close()


def _chat_with_a_stopped_turn(store, stop_at):
    chat = ChatSession(FakeGenerator(), store=store)
    list(chat.send("a long question about " + "many things " * 8))
    list(chat.send("tell me more " * 6, should_stop=stop_after(stop_at)))
    list(chat.send("and the last one"))
    assert chat.turns[1].stop_reason == "stopped" and chat.turns[1].output
    return chat.session_id


@pytest.mark.parametrize("stop_at", [1, 3, 7])
@pytest.mark.parametrize("draft", ["none", "suffix"])
def test_a_stopped_chat_turn_replays_identically(store, stop_at, draft):
    rec = recording_from_store(store, _chat_with_a_stopped_turn(store, stop_at))
    rep = Replay(FakeGenerator(), rec, {"draft": draft})
    report = rep.run()
    assert [t.identical for t in report.turns] == [True, True, True], report.lines()
    assert report.identical
    assert report.turns[1].output == rec.turns[1].output      # exactly its tokens, no more
    assert report.turns[2].output == rec.turns[2].output      # and the next turn saw the same context
    assert any("stopped when recorded" in line for line in report.lines())


def test_without_telemetry_the_prefix_is_compared(store, tmp_path):
    rec = recording_from_store(store, _chat_with_a_stopped_turn(store, 2))
    rec.windows = {}
    report = Replay(FakeGenerator(), rec).run()
    assert report.turns[1].identical and report.turns[1].output.startswith(rec.turns[1].output)


def test_a_stopped_turn_that_really_differs_is_still_reported(store):
    rec = recording_from_store(store, _chat_with_a_stopped_turn(store, 3))
    other = FakeGenerator(responder=lambda ctx, s: "something else entirely, at length<|im_end|>")
    other.model_id = FakeGenerator().model_id
    report = Replay(other, rec).run()
    assert not report.turns[1].identical and not report.identical
    assert report.turns[1].first_difference == 0


@pytest.mark.parametrize("stop_at", [1, 4])
def test_a_stopped_edit_round_replays_identically(store, tmp_path, stop_at):
    f = tmp_path / "calc.py"
    f.write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(30)))
    ed = EditSession(FakeGenerator(), f, store=store)
    list(ed.propose("replace x + 1 with x * 100", should_stop=stop_after(stop_at)))
    assert ed.proposal.stop_reason == "stopped"
    ed.reject()
    list(ed.propose("replace x + 2 with x - 2"))
    ed.accept()
    path = tmp_path / "edit.jsonl"
    write_session_file(recording_from_store(store, ed.session_id), path)
    report = Replay(FakeGenerator(), read_session_file(path), {"draft": "suffix"}).run()
    assert [t.identical for t in report.turns] == [True, True], report.lines()
    assert report.turns[0].output == read_session_file(path).turns[0].output


def test_sessions_record_routing_and_replays_say_why_they_differ(store):
    gen = FakeGenerator()
    gen.routing = {"cache_aware": True, "protect": 2, "bonus": 1.5}
    gen.approximate = True
    chat = ChatSession(gen, store=store)
    list(chat.send("hello"))
    rec = recording_from_store(store, chat.session_id)
    assert rec.model["routing"] == gen.routing and rec.model["approximate"] is True
    report = Replay(FakeGenerator(), rec).run()
    assert report.recorded_approximate and not report.replay_approximate
    assert any("recorded with approximate cache-aware routing" in r and "protect=2" in r
               for r in report.reasons())
    assert any("approximate" in line for line in report.lines())
    assert report.to_dict()["recorded_approximate"] is True
    # exact recording, exact replay: nothing to explain
    plain = ChatSession(FakeGenerator(), store=store)
    list(plain.send("hello"))
    assert Replay(FakeGenerator(), recording_from_store(store, plain.session_id)).run().reasons() == []
