"""SVG snapshots of the main screens (stored under tests/snapshots/, normalised for
determinism), driven by the FrozenGenerator so that only a change of the TUI changes them.
STRATA_UPDATE_SNAPSHOTS=1 rewrites them after an intended change of looks."""
from __future__ import annotations

import pytest
from textual.widgets import Input

from strata.tui.app import StrataApp

from tui_helpers import FrozenGenerator, assert_snapshot, asynctest, freeze_cursors, settle

SIZE = (120, 36)


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    """Pictures must not depend on the caller's terminal settings."""
    for name in ("NO_COLOR", "TEXTUAL_THEME", "TEXTUAL_ANIMATIONS", "STRATA_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", "/nonexistent-strata-test-config")  # no [keys] file
SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(16))


async def chat_with_two_turns(app, pilot) -> None:
    await settle(app, pilot)
    for text in ("summarise the expert cache", "summarise the expert cache"):
        prompt = app.screen.query_one("#prompt", Input)
        prompt.value = text
        await pilot.press("enter")
        await settle(app, pilot)
    app.repaint_panels(force=True)
    freeze_cursors(app)
    await pilot.pause()
    # a picture of an error would pass as a snapshot too: check the state first
    assert len(app.screen.chat.turns) == 2
    assert "error" not in str(app.screen.query_one("#status").render())


@asynctest
async def test_snapshot_chat():
    app = StrataApp(FrozenGenerator())
    async with app.run_test(size=SIZE) as pilot:
        await chat_with_two_turns(app, pilot)
        assert_snapshot(app, "chat")


@asynctest
async def test_snapshot_panels_numeric_heatmap():
    app = StrataApp(FrozenGenerator())
    async with app.run_test(size=SIZE) as pilot:
        await chat_with_two_turns(app, pilot)
        await pilot.press("f3")
        await pilot.pause()
        assert app.screen.query_one("#heatmap").numeric
        assert_snapshot(app, "panels_numeric")


@asynctest
async def test_snapshot_edit_review(tmp_path):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    app = StrataApp(FrozenGenerator(), mode="edit", edit_path=target,
                    instruction="replace x + 1 with x * 100")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert app.screen.phase == "review" and app.screen.query_one("#diff").hunk_count == 2
        await pilot.press("j")
        app.repaint_panels(force=True)
        freeze_cursors(app)
        await pilot.pause()
        # the path is per-test; show it as a stable name
        app.screen.query_one("#edit-title").update("[b]calc.py[/b]  \u00b7  instruction: "
                                                   "[i]replace x + 1 with x * 100[/i]")
        await pilot.pause()
        assert_snapshot(app, "edit_review")


@asynctest
async def test_snapshot_help():
    app = StrataApp(FrozenGenerator())
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("f1")
        freeze_cursors(app)
        await pilot.pause()
        from strata.tui.screens.help import HelpScreen
        assert isinstance(app.screen, HelpScreen)
        assert_snapshot(app, "help")


@asynctest
async def test_snapshot_replay_report(tmp_path):
    from strata.chat import ChatSession
    from strata.replay import Replay
    from strata.session_format import recording_from_store
    from strata.store import SessionStore

    store = SessionStore(tmp_path / "s.db")
    chat = ChatSession(FrozenGenerator(), store=store)
    for text in ("list the experts", "list the experts again"):
        for _ in chat.send(text):
            pass
    recording = recording_from_store(store, chat.session_id)
    recording.source = "demo session"                   # the id is random; show a stable name
    replay = Replay(FrozenGenerator(), recording, {"draft": "none"})
    app = StrataApp(replay.generator, mode="replay", replay=replay)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.repaint_panels(force=True)
        await pilot.pause()
        assert replay.report.identical
        assert_snapshot(app, "replay")


def test_modes_need_their_inputs():
    from strata.errors import UsageError

    with pytest.raises(UsageError, match="edit_path"):
        StrataApp(FrozenGenerator(), mode="edit")
    with pytest.raises(UsageError, match="recording"):
        StrataApp(FrozenGenerator(), mode="replay")
    with pytest.raises(UsageError, match="mode"):
        StrataApp(FrozenGenerator(), mode="bogus")
