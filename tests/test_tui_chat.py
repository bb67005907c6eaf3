"""Pilot tests of the chat screen against the FakeGenerator: streaming, live settings, undo and
retry from checkpoints, stop, session save and restore through the store."""
from __future__ import annotations

import asyncio
import io
import logging
import sys

from textual.widgets import Input, Switch

from strata.testing.fake import FakeGenerator
from strata.protocol import GenerationSettings
from strata.store import SessionStore
from strata.tui.app import StrataApp
from strata.tui.widgets.transcript import Transcript

from tui_helpers import GatedGenerator, asynctest, frozen_reply, settle

SIZE = (130, 40)


def fake(**kwargs) -> FakeGenerator:
    """The shared fake engine, with the tests' own text (tui_helpers.frozen_reply)."""
    return FakeGenerator(responder=frozen_reply, **kwargs)


async def say(app, pilot, text: str) -> None:
    prompt = app.screen.query_one("#prompt", Input)
    prompt.focus()
    prompt.value = text
    await pilot.press("enter")
    await settle(app, pilot)


def transcript(app) -> list[tuple[str, str]]:
    return app.screen.query_one(Transcript).messages()


@asynctest
async def test_chat_streams_replies_and_feeds_the_panels():
    gen = fake()
    app = StrataApp(gen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await say(app, pilot, "hello there")
        await say(app, pilot, "hello there")
        msgs = transcript(app)
        assert [r for r, _ in msgs] == ["user", "assistant", "user", "assistant"]
        assert msgs[1][1] == "You said: hello there\nThat was message 1."
        assert [msgs[1][1], msgs[3][1]] == [t.output for t in app.screen.chat.turns]
        log = app.telemetry
        # every window of both turns reached the panels' model, none twice
        assert sum(w.emitted for w in log.windows) == len(gen.encode(msgs[1][1])) + 1 + \
            len(gen.encode(msgs[3][1])) + 1
        assert log.summary().n_accept > 0          # the repeated message was drafted
        app.repaint_panels(force=True)
        await pilot.pause()
        text = str(app.screen.query_one("#acceptance").render())
        assert "acceptance" in text
        assert "eos" in str(app.screen.query_one("#status").render())


@asynctest
async def test_settings_strip_changes_apply_to_the_next_message():
    app = StrataApp(fake(), settings=GenerationSettings(max_draft=3))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        strip = app.screen.query_one("#settings")
        strip.query_one("#drafting", Switch).value = False
        strip.query_one("#temperature", Input).value = "0.8"
        strip.query_one("#seed", Input).value = "7"
        await pilot.pause()
        assert (app.settings.draft, app.settings.temperature, app.settings.seed) == ("none", 0.8, 7)
        await say(app, pilot, "same words same words same words")
        windows = list(app.telemetry.windows)
        assert windows and all(w.n_drafted == 0 and w.T == 1 for w in windows)
        recorded = app.screen.chat.turns[0].settings   # the turn ran with the strip's settings
        assert (recorded["draft"], recorded["temperature"], recorded["seed"]) == ("none", 0.8, 7)
        # an invalid field is refused and names itself; the settings stay as they were
        strip.query_one("#max-draft", Input).value = "99"
        await pilot.pause()
        assert "max draft" in strip.error and app.settings.max_draft == 3
        assert strip.query_one("#max-draft", Input).has_class("-invalid")


@asynctest
async def test_undo_and_retry_roll_back_to_checkpoints():
    gen = fake()
    app = StrataApp(gen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await say(app, pilot, "first")
        pos_after_first = gen.pos
        await say(app, pilot, "second")
        assert gen.pos > pos_after_first
        await pilot.press("ctrl+z")
        await settle(app, pilot)
        assert [t for _, t in transcript(app)][0] == "first" and len(transcript(app)) == 2
        assert gen.pos == pos_after_first          # engine state restored from the ring
        assert "undid turn 2" in str(app.screen.query_one("#status").render())
        await pilot.press("ctrl+r")
        await settle(app, pilot)
        msgs = transcript(app)
        assert len(msgs) == 2 and msgs[1][1] == "You said: first\nThat was message 1."
        assert gen.pos == pos_after_first          # the retried turn replaced the first
        await pilot.press("ctrl+z")
        await settle(app, pilot)
        await pilot.press("ctrl+z")                # nothing left: a clear message, no crash
        await settle(app, pilot)
        assert transcript(app) == [] and gen.pos == 0
        assert "nothing to undo" in str(app.screen.query_one("#status").render())


@asynctest
async def test_escape_stops_a_generation_after_its_current_window():
    long_reply = "word " * 400 + "<|im_end|>"
    gen = GatedGenerator(FakeGenerator(responder=lambda ctx, s: long_reply), after=3)
    app = StrataApp(gen)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        prompt = app.screen.query_one("#prompt", Input)
        prompt.value = "go"
        await pilot.press("enter")
        assert await asyncio.get_running_loop().run_in_executor(None, gen.reached.wait, 30)
        assert app.screen.busy
        await pilot.press("escape")
        gen.gate.set()
        await settle(app, pilot)
        chat = app.screen.chat
        assert chat.turns[-1].stop_reason == "stopped"
        assert 0 < len(transcript(app)[1][1]) < len(long_reply) - len("<|im_end|>")
        assert transcript(app)[1][1] == chat.turns[-1].output
        assert len(app.telemetry.windows) == 3


@asynctest
async def test_session_save_and_restore_through_the_store(tmp_path):
    store = SessionStore(tmp_path / "sessions.db")
    gen = fake()
    app = StrataApp(gen, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await say(app, pilot, "remember amber")
        await say(app, pilot, "and basalt")
        app.screen.query_one("#temperature", Input).value = "0.5"
        await pilot.pause()
        await pilot.press("ctrl+s")
        await settle(app, pilot)
        session_id = app.session_id
        saved_pos = gen.pos
        assert any("saved" in note for note in app.notes)
    assert session_id and [t.input for t in store.turns(session_id)] == ["remember amber", "and basalt"]

    gen2 = fake()
    app2 = StrataApp(gen2, store=store, session_id=session_id)
    async with app2.run_test(size=SIZE) as pilot:
        await settle(app2, pilot)
        msgs = transcript(app2)
        assert [t for r, t in msgs if r == "user"] == ["remember amber", "and basalt"]
        assert gen2.pos == saved_pos               # engine state restored, not empty
        assert app2.settings.temperature == 0.5    # the saved settings, shown in the strip
        assert app2.screen.query_one("#temperature", Input).value == "0.5"
        await say(app2, pilot, "third")
        assert transcript(app2)[-1][1] == "You said: third\nThat was message 3."
        await pilot.press("ctrl+z")
        await settle(app2, pilot)
        assert gen2.pos == saved_pos               # checkpoint rollback after a resume
    assert len(store.turns(session_id)) == 2


@asynctest
async def test_undo_of_a_resumed_turn_asks_before_deleting_it(tmp_path):
    store = SessionStore(tmp_path / "sessions.db")
    app = StrataApp(fake(), store=store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await say(app, pilot, "kept")
        session_id = app.session_id
    app2 = StrataApp(fake(), store=store, session_id=session_id)
    async with app2.run_test(size=SIZE) as pilot:
        await settle(app2, pilot)
        await pilot.press("ctrl+z")                # first press: a warning, nothing deleted
        await settle(app2, pilot)
        assert len(store.turns(session_id)) == 1 and len(transcript(app2)) == 2
        assert any("press the key again" in note for note in app2.notes)
        await pilot.press("ctrl+z")                # second press: deleted, and the status says so
        await settle(app2, pilot)
        assert store.turns(session_id) == [] and transcript(app2) == []
        assert "deleted from session" in str(app2.screen.query_one("#status").render())


@asynctest
async def test_a_session_of_another_model_is_refused_on_screen(tmp_path):
    store = SessionStore(tmp_path / "sessions.db")
    app = StrataApp(fake(), store=store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await say(app, pilot, "hi")
        session_id = app.session_id
    other = fake(model_name="other-moe")
    app2 = StrataApp(other, store=store, session_id=session_id)
    async with app2.run_test(size=SIZE) as pilot:
        await settle(app2, pilot)
        status = str(app2.screen.query_one("#status").render())
        assert "error" in status and "other-moe" in status
        assert app2.screen.chat is None


@asynctest
async def test_help_lists_every_binding_and_keys_are_remappable():
    app = StrataApp(fake(), keymap={"chat.undo": "f6"})
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("f1")
        await pilot.pause()
        table = app.screen.table
        from rich.console import Console
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(table)
        text = console.export_text()
        for k in ("chat.undo", "review.accept", "replay.restart", "app.heatmap-numbers"):
            assert k in text
        assert "f6" in text
        await pilot.press("escape")
        await say(app, pilot, "one")
        await pilot.press("f6")                    # remapped undo
        await settle(app, pilot)
        assert transcript(app) == []


@asynctest
async def test_logging_goes_to_the_app_not_to_the_terminal(capfd):
    def responder(context, settings):
        logging.getLogger("strata.engine").warning("expert pack read slowly")
        return "ok<|im_end|>"

    terminal = logging.StreamHandler(sys.stderr)
    logging.getLogger().addHandler(terminal)
    try:
        app = StrataApp(FakeGenerator(responder=responder))
        async with app.run_test(size=SIZE) as pilot:
            await settle(app, pilot)
            await say(app, pilot, "hi")
            assert any("expert pack read slowly" in n for n in app.notes)
            await pilot.press("f2")                # the log screen keeps what was said
            await pilot.pause()
            assert "expert pack read slowly" in app.screen.lines.plain
            await pilot.press("escape")
        logging.getLogger("strata.engine").warning("after the app")
    finally:
        logging.getLogger().removeHandler(terminal)
    err = capfd.readouterr().err
    assert "expert pack read slowly" not in err
    assert "after the app" in err                  # the terminal handler is back afterwards
