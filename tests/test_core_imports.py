"""The core never imports textual or rich: the TUI and CLI are fronts over it."""
import os
import subprocess
import sys
from pathlib import Path

APP = str(Path(__file__).resolve().parents[1] / "app")

CORE = ["strata", "strata.paths", "strata.store", "strata.session_format", "strata.edit",
        "strata.chat", "strata.replay", "strata.testing.fake", "strata.runtime", "strata.protocol",
        "strata.prompts", "strata.errors", "strata.settings", "strata.telemetry"]


def test_core_modules_do_not_import_textual_or_rich():
    code = (
        "import sys\n"
        f"for name in {CORE!r}:\n"
        "    __import__(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
        "print(','.join(bad))\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"core imported: {out.stdout.strip()}"


def test_headless_edit_path_does_not_import_textual(tmp_path):
    # `strata edit --yes` runs without the TUI, so it must not pay for (or depend on) textual
    target = tmp_path / "f.txt"
    target.write_text("one\ntwo\n")
    code = (
        "import sys\n"
        "from strata.cli.runner import run_app\n"
        "from strata.cli import app\n"
        "try:\n"
        f"    run_app(app, ['edit', {str(target)!r}, '-m', 'fake', '-i', 'replace two with 2', '--yes', '--no-save'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "print('textual' in sys.modules)\n"
    )
    env = dict(os.environ, STRATA_ALLOW_FAKE="1", STRATA_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert target.read_text() == "one\n2\n"
