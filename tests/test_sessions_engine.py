"""The shell cores (chat, edit, replay, checkpoint ring, store) over the real decode loop:
`strata.generate.Generator` on the engine's deterministic FakeLM, with a byte tokenizer.
Skipped where the engine is not built."""
from __future__ import annotations

import pytest

pytest.importorskip("strata._engine")

from strata.chat import ChatSession  # noqa: E402
from strata.edit import EditSession  # noqa: E402
from strata.errors import SessionError  # noqa: E402
from strata.protocol import GenerationSettings  # noqa: E402
from strata.replay import Replay, load_recording  # noqa: E402
from strata.store import SessionStore  # noqa: E402

from fakelm_helpers import ByteTokenizer, make_generator  # noqa: E402

SETTINGS = GenerationSettings(max_new=40)


def _fresh_chat_after(inputs):
    chat = ChatSession(make_generator(), SETTINGS)
    for m in inputs:
        list(chat.send(m))
    return chat


def _text(events):
    return "".join(ev.text for ev in events)


def test_chat_undo_retry_and_resume_over_the_real_decoder(tmp_path):
    with SessionStore(tmp_path / "s.db") as store:
        gen = make_generator()
        chat = ChatSession(gen, SETTINGS, store=store)
        replies = [_text(chat.send(m)) for m in ("hello", "tell me more", "hello")]
        pos = gen.pos
        chat.undo()
        assert _text(chat.send("hello")) == replies[2] and gen.pos == pos
        # a resumed session restores the engine from the stored checkpoint
        gen2 = make_generator()
        resumed = ChatSession(gen2, store=store, session_id=chat.session_id)
        assert gen2.pos == pos and gen2.history == gen.history
        assert _text(resumed.send("once more")) == _text(_fresh_chat_after(["hello", "tell me more", "hello"]).send("once more"))
        # two live sessions on one record: the second writer is refused, not silently merged
        with pytest.raises(SessionError, match="already has a turn 3"):
            _text(chat.send("conflict"))
        with pytest.raises(SessionError, match="recorded with model"):
            ChatSession(make_generator(seed=4), store=store, session_id=chat.session_id)


def test_edit_rounds_start_from_the_file_checkpoint(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("".join(f"item {i}: keep\n" for i in range(20)))
    gen = make_generator()
    ed = EditSession(gen, f, SETTINGS)
    after_file = gen.pos
    first = _text(ed.propose("shorten"))
    assert ed.proposal.text == first
    again = _text(ed.propose("shorten"))
    assert again == first  # same checkpoint, same instruction, same (greedy) output
    assert gen.history[:after_file] == ByteTokenizer().encode(ed._prefix(f.read_text()))


def test_replay_of_a_real_recording_is_identical_with_drafting_on_and_off(tmp_path):
    with SessionStore(tmp_path / "s.db") as store:
        chat = ChatSession(make_generator(), SETTINGS, store=store)
        for m in ("abc abc abc", "abc abc"):
            list(chat.send(m))
        rec = load_recording(chat.session_id, store)
        for draft in ("none", "suffix"):
            report = Replay(make_generator(), rec, {"draft": draft}).run()
            assert report.identical, report.lines()


def test_edit_runs_with_the_copy_bias_and_records_it(tmp_path):
    from strata.edit import EDIT_COPY_BIAS

    f = tmp_path / "notes.txt"
    f.write_text("".join(f"item {i}: keep {i * 7 % 5}\n" for i in range(20)))
    with SessionStore(tmp_path / "s.db") as store:
        for given in (None, 0.0, 30.0):
            gen = make_generator()
            ran = []
            stream = gen.stream
            gen.stream = lambda ids, settings, *a: ran.append(settings.decode_kwargs()["copy_bias"]) or stream(ids, settings, *a)
            ed = EditSession(gen, f, SETTINGS.replace(copy_bias=given), store=store)
            _text(ed.propose("shorten"))
            want = EDIT_COPY_BIAS if given is None else given
            assert ran[-1] == want  # what the engine got
            # the turn records the bias it ran with, so a replay runs it the same way
            assert ed.turns[-1].settings["copy_bias"] == want
            for draft in ("none", "suffix"):
                report = Replay(make_generator(), load_recording(ed.session_id, store), {"draft": draft}).run()
                assert report.identical, report.lines()
