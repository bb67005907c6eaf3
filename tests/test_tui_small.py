"""The TUI on an 80x24 terminal: every control the user needs is on screen and wide enough,
panels come back with F4/F5, the focus returns to the input after the panels zoom, NO_COLOR
does not crash the edit screen, and file names or messages with "[...]" are shown as text."""
from __future__ import annotations

import pytest
from textual.widgets import Footer, Input

from strata.chat import ChatSession
from strata.testing.fake import FakeGenerator
from strata.replay import Replay
from strata.session_format import recording_from_store
from strata.store import SessionStore
from strata.tui.app import StrataApp
from strata.tui.screens.base import PanelsColumn
from strata.tui.widgets.diff_view import DiffView

from tui_helpers import asynctest, frozen_reply, settle

SMALL = (80, 24)
SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(24))


def fake(**kwargs) -> FakeGenerator:
    return FakeGenerator(responder=frozen_reply, **kwargs)


def visible(widget, size=SMALL) -> bool:
    r = widget.region
    return r.width > 0 and r.height > 0 and r.x >= 0 and r.y >= 0 and r.right <= size[0] and r.bottom <= size[1]


def _settings_fit(screen, width=SMALL[0], size=SMALL):
    for w in screen.query("SettingsStrip Input, SettingsStrip Switch"):
        assert visible(w, size), (w.id, w.region)
        assert w.region.right <= width


@asynctest
async def test_chat_at_80x24():
    app = StrataApp(fake())
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        screen = app.screen
        prompt = screen.query_one("#prompt", Input)
        assert visible(prompt) and prompt.region.width >= 70 and prompt.has_focus
        assert visible(screen.query_one("#transcript")) and screen.query_one("#transcript").region.height >= 10
        assert visible(screen.query_one("#status")) and visible(screen.query_one(Footer))
        _settings_fit(screen)
        panels = screen.query_one(PanelsColumn)
        assert not panels.display                            # the text gets the width
        prompt.value = "hello there"
        await pilot.press("enter")
        await settle(app, pilot)
        assert "You said: hello there" in str(screen.query_one("#transcript").query("MessageBlock").last().text)
        await pilot.press("f4")                              # panels on demand
        await pilot.pause()
        assert panels.display and visible(panels)
        assert prompt.has_focus


@pytest.mark.parametrize("size", [SMALL, (130, 40)])
@asynctest
async def test_focus_returns_to_the_prompt_after_zoom(size):
    app = StrataApp(fake())
    async with app.run_test(size=size) as pilot:
        await settle(app, pilot)
        prompt = app.screen.query_one("#prompt", Input)
        assert prompt.has_focus
        await pilot.press("f5")
        await pilot.pause()
        panels = app.screen.query_one(PanelsColumn)
        assert panels.display and panels.has_class("-zoomed") and not app.screen.query_one("#left").display
        await pilot.press("f5")
        await pilot.pause()
        assert app.screen.query_one("#left").display and prompt.has_focus
        assert panels.display == (size != SMALL)             # back to the layout's choice
        await pilot.press("a", "b")                          # typing goes to the prompt again
        assert prompt.value == "ab"


@asynctest
async def test_edit_at_80x24_with_focus_after_zoom(tmp_path):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    app = StrataApp(fake(), mode="edit", edit_path=target)
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        screen = app.screen
        box = screen.query_one("#instruction", Input)
        assert screen.phase == "asking" and box.has_focus and visible(box) and box.region.width >= 70
        await pilot.press("f5", "f5")
        await pilot.pause()
        assert box.has_focus
        box.value = "replace x + 1 with x * 2"
        await pilot.press("enter")
        await settle(app, pilot)
        diff = screen.query_one(DiffView)
        assert screen.phase == "review" and visible(diff) and diff.region.width >= 70
        _settings_fit(screen)
        await pilot.press("f5", "f5")
        await pilot.pause()
        assert diff.has_focus                                 # review keys work again
        await pilot.press("a")
        await settle(app, pilot)
        assert target.read_text() == SOURCE.replace("x + 1", "x * 2")


@pytest.mark.parametrize("mode", ["chat", "edit"])
@asynctest
async def test_the_settings_strip_fits_beside_the_panels_at_120_columns(tmp_path, mode):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    app = StrataApp(fake(), mode=mode, edit_path=target if mode == "edit" else None)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(app, pilot)
        left = app.screen.query_one("#left")
        assert left.region.right < 120  # the panels are shown beside it
        _settings_fit(app.screen, width=left.region.right, size=(120, 36))


@asynctest
async def test_replay_at_80x24(tmp_path):
    store = SessionStore(tmp_path / "s.db")
    chat = ChatSession(fake(), store=store)
    list(chat.send("one"))
    list(chat.send("two"))
    replay = Replay(fake(), recording_from_store(store, chat.session_id))
    app = StrataApp(replay.generator, mode="replay", replay=replay)
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        assert replay.report.identical
        report = app.screen.query_one("#report")
        assert visible(report) and visible(app.screen.query_one("#transcript"))


@asynctest
async def test_no_color_edit_screen_runs_through_review_and_accept(tmp_path, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    app = StrataApp(fake(), mode="edit", edit_path=target, instruction="replace x + 1 with x * 2")
    async with app.run_test(size=(130, 40)) as pilot:
        await settle(app, pilot)
        assert app.screen.phase == "review"
        await pilot.press("f3")                              # numeric heatmap: the line that crashed
        await pilot.pause()
        app.save_screenshot(str(tmp_path / "shot.svg"))      # renders every line through the filter
        await pilot.press("a")
        await settle(app, pilot)
        assert target.read_text() == SOURCE.replace("x + 1", "x * 2")


@asynctest
async def test_markup_in_names_and_messages_is_shown_as_text(tmp_path):
    target = tmp_path / "[red]weird[bold] [link=x].py"
    target.write_text(SOURCE)
    app = StrataApp(fake(), mode="edit", edit_path=target, instruction="replace [/i] with [red]")
    async with app.run_test(size=SMALL) as pilot:
        await settle(app, pilot)
        title = str(app.screen.query_one("#edit-title").render())
        assert "[red]weird[bold] [link=x].py" in title and "[/i]" in title
        assert app.screen.phase == "review"
    chat_app = StrataApp(fake())
    async with chat_app.run_test(size=SMALL) as pilot:
        await settle(chat_app, pilot)
        box = chat_app.screen.query_one("#prompt", Input)
        box.value = "[/b] [bold red]not markup[/]"
        await pilot.press("enter")
        await settle(chat_app, pilot)
        text = str(chat_app.screen.query_one("#transcript").query("MessageBlock").last().text)
        assert "[bold red]not markup[/]" in text
