"""`--help` of every command, rendered at 80 columns as a newcomer's terminal would: no line past
80 columns, no cut option name, help text for every option and argument, and metavars that say
what to type instead of raw type names."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from strata.cli import app

APP = str(Path(__file__).resolve().parents[1] / "app")
RAW_TYPES = re.compile(r"<(str|int|float|bool|path)>|\b(TEXT|INTEGER|FLOAT|BOOLEAN|PATH)\b")


def _commands() -> list[tuple[str, ...]]:
    group = typer.main.get_command(app)
    out: list[tuple[str, ...]] = [()]

    def walk(cmd, path):
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            out.append((*path, name))
            walk(sub, (*path, name))

    walk(group, ())
    return out


def _click_command(path: tuple[str, ...]):
    cmd = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return cmd


COMMANDS = _commands()


def test_every_command_is_listed():
    names = {" ".join(p) for p in COMMANDS}
    for want in ("run", "chat", "edit", "replay", "bench", "info", "convert", "paths", "version",
                 "sessions list", "sessions show", "sessions export", "sessions import", "sessions delete"):
        assert want in names


def _help(path: tuple[str, ...]) -> str:
    env = dict(os.environ, COLUMNS="80", NO_COLOR="1", TERM="dumb")
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-m", "strata", *path, "--help"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "strata")
def test_help_reads_well_at_80_columns(path):
    text = _help(path)
    long = [line for line in text.splitlines() if len(line) > 80]
    assert not long, long
    # "..." only as click's mark of a repeatable argument ("[ARGS]...", "[SESSION.jsonl]..."),
    # never as a cut help text
    assert "\u2026" not in text and "..." not in re.sub(r"\]\.\.\.", "]", text), text
    raw = RAW_TYPES.findall(text)
    assert not raw, (raw, text)
    cmd = _click_command(path)
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        for opt in (*param.opts, *getattr(param, "secondary_opts", [])):
            if opt.startswith("-"):
                assert re.search(rf"(^|[\s,/]){re.escape(opt)}([\s,=/]|$)", text, re.M), (opt, text)
        if param.param_type_name == "option":
            assert (param.help or "").strip(), f"{' '.join(path)} {param.opts[0]} has no help text"
        else:
            assert (getattr(param, "help", None) or "").strip(), f"{' '.join(path)} {param.name} has no help"


def test_a_group_without_its_command_shows_its_help(capsys):
    # `strata sessions` crammed the whole help into one "strata: error: Usage: ... Commands: list
    # List recorded ..." line; now the help as --help lays it out, on stderr, exit 2
    import io

    from strata.cli.runner import run_app

    sys.stdin = io.StringIO("")
    with pytest.raises(SystemExit) as info:
        run_app(app, ["sessions"])
    out, err = capsys.readouterr()
    assert info.value.code == 2 and out == ""
    assert err.startswith("Usage: strata sessions") and "strata: error" not in err
    assert any(line.strip().startswith("list") for line in err.splitlines())
