import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from strata.cli import ExitCode, app
from strata.cli.runner import run_app

APP = str(Path(__file__).resolve().parents[1] / "app")
DEMO = Path(__file__).resolve().parents[1] / "sessions" / "demo"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")  # setenv, so that --debug in a test cannot leak
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


def run(capsys, *args, stdin=None, monkeypatch=None):
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    with pytest.raises(SystemExit) as info:
        run_app(app, list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_version_and_paths(capsys, tmp_path):
    code, out, _ = run(capsys, "version")
    assert code == 0 and out.startswith("strata ")
    code, out2, _ = run(capsys, "--version")  # as other command-line tools take it; no chat opens
    assert code == 0 and out2 == out
    code, out, _ = run(capsys, "paths", "--json")
    data = json.loads(out)
    assert code == 0 and data["source"] == "STRATA_HOME"
    assert data["sessions"] == str(tmp_path / "home" / "data" / "sessions.sqlite3")


def test_chat_headless_records_a_session_and_sessions_commands(capsys, tmp_path):
    code, out, err = run(capsys, "chat", "-m", "fake", "--message", "hello", "--message", "again")
    assert code == 0, err
    assert "You said: hello" in out and "You said: again" in out
    code, out, _ = run(capsys, "sessions", "list", "--json")
    sessions = json.loads(out)
    assert len(sessions) == 1 and sessions[0]["turns"] == 2 and sessions[0]["kind"] == "chat"
    sid = sessions[0]["id"]
    code, out, _ = run(capsys, "sessions", "show", sid[:5])
    assert code == 0 and "> again" in out
    export = tmp_path / "out.jsonl"
    code, _, err = run(capsys, "sessions", "export", sid, "-o", str(export))
    assert code == 0 and export.exists()
    code, _, err = run(capsys, "sessions", "export", sid, "-o", str(export))
    assert code == ExitCode.USAGE and "already exists" in err
    code, out, _ = run(capsys, "sessions", "import", str(export), "--json")
    assert code == 0 and json.loads(out)["turns"] == 2
    code, out, _ = run(capsys, "sessions", "export", sid)
    assert json.loads(out.splitlines()[0])["format"] == "strata-session"
    # resume the recorded chat
    code, out, _ = run(capsys, "chat", "-m", "fake", "--session", sid, "--message", "third", "--json")
    assert code == 0 and json.loads(out)["turns"][0]["output"].startswith("You said: third")
    code, out, _ = run(capsys, "sessions", "show", sid, "--json")
    assert len(json.loads(out)["turns"]) == 3
    code, _, err = run(capsys, "sessions", "delete", sid)
    assert code == ExitCode.USAGE and "--yes" in err
    code, _, _ = run(capsys, "sessions", "delete", sid, "--yes")
    assert code == 0
    code, _, err = run(capsys, "sessions", "show", sid)
    assert code == ExitCode.SESSION and err.count("\n") == 1


def test_sessions_export_to_a_folder_or_a_missing_folder_names_the_path(capsys, tmp_path):
    # a folder: one usage line that does not suggest --force (which cannot replace a folder);
    # a missing folder: exit 6 naming the file asked for (it named the temp file beside it)
    code, _, err = run(capsys, "chat", "-m", "fake", "--message", "hi")
    sid = json.loads(run(capsys, "sessions", "list", "--json")[1])[0]["id"]
    folder = tmp_path / "afolder"
    (folder / "sub").mkdir(parents=True)
    for extra in ([], ["--force"]):
        code, _, err = run(capsys, "sessions", "export", sid, "-o", str(folder), *extra)
        assert code == ExitCode.USAGE and err == f"strata: error: {folder}: is a folder; give the name of a file to write\n"
    assert (folder / "sub").is_dir()
    target = tmp_path / "nowhere" / "s.jsonl"
    code, _, err = run(capsys, "sessions", "export", sid, "-o", str(target))
    assert code == ExitCode.IO and err.startswith(f"strata: error: {target}: ") and err.count("\n") == 1
    assert ".tmp" not in err


def test_chat_headless_says_when_a_reply_was_cut_at_max_new(capsys):
    code, out, err = run(capsys, "chat", "-m", "fake", "--no-save", "--message", "hello there", "--max-new", "3")
    assert code == 0 and out.strip()
    assert "strata: note: the reply stopped at --max-new 3 tokens, not at its end\n" in err
    code, out, err = run(capsys, "chat", "-m", "fake", "--no-save", "--message", "hello there")
    assert code == 0 and "max-new" not in err  # ended by itself


def test_chat_system_prompt_that_is_not_utf8_is_one_usage_line(capsys):
    # Python keeps undecodable argv bytes as lone surrogates; --system reached the tokenizer
    # (--no-save) or the store as an internal error, exit 1
    for extra in (["--no-save"], []):
        code, _, err = run(capsys, "chat", "-m", "fake", "--system", "be \udcff brief", "--message", "hi", *extra)
        assert code == ExitCode.USAGE and err.count("\n") == 1 and "the system prompt is not valid UTF-8" in err, err
    assert json.loads(run(capsys, "sessions", "list", "--json")[1]) == []


def test_a_reader_that_goes_away_is_not_an_error(capsys, monkeypatch):
    # `strata chat --message hi | head -c 5` exited 1 (a bug's code) without a word: typer turns
    # EPIPE inside a command into sys.exit(1)
    import errno

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    monkeypatch.setattr(sys, "stderr", sys.stderr)  # typer wraps it too: put it back afterwards
    with pytest.raises(SystemExit) as info:
        run_app(app, ["chat", "-m", "fake", "--no-save", "--message", "hello there"])
    assert info.value.code == 0
    assert capsys.readouterr().err == ""


def test_chat_reading_a_terminal_with_stdout_in_a_pipe_says_how_to_end(capsys):
    # `strata chat | tee log`: stdin is a terminal, so the message is typed, but nothing said so
    # and the command seemed to hang
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    code, out, err = run(capsys, "chat", "-m", "fake", "--no-save", "--no-input", stdin="hi there\n")
    assert code == 0 and "Ctrl-D" not in err  # a pipe: no note
    sys.stdin = Terminal("hi there\n")
    with pytest.raises(SystemExit) as info:
        run_app(app, ["chat", "-m", "fake", "--no-save", "--no-input"])
    out, err = capsys.readouterr()
    assert info.value.code == 0 and "You said: hi there" in out
    assert err.startswith("strata: note: reading the message from the terminal; end it with Ctrl-D\n")


def test_plain_strata_is_chat_reading_stdin(capsys):
    code, out, err = run(capsys, "-m", "fake", stdin="from a pipe\n")
    assert code == 0 and "You said: from a pipe" in out
    code, out, err = run(capsys, stdin="from a pipe\n")
    # no --model: the bundled model; if it is not installed that is a one-line model error
    assert code in (0, ExitCode.MODEL), err
    if code == ExitCode.MODEL:
        assert err.startswith("strata: error:") and err.count("\n") == 1
    code, out, err = run(capsys, "chat", "-m", "fake", "--no-save", stdin="from a pipe\n")
    assert code == 0 and "You said: from a pipe" in out
    code, out, err = run(capsys, "chat", "-m", "fake", "--no-save", stdin="")
    assert code == ExitCode.USAGE and "no message" in err


def test_edit_headless(capsys, tmp_path):
    f = tmp_path / "code.py"
    f.write_text("a = 1\nb = 2\n")
    code, out, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace b = 2 with b = 3", "--no-input")
    assert code == 0 and "-b = 2\n+b = 3\n" in out and "not written" in err
    assert f.read_text() == "a = 1\nb = 2\n"
    code, out, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace b = 2 with b = 3", "--yes", "--json")
    data = json.loads(out)
    assert code == 0 and data["written"] and data["hunks"] == 1 and data["added"] == 1
    assert f.read_text() == "a = 1\nb = 3\n"
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "--yes")
    assert code == ExitCode.USAGE and "--instruction is required" in err
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"\x00\x01\x02")
    code, _, err = run(capsys, "edit", str(binary), "-i", "x", "--yes")
    assert code == ExitCode.EDIT and err == f"strata: error: {binary}: looks like a binary file (contains NUL bytes); strata edits text files\n"



def test_edit_yes_refused_still_prints_the_diff(capsys, tmp_path):
    # --yes that is refused (here: the rewrite no longer parses) shows what it refused, so the
    # user can judge whether --force is right; the file is untouched and the edit is recorded
    # as rejected, not left "proposed"
    f = tmp_path / "code.py"
    f.write_text("a = 1\nb = 2\n")
    code, out, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace b = 2 with b = (", "--yes")
    assert code == ExitCode.EDIT and "not valid Python" in err and err.count("\n") == 1, err
    assert "-b = 2\n+b = (\n" in out
    assert f.read_text() == "a = 1\nb = 2\n"
    code, out, _ = run(capsys, "sessions", "show", "--json",
                       json.loads(run(capsys, "sessions", "list", "--json")[1])[0]["id"])
    assert [e["status"] for e in json.loads(out)["edits"]] == ["rejected"]
    code, out, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace b = 2 with b = (", "--yes", "--json")
    data = json.loads(out)
    assert code == ExitCode.EDIT and err.count("\n") == 1 and "not valid Python" in data["refused"]
    assert not data["written"] and "+b = (" in data["diff"] and f.read_text() == "a = 1\nb = 2\n"
def test_a_rewrite_that_changes_nothing_shows_as_unchanged_not_proposed(capsys, tmp_path):
    # headless, nothing is accepted or rejected when the rewrite is the file itself; the store
    # keeps it as proposed, and `sessions show` says what it is
    f = tmp_path / "code.py"
    f.write_text("a = 1\nb = 2\n")
    code, _, err = run(capsys, "edit", str(f), "-m", "fake", "-i", "replace a = 1 with a = 1", "--yes")
    assert code == 0 and "changes nothing" in err
    sid = json.loads(run(capsys, "sessions", "list", "--json")[1])[0]["id"]
    code, out, _ = run(capsys, "sessions", "show", sid, "--json")
    data = json.loads(out)
    assert [t["edit"] for t in data["turns"]] == ["unchanged"] and [e["status"] for e in data["edits"]] == ["unchanged"]
    code, out, _ = run(capsys, "sessions", "show", sid)
    assert "edits: 1 unchanged" in out and ", unchanged)" in out and "proposed" not in out


def test_replay_compare(capsys):
    demo = str(DEMO / "chat-intro.jsonl")
    code, out, err = run(capsys, "replay", demo, "-m", "fake", "--compare", "--draft", "none")
    assert code == 0, err
    assert "outputs identical to the recording" in out
    assert out.startswith(f"replay of {demo} (chat, 3 turns)\n")
    one = json.loads(run(capsys, "chat", "-m", "fake", "--message", "hi", "--json")[1])["session"]
    code, out, err = run(capsys, "replay", one, "-m", "fake", "--compare")
    assert code == 0 and out.startswith(f"replay of session {one} (chat, 1 turn)\n"), out  # not "1 turns"
    code, out, _ = run(capsys, "replay", demo, "-m", "fake", "--compare", "--temperature", "0.9", "--seed", "4")
    assert code == ExitCode.MISMATCH and "outputs DIFFER" in out
    code, out, _ = run(capsys, "replay", demo, "-m", "fake", "--json")
    data = json.loads(out)
    assert data["identical"] and len(data["turns"]) == 3
    code, out, err = run(capsys, "replay", demo, "-m", "fake", "--no-input")
    assert code == 0 and "--- turn 2" in out
    code, _, err = run(capsys, "replay", demo, "-m", "fake", "--draft", "sometimes")
    assert code == ExitCode.USAGE and "--draft must be none or suffix" in err


def test_bench_reports_identity_and_ratio(capsys):
    code, out, err = run(capsys, "bench", str(DEMO / "edit-client.jsonl"), "-m", "fake", "--json")
    assert code == 0, err
    row = json.loads(out)["sessions"][0]
    assert row["lossless"] and row["none"]["matches_recording"] and row["suffix"]["matches_recording"]
    assert row["suffix"]["windows"] < row["none"]["windows"]
    assert row["speedup"] > 0


def test_bench_default_takes_every_session_below_sessions(capsys, tmp_path, monkeypatch):
    # the default was sessions/*.jsonl and sessions/*/*.jsonl: the demos recorded with the
    # bundled model (sessions/demo/strata-tiny/) were left out; rows name the path, so two
    # chat-intro.jsonl files are told apart
    import shutil

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sessions" / "demo" / "strata-tiny").mkdir(parents=True)
    shutil.copy(DEMO / "chat-intro.jsonl", tmp_path / "sessions" / "demo" / "chat-intro.jsonl")
    shutil.copy(DEMO / "chat-intro.jsonl", tmp_path / "sessions" / "demo" / "strata-tiny" / "chat-intro.jsonl")
    code, out, err = run(capsys, "bench", "-m", "fake", "--json")
    assert code == 0, err
    assert [r["session"] for r in json.loads(out)["sessions"]] == [
        os.path.join("sessions", "demo", "chat-intro.jsonl"),
        os.path.join("sessions", "demo", "strata-tiny", "chat-intro.jsonl")]
    code, out, err = run(capsys, "bench", "-m", "fake")
    assert code == 0 and "\nsessions/demo/strata-tiny/chat-intro.jsonl: " in out


def test_info_reads_checkpoint_metadata(capsys, tmp_path):
    from safetensors.numpy import save_file

    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 8, "num_experts": 4,
        "num_experts_per_tok": 2, "vocab_size": 16, "moe_intermediate_size": 4}))
    save_file({"model.embed_tokens.weight": np.zeros((16, 8), np.float32),
               "model.layers.0.mlp.gate.weight": np.zeros((4, 8), np.float16)},
              str(folder / "model.safetensors"))
    code, out, err = run(capsys, "info", str(folder), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["params"] == 16 * 8 + 4 * 8 and data["dtype"] == "F32"
    assert data["layers"] == 2 and data["experts"] == 4 and data["experts_per_token"] == 2
    assert data["size_on_disk"] == sum(p.stat().st_size for p in folder.iterdir())
    code, out, _ = run(capsys, "info", str(folder))
    assert "params        160 (0.0 M)" in out
    code, out, _ = run(capsys, "info", "strata-tiny")
    assert "layers        10 (2 linear_attention, 8 full_attention)\n" in out  # not a dict's repr
    code, _, err = run(capsys, "info", str(tmp_path))
    assert code == ExitCode.MODEL and "no config.json" in err


def test_errors_are_one_line_and_tracebacks_only_with_debug(capsys, monkeypatch, tmp_path):
    code, _, err = run(capsys, "chat", "--frobnicate")
    assert code == ExitCode.USAGE and err.startswith("strata: error: No such option") and err.count("\n") == 1
    store = tmp_path / "home" / "data" / "sessions.sqlite3"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"not a database")
    code, _, err = run(capsys, "sessions", "list")
    assert code == ExitCode.SESSION and err.count("\n") == 1 and "not a strata session store" in err
    assert store.read_bytes() == b"not a database"
    import strata.cli.common as cmds

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(cmds, "open_store", boom)
    code, _, err = run(capsys, "sessions", "list")
    assert code == ExitCode.ERROR and err.count("\n") == 1 and "--debug" in err and "Traceback" not in err
    code, _, err = run(capsys, "sessions", "list", "--debug")
    assert code == ExitCode.ERROR and "Traceback" in err and "kaboom" in err


def _subprocess_env(tmp_path, **extra):
    env = dict(os.environ, STRATA_HOME=str(tmp_path / "home"), STRATA_ALLOW_FAKE="1", **extra)
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _wait_reading_stdin(proc, timeout=60.0):
    """Until the child blocks in read(0, ...) (Linux: /proc/PID/syscall), so a signal meets its own
    handler, not Python's start-up on a loaded machine; elsewhere a fixed second."""
    path = f"/proc/{proc.pid}/syscall"
    if not os.path.exists(path):
        time.sleep(1.0)
        return
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        try:
            fields = open(path).read().split()
        except OSError:
            fields = []
        if len(fields) > 1 and fields[0] in ("0", "63") and fields[1] == "0x0":  # read, fd 0 (x86-64, arm64)
            return
        time.sleep(0.05)


def test_ctrl_c_exits_130(tmp_path):
    # Ctrl-C as a terminal delivers it: the child starts with SIGINT's default action. Run in the
    # background by a non-interactive shell, the test process inherits SIGINT ignored (POSIX), and a
    # Python started so ignores it too: the read then ends only when stdin closes ("no message", exit 2)
    proc = subprocess.Popen([sys.executable, "-m", "strata", "chat", "-m", "fake", "--no-input"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_subprocess_env(tmp_path),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_reading_stdin(proc)
    proc.send_signal(signal.SIGINT)
    try:  # stdin stays open: the signal alone must end the read (communicate() closes it at once)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err.decode(errors="replace")[-2000:]
    assert b"Traceback" not in err and b"interrupted" in err


def test_no_color_is_honoured(tmp_path):
    out = subprocess.run([sys.executable, "-m", "strata", "--help"], capture_output=True, text=True,
                         env=_subprocess_env(tmp_path, NO_COLOR="1", FORCE_COLOR="1"), timeout=60)
    assert out.returncode == 0 and "chat" in out.stdout
    colours = re.findall(r"\x1b\[[0-9;]*(?:3[0-9]|9[0-7])[0-9;]*m", out.stdout)
    assert colours == []


def test_info_reads_pack_metadata(capsys, tmp_path):
    from strata.pack import write_synthetic_pack

    cfg = {"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 8, "num_experts": 4,
           "num_experts_per_tok": 2, "vocab_size": 16, "moe_intermediate_size": 4}
    dense = {"model.embed_tokens.weight": np.zeros((16, 8), np.float32)}
    dst = tmp_path / "pack"
    write_synthetic_pack(str(dst), cfg, dense, layers=[0, 1], num_experts=4, hidden=8, inter=4,
                         dtype="f32", blob=lambda layer, e: bytes(3 * 8 * 4 * 4))
    code, out, err = run(capsys, "info", str(dst), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["format"] == "strata-pack"
    assert data["params"] == 16 * 8 + 2 * 4 * 3 * 8 * 4
    assert data["experts"] == 4 and data["size_on_disk"] == sum(p.stat().st_size for p in dst.iterdir())


def test_interactive_commands_open_the_tui(capsys, monkeypatch, tmp_path):
    import strata.cli.common as cmds
    import strata.tui.app as tui_app

    opened = []

    class StubApp:
        def __init__(self, generator, **kwargs):
            opened.append((generator.model_name, kwargs))
            self.return_code = 0

        def run(self):
            pass

    monkeypatch.setattr(tui_app, "StrataApp", StubApp)
    monkeypatch.setattr(cmds, "interactive", lambda no_input: not no_input)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    f = tmp_path / "a.txt"
    f.write_text("x\n")
    assert run(capsys, "chat", "-m", "fake", "--temperature", "0.5", "--copy-bias", "1.5")[0] == 0
    assert run(capsys, "edit", str(f), "-m", "fake", "-i", "go")[0] == 0
    assert run(capsys, "replay", str(DEMO / "chat-intro.jsonl"), "-m", "fake")[0] == 0
    modes = [kw["mode"] for _, kw in opened]
    assert modes == ["chat", "edit", "replay"]
    assert opened[0][1]["settings"].temperature == 0.5 and opened[0][1]["store"] is not None
    assert opened[0][1]["settings"].copy_bias == 1.5
    assert opened[1][1]["settings"].copy_bias is None  # the edit's own default decides
    assert opened[1][1]["edit_path"] == f and opened[1][1]["instruction"] == "go"
    assert opened[2][1]["replay"].recording.kind == "chat"
    # headless flags never open it
    assert run(capsys, "edit", str(f), "-m", "fake", "-i", "go", "--no-input")[0] == 0
    assert run(capsys, "replay", str(DEMO / "chat-intro.jsonl"), "-m", "fake", "--compare")[0] == 0
    assert len(opened) == 3


def test_bench_skips_an_unusable_workload_and_names_it(capsys, tmp_path):
    big = tmp_path / "big.jsonl"
    header = {"format": "strata-session", "version": 1, "kind": "edit", "model": {}, "settings": {}}
    turn = {"type": "turn", "index": 0, "input": "go", "file": {"path": "src/huge.txt", "content": "x" * 6000},
            "instruction": "go", "output": "y"}
    big.write_text(json.dumps(header) + "\n" + json.dumps(turn) + "\n")
    code, out, err = run(capsys, "bench", str(big), str(DEMO / "chat-intro.jsonl"), "-m", "fake", "--json")
    assert code == 0
    rows = json.loads(out)["sessions"]
    assert "src/huge.txt" in rows[0]["error"] and "turn 0" in rows[0]["error"]
    assert rows[1]["lossless"]
    assert "skipped" in err
    code, _, _ = run(capsys, "bench", str(big), "-m", "fake")
    assert code == ExitCode.ERROR
