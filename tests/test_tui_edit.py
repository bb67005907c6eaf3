"""Pilot tests of the edit screen: live diff, review keys (a accept, r reject, e edit again,
u undo, j/k hunks), refusals shown on screen; the file changes only on accept."""
from __future__ import annotations

from textual.widgets import Input

from strata.testing.fake import FakeGenerator
from strata.store import SessionStore
from strata.tui.app import StrataApp
from strata.tui.widgets.diff_view import DiffView

import asyncio

from tui_helpers import CountingGenerator, GatedGenerator, asynctest, frozen_reply, settle

SIZE = (130, 40)


def fake(**kwargs) -> FakeGenerator:
    """The shared fake engine, with the tests' own text (tui_helpers.frozen_reply)."""
    return FakeGenerator(responder=frozen_reply, **kwargs)
SOURCE = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(24))


def status(app) -> str:
    return str(app.screen.query_one("#status").render())


@asynctest
async def test_accept_writes_the_file_and_undo_restores_it(tmp_path):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    store = SessionStore(tmp_path / "s.db")
    app = StrataApp(fake(), mode="edit", edit_path=target, store=store,
                    instruction="replace x + 1 with x * 100")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert screen.phase == "review"
        diff = screen.query_one(DiffView)
        # "x + 1" also matches "x + 10".."x + 19": several hunks to walk through
        assert diff.hunk_count >= 2 and diff.current_hunk == 0
        await pilot.press("j")
        assert diff.current_hunk == 1
        await pilot.press("k", "k")
        assert diff.current_hunk == 0
        assert target.read_text() == SOURCE             # nothing written before accept
        await pilot.press("a")
        await settle(app, pilot)
        assert target.read_text() == SOURCE.replace("x + 1", "x * 100")
        assert screen.phase == "idle" and "wrote" in status(app)
        await pilot.press("u")
        await settle(app, pilot)
        assert target.read_text() == SOURCE
        assert "restored" in status(app)
    statuses = [e.status for e in store.edits(app.session_id)]
    assert statuses == ["undone"]


@asynctest
async def test_reject_then_edit_again_with_a_new_instruction(tmp_path):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    gen = CountingGenerator(fake())
    app = StrataApp(gen, mode="edit", edit_path=target)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert screen.phase == "asking"                 # no instruction given: it asks
        box = screen.query_one("#instruction", Input)
        assert box.display and box.has_focus
        box.value = "add a header"
        await pilot.press("enter")
        await settle(app, pilot)
        assert screen.phase == "review"
        assert gen.prefills == 1                         # the file was read once
        await pilot.press("r")
        assert screen.phase == "idle" and target.read_text() == SOURCE
        await pilot.press("e")
        assert screen.phase == "asking" and box.has_focus
        box.value = "replace return with yield"
        await pilot.press("enter")
        await settle(app, pilot)
        # the new round started from the checkpoint after the file: no re-prefill
        assert gen.prefills == 1
        assert screen.session.proposal.text == SOURCE.replace("return", "yield")
        await pilot.press("a")
        await settle(app, pilot)
        assert target.read_text() == SOURCE.replace("return", "yield")
        assert screen.accepted == 1


@asynctest
async def test_undo_is_refused_when_the_file_changed_on_disk(tmp_path):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    app = StrataApp(fake(), mode="edit", edit_path=target,
                    instruction="replace x + 2 with x - 2")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("a")
        await settle(app, pilot)
        edited = target.read_text()
        target.write_text(edited + "# someone else\n")
        await pilot.press("u")
        await settle(app, pilot)
        assert "changed on disk" in status(app)
        assert target.read_text() == edited + "# someone else\n"


@asynctest
async def test_review_keys_do_nothing_outside_review_and_binary_files_are_refused(tmp_path):
    target = tmp_path / "blob.bin"
    target.write_bytes(b"\x00\x01binary")
    app = StrataApp(fake(), mode="edit", edit_path=target, instruction="anything")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert app.screen.phase == "failed"
        assert "binary" in status(app)
        await pilot.press("a", "u", "j")                # nothing to accept/undo: no crash
        await settle(app, pilot)
        assert target.read_bytes() == b"\x00\x01binary"
        await pilot.press("q")
        await settle(app, pilot)
    assert app.return_value == 0


@asynctest
async def test_live_diff_while_the_rewrite_streams(tmp_path):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    gen = GatedGenerator(fake(), after=30)
    app = StrataApp(gen, mode="edit", edit_path=target, instruction="replace x + 1 with x * 100")
    async with app.run_test(size=SIZE) as pilot:
        assert await asyncio.get_running_loop().run_in_executor(None, gen.reached.wait, 30)
        await pilot.pause()
        screen = app.screen
        diff = screen.query_one(DiffView)
        diff.flush()                                    # what the 10 Hz repaint would show
        shown = str(diff.query_one("#diff-text").render())
        assert screen.phase == "streaming" and diff.streaming
        assert "not reached yet" in shown and "\u2588" in shown   # pending tail and the cursor
        await pilot.press("a")                          # review keys are off while streaming
        assert target.read_text() == SOURCE
        gen.gate.set()
        await settle(app, pilot)
        assert screen.phase == "review" and not diff.streaming
        assert "not reached yet" not in str(diff.query_one("#diff-text").render())


@asynctest
async def test_review_warns_about_a_broken_rewrite_and_asks_twice(tmp_path):
    target = tmp_path / "calc.py"
    target.write_text(SOURCE)
    app = StrataApp(fake(), mode="edit", edit_path=target, instruction="replace (x) with (x")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert screen.phase == "review"
        assert "not valid Python" in status(app)          # the same check as headless --yes
        assert any("not valid Python" in n for n in app.notes)
        await pilot.press("a")                            # first a: a warning, nothing written
        await settle(app, pilot)
        assert target.read_text() == SOURCE and "press a again" in status(app)
        await pilot.press("a")                            # second a: written as reviewed
        await settle(app, pilot)
        assert target.read_text() == SOURCE.replace("(x)", "(x")


@asynctest
async def test_review_notes_a_name_the_instruction_deletes_and_the_file_still_uses(tmp_path):
    """Not a warning (the rewrite does what was asked): shown, and one a writes it."""
    target = tmp_path / "where.py"
    src = "import os\n\n\ndef cwd():\n    return os.getcwd()\n"
    target.write_text(src)
    app = StrataApp(fake(), mode="edit", edit_path=target, instruction="replace import os with # drop os")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert app.screen.phase == "review"
        assert "note: the rewrite still uses os (line 5), which the instruction deletes" in status(app)
        assert any("still uses os (line 5)" in n for n in app.notes)
        await pilot.press("a")
        await settle(app, pilot)
        assert target.read_text() == src.replace("import os", "# drop os")


@asynctest
async def test_symlink_and_read_only_notes_on_screen(tmp_path):
    real = tmp_path / "real.py"
    real.write_text(SOURCE)
    real.chmod(0o444)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    app = StrataApp(fake(), mode="edit", edit_path=link, instruction="replace x + 1 with x * 2")
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert any("symlink" in n for n in app.notes) and any("read-only" in n for n in app.notes)
        await pilot.press("a")
        await settle(app, pilot)
        assert "read-only" in status(app) and real.read_text() == SOURCE and link.is_symlink()
