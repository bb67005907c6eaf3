#!/usr/bin/env python3
"""Drive the real strata TUI with Textual's pilot and write pictures of it to screenshots/.

    python scripts/screenshots.py                  # the bundled default model
    python scripts/screenshots.py --model PATH     # another model folder or pack
    python scripts/screenshots.py --fake           # the deterministic fake engine (no model)
    python scripts/screenshots.py --stream 0.5     # convert to a pack first and stream experts
                                                   # through a cache of half of them

The pictures in screenshots/ come from `--stream 0.8` on the bundled strata-tiny (its experts
streamed from a pack through a cache of 80% of them, so the cache panel has something to show).

Writes chat.svg, edit_review.svg, panels.svg (and .png of each when cairosvg is installed:
`pip install cairosvg`). The app runs exactly as `strata chat` / `strata edit` run it; only the
keyboard is the pilot's. Run from the repository root, with the package importable (installed,
or PYTHONPATH=app and STRATA_DEV_BUILD for a development build).
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from demo_files import ARITH  # scripts/ is this script's own folder on sys.path

SIZE = (140, 44)
# strata-tiny answers short questions about code in its chat format (v2 was trained on
# code-assistant conversations): ask one it answers right, twice, so the second reply shows
# suffix drafting over the first
CHAT_MESSAGES = (
    'Explain this function:\n\n```python\ndef scale(values, factor):\n'
    '    """Multiply every value by factor."""\n    return [v * factor for v in values]\n```',
) * 2
EDIT_SOURCE = ARITH
# an edit strata-tiny gets right (add_import is its best kind on held-out files; see its model card)
EDIT_INSTRUCTION = "Add `import math`."


async def settle(app, pilot) -> None:
    for _ in range(8):
        await app.workers.wait_for_complete()
        await pilot.pause()
        if not any(w.is_running for w in app.workers):
            return


def finish(app) -> None:
    from textual.widgets import Input

    app.repaint_panels(force=True)
    for box in app.screen.query(Input):
        box.cursor_blink = False


def write(svg: str, out: Path, name: str) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    svg_path = out / f"{name}.svg"
    svg_path.write_text(svg, encoding="utf-8")
    written = [svg_path]
    try:
        import cairosvg
    except ImportError:
        return written
    png_path = out / f"{name}.png"
    # The SVG asks for Fira Code from the web; offline, cairo would fall back to a proportional
    # font and the cells would drift. Name a monospace font that is installed instead.
    local = svg.replace('"Fira Code"', '"DejaVu Sans Mono"').replace(
        "Fira Code, monospace", '"DejaVu Sans Mono", monospace')
    cairosvg.svg2png(bytestring=local.encode("utf-8"), write_to=str(png_path), output_width=1800)
    written.append(png_path)
    return written


async def shoot_chat(make_generator, out: Path) -> list[Path]:
    from textual.widgets import Input

    from strata.tui.app import StrataApp

    app = StrataApp(make_generator(), mode="chat", keymap={})
    files: list[Path] = []
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        for text in CHAT_MESSAGES:
            prompt = app.screen.query_one("#prompt", Input)
            prompt.value = text
            await pilot.press("enter")
            await settle(app, pilot)
        finish(app)
        await pilot.pause()
        files += write(app.export_screenshot(title="strata chat"), out, "chat")
        await pilot.press("f5")                      # panels get the whole width
        await pilot.pause()
        files += write(app.export_screenshot(title="strata panels"), out, "panels")
    return files


async def shoot_edit(make_generator, out: Path) -> list[Path]:
    from strata.tui.app import StrataApp

    with tempfile.TemporaryDirectory(prefix="strata-shot-") as tmp:
        target = Path(tmp) / "arith.py"
        target.write_text(EDIT_SOURCE, encoding="utf-8")
        app = StrataApp(make_generator(), mode="edit", edit_path=target,
                        instruction=EDIT_INSTRUCTION, keymap={})
        async with app.run_test(size=SIZE) as pilot:
            await settle(app, pilot)
            finish(app)
            # show the file by its name, not the temporary folder
            app.screen.query_one("#edit-title").update(
                f"[b]arith.py[/b]  \u00b7  instruction: [i]{EDIT_INSTRUCTION}[/i]")
            await pilot.pause()
            return write(app.export_screenshot(title="strata edit"), out, "edit_review")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model folder, pack or alias (default: bundled)")
    parser.add_argument("--fake", action="store_true", help="use the deterministic fake engine")
    parser.add_argument("--stream", metavar="CACHE", default=None,
                        help="convert the model to a temporary pack and stream its experts through "
                             "a cache of this size ('0.5' = half the experts, '64MiB', ...)")
    parser.add_argument("--out", type=Path, default=Path("screenshots"))
    args = parser.parse_args(argv)

    from strata.errors import StrataError

    if args.fake:
        from strata.testing.fake import FakeGenerator

        def make_generator():
            return FakeGenerator()
    else:
        from strata.runtime import open_generator

        try:
            if args.stream is not None:
                from strata import pack
                from strata.models import resolve_model

                source = resolve_model(args.model)
                packs = tempfile.mkdtemp(prefix="strata-shot-pack-")
                model = str(Path(packs) / source.name)  # the pack keeps the model's name
                pack.convert(str(source), model)
                generator = open_generator(model, expert_cache=args.stream)
            else:
                generator = open_generator(args.model)  # loaded once; each app resets it
        except StrataError as exc:
            print(f"screenshots: {exc}", file=sys.stderr)
            return 3

        def make_generator():
            return generator

    files = asyncio.run(shoot_chat(make_generator, args.out))
    files += asyncio.run(shoot_edit(make_generator, args.out))
    for f in files:
        print(f)
    if not any(f.suffix == ".png" for f in files):
        print("screenshots: cairosvg is not installed; wrote SVG only (pip install cairosvg)",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
