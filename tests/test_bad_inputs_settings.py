"""Bad-input corpus: generation settings and engine options on the command line.

NaN and infinities in every float option, integers past what the engine takes in every integer
option, nonsense in the pack-only options, for every command that takes them: each is one error
line naming the option, exit code 2, before any model is loaded, and the same rule in every
command (GenerationSettings validates once; the fronts pass values through).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata.cli import ExitCode

from bad_inputs import assert_one_line_error, run_cli
from bad_input_helpers import sized_fifo

DEMO = Path(__file__).resolve().parents[1] / "sessions" / "demo" / "chat-intro.jsonl"
USAGE = int(ExitCode.USAGE)

NON_FINITE = ("nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-1e309")
FLOAT_FLAGS_RUN = {"--temperature": ("-0.5", "5.5", "1e6"), "--top-p": ("0", "-1", "1.01"),
                   "--repetition-penalty": ("0", "-2", "1e9"), "--presence-penalty": ("1e9",),
                   "--frequency-penalty": ("-1e9",)}
INT_FLAGS_RUN = {"--max-new": ("-1", str(2**31), str(2**64), str(10**40)),
                 "--top-k": ("-1", str(2**31), str(10**40)),
                 "--seed": ("-1", str(2**64), str(10**40)),
                 "--max-draft": ("-1", "16", str(2**40)),
                 "--min-match": ("0", "513", str(2**40)),
                 "--threads": ("0", "-3", str(10**6), str(2**70))}


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")


def _cases(table, extra=()):
    return [(flag, v) for flag, values in table.items() for v in (*values, *extra)]


@pytest.mark.parametrize("flag, value", _cases(FLOAT_FLAGS_RUN, NON_FINITE))
def test_run_refuses_bad_floats(capsys, flag, value):
    code, out, err = run_cli(capsys, "run", "--prompt-ids", "1 2", flag, value)
    assert_one_line_error(code, err, USAGE, flag)
    assert out == ""


@pytest.mark.parametrize("flag, value", _cases(INT_FLAGS_RUN))
def test_run_refuses_integers_the_engine_cannot_take(capsys, flag, value):
    code, _, err = run_cli(capsys, "run", "--prompt-ids", "1 2", flag, value)
    assert_one_line_error(code, err, USAGE, flag)


# the options chat, edit and replay share, and their bad values
SHARED = {"--temperature": (*NON_FINITE, "-1", "5.01"), "--seed": ("-1", str(2**64)),
          "--max-draft": ("-1", "16", str(2**63)), "--threads": ("0", str(2**40))}


def _command(name: str, tmp_path: Path) -> list[str]:
    if name == "chat":
        return ["chat", "-m", "fake", "--no-save", "--message", "hi"]
    if name == "edit":
        f = tmp_path / "f.txt"
        f.write_text("one\n")
        return ["edit", str(f), "-m", "fake", "-i", "x", "--yes", "--no-save"]
    return ["replay", str(DEMO), "-m", "fake", "--no-input"]


@pytest.mark.parametrize("command", ["chat", "edit", "replay"])
@pytest.mark.parametrize("flag, value", _cases(SHARED))
def test_chat_edit_replay_refuse_the_same_values(capsys, tmp_path, command, flag, value):
    code, _, err = run_cli(capsys, *_command(command, tmp_path), flag, value)
    assert_one_line_error(code, err, USAGE, flag)


@pytest.mark.parametrize("value", ["-1", "0", str(2**40)])
def test_chat_max_new_and_checkpoints(capsys, tmp_path, value):
    for flag in ("--max-new", "--checkpoints"):
        if flag == "--max-new" and value == "0":
            continue  # 0 is a valid max_new everywhere: see test_max_new_zero_is_the_same_everywhere
        code, _, err = run_cli(capsys, *_command("chat", tmp_path), flag, value)
        assert_one_line_error(code, err, USAGE, flag)


def test_the_same_bad_value_gets_the_same_message_in_every_command(capsys, tmp_path):
    lines = set()
    for argv in (["run", "--prompt-ids", "1"], _command("chat", tmp_path), _command("edit", tmp_path),
                 _command("replay", tmp_path)):
        code, _, err = run_cli(capsys, *argv, "--temperature", "nan")
        lines.add(assert_one_line_error(code, err, USAGE))
    assert len(lines) == 1, lines


def test_max_new_zero_is_the_same_everywhere(capsys, tmp_path):
    code, out, err = run_cli(capsys, "run", "--prompt-ids", "1 2", "--max-new", "0", "--json")
    assert code == 0, err
    code, _, err = run_cli(capsys, *_command("chat", tmp_path), "--max-new", "0")
    assert code == 0, err


STREAM_BAD = {"--expert-cache": ("nan", "-1", "0", "1" * 400, "12XB", "1.5", "", "0%", "101%"),
              "--routing": ("bonus=nan", "bonus=inf", "draft-bonus=1e400", "bonus=-1e9", "protect=-1",
                            f"protect={2**40}", "anchors=3", "warp=9", ""),
              "--io-mode": ("fast", ""), "--eviction": ("fifo", "")}


@pytest.mark.parametrize("flag, value", _cases(STREAM_BAD))
@pytest.mark.parametrize("command", ["run", "chat"])
def test_pack_options_with_bad_values(capsys, tmp_path, command, flag, value):
    argv = ["run", "--prompt-ids", "1"] if command == "run" else _command("chat", tmp_path)
    code, _, err = run_cli(capsys, *argv, flag, value)
    assert_one_line_error(code, err, USAGE, flag)


@pytest.mark.parametrize("value", ["-1", "0", str(10**30)])
def test_sessions_list_limit(capsys, value):
    code, _, err = run_cli(capsys, "sessions", "list", "--limit", value)
    assert_one_line_error(code, err, USAGE, "--limit")


@pytest.mark.parametrize("key, value", [("temperature", "NaN"), ("top_p", "Infinity"), ("seed", "-1"),
                                        ("max_new", str(2**70)), ("max_draft", "99"), ("min_match", "0"),
                                        ("repetition_penalty", "-Infinity"), ("draft", '"sometimes"')])
def test_session_files_with_bad_settings(capsys, tmp_path, key, value):
    lines = DEMO.read_text().splitlines()
    header = json.loads(lines[0])
    header["settings"][key] = json.loads(value)  # NaN / Infinity: the JSON extensions Python reads
    head = json.dumps(header)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([head, *lines[1:]]) + "\n")
    code, _, err = run_cli(capsys, "replay", str(bad), "-m", "fake", "--no-input")
    assert_one_line_error(code, err, int(ExitCode.SESSION), key)


def test_already_exists_is_a_usage_error_everywhere(capsys, tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    code, _, err = run_cli(capsys, "convert", str(tmp_path / "nowhere"), str(target))
    # a missing source is the model's problem, reported before the target is looked at
    assert code in (int(ExitCode.MODEL), USAGE) and "Traceback" not in err
    src = Path(__file__).resolve().parents[1] / "app" / "strata" / "models" / "strata-tiny"
    code, _, err = run_cli(capsys, "convert", str(src), str(target))
    assert_one_line_error(code, err, USAGE, "already exists")
    out = tmp_path / "s.jsonl"
    out.write_text("precious")
    code, _, err = run_cli(capsys, "chat", "-m", "fake", "--message", "hi")
    assert code == 0, err
    code, out_text, err = run_cli(capsys, "sessions", "list", "--json")
    sid = json.loads(out_text)[0]["id"]
    code, _, err = run_cli(capsys, "sessions", "export", sid, "-o", str(out))
    assert_one_line_error(code, err, USAGE, "already exists")
    assert out.read_text() == "precious"


@pytest.mark.parametrize("value", ["lots", "0", "-1", "1025", str(10**20), "2.5"])
@pytest.mark.parametrize("command", ["chat", "edit"])
def test_bad_checkpoints_variable_is_a_usage_error_before_the_model(capsys, tmp_path, monkeypatch, command, value):
    # the variable is what --checkpoints sets: the same range, exit 2 before the model is looked
    # at (a missing model would be exit 3); 10**20 was taken as is, "lots" was exit 4 after loading
    monkeypatch.setenv("STRATA_CHECKPOINTS", value)
    f = tmp_path / "f.py"
    f.write_text("x = 1\n")
    argv = ["chat", "--message", "hi"] if command == "chat" else ["edit", str(f), "-i", "add a docstring", "--no-input"]
    code, _, err = run_cli(capsys, *argv, "-m", str(tmp_path / "no-such-model"))
    assert_one_line_error(code, err, USAGE, f"STRATA_CHECKPOINTS={value!r}", "from 1 to 1024")


@pytest.mark.parametrize("value", ["soon", "-5", "nan", "inf", "3601"])
def test_bad_store_timeout_variable_is_a_usage_error(capsys, monkeypatch, value):
    # a value that is not a number of seconds was silently read as 10
    monkeypatch.setenv("STRATA_STORE_TIMEOUT", value)
    code, _, err = run_cli(capsys, "sessions", "list")
    assert_one_line_error(code, err, USAGE, f"STRATA_STORE_TIMEOUT={value!r}")
    monkeypatch.setenv("STRATA_STORE_TIMEOUT", "0.5")
    code, _, err = run_cli(capsys, "sessions", "list")
    assert code == 0, err


def test_a_prompt_file_past_any_context_is_refused_before_it_fills_memory(capsys, tmp_path, monkeypatch):
    # --prompt-file /dev/zero read until a MemoryError (exit 1); a prompt is refused once it is
    # larger than any context holds, before the model is looked at (a missing one would be exit 3)
    from strata import textcheck

    monkeypatch.setattr(textcheck, "MAX_INPUT_BYTES", 1000)
    big = tmp_path / "big.txt"
    big.write_text("word " * 300)
    for path in (big, sized_fifo(tmp_path / "pipe.txt", b"word " * 300)):  # a pipe: no size to stat, as /dev/zero
        code, _, err = run_cli(capsys, "run", "-m", str(tmp_path / "no-model"), "--prompt-file", str(path))
        assert_one_line_error(code, err, USAGE, str(path), "more text than any model's context holds")
    code, _, err = run_cli(capsys, "run", "-m", str(tmp_path / "no-model"), stdin="word " * 300)
    assert_one_line_error(code, err, USAGE, "the prompt on stdin")
    code, _, err = run_cli(capsys, "chat", "-m", "fake", "--no-save", stdin="word " * 300)
    assert_one_line_error(code, err, USAGE, "the message on stdin", "more text than any model's context holds")
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"caf\xe9\n")
    code, _, err = run_cli(capsys, "run", "-m", str(tmp_path / "no-model"), "--prompt-file", str(latin))
    assert_one_line_error(code, err, USAGE, f"{latin} is not valid UTF-8 text")
