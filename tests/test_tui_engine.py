"""The TUI over the real decode loop (`strata.generate.Generator` on the engine's FakeLM):
the events of the C++ loop reach the transcript and the panels, undo restores a checkpoint.
Skipped where the engine is not built."""
from __future__ import annotations

import pytest

pytest.importorskip("strata._engine")

from textual.widgets import Input  # noqa: E402

from strata.tui.app import StrataApp  # noqa: E402
from strata.tui.widgets.transcript import Transcript  # noqa: E402

from fakelm_helpers import make_generator  # noqa: E402

from tui_helpers import asynctest, settle  # noqa: E402


@asynctest
async def test_chat_over_the_real_decode_loop():
    gen = make_generator()
    app = StrataApp(gen, keymap={})
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(app, pilot)
        for _ in range(2):
            app.screen.query_one("#prompt", Input).value = "hello world, hello world"
            await pilot.press("enter")
            await settle(app, pilot)
        chat = app.screen.chat
        msgs = app.screen.query_one(Transcript).messages()
        assert [t for r, t in msgs if r == "assistant"] == [t.output for t in chat.turns]
        assert len(chat.turns) == 2
        summary = app.telemetry.summary()
        # the second, repeated message is drafted from the first: the panels saw the drafts
        assert summary.tokens > 0 and summary.n_drafted > 0 and summary.n_accept > 0
        pos_after_first = chat.ring.find(turn=0, label="turn").pos
        await pilot.press("ctrl+z")
        await settle(app, pilot)
        assert len(chat.turns) == 1 and gen.pos == pos_after_first
