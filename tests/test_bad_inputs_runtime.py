"""Bad-input corpus at run time: prompts past the context (exit 2), token ids past the vocabulary,
a tokenizer that belongs to another model (exit 3, naming tokenizer.json), and `strata bench` on
files that are not sessions (exit 4, one line, before any model is loaded)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from strata.cli import ExitCode
from strata.models import bundled_model_path
from strata.testing.devmodel import write_random_model

from bad_inputs import assert_one_line_error, run_cli

TINY = bundled_model_path()
DEMO = Path(__file__).resolve().parents[1] / "sessions" / "demo"


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    monkeypatch.setenv("STRATA_DEBUG", "0")


def _tiny_context() -> int:
    return int(json.loads((TINY / "config.json").read_text())["max_position_embeddings"])


@pytest.mark.parametrize("extra", [1, 7, 1000, 50_000])
def test_prompt_ids_past_the_context_are_a_usage_error(capsys, extra):
    ids = " ".join(["5"] * (_tiny_context() + extra))
    code, _, err = run_cli(capsys, "run", "--prompt-ids", ids, "--max-new", "1", "--threads", "1")
    assert_one_line_error(code, err, int(ExitCode.USAGE), "context")


@pytest.mark.parametrize("factor", [1.2, 3])
def test_text_prompt_past_the_context(capsys, factor):
    text = "strata " * int(_tiny_context() * factor)
    code, _, err = run_cli(capsys, "run", "--prompt", text, "--max-new", "1", "--threads", "1")
    assert_one_line_error(code, err, int(ExitCode.USAGE), "context")


@pytest.mark.parametrize("chars", [9000, 20000])
def test_chat_message_past_the_context(capsys, chars):
    code, _, err = run_cli(capsys, "chat", "-m", "fake", "--no-save", "--message", "x" * chars)
    assert_one_line_error(code, err, int(ExitCode.USAGE), "context")


@pytest.mark.parametrize("ids", ["8192", "1 2 99999", str(2**31), str(2**64), "-1", "1 x 2", "1.5"])
def test_prompt_ids_outside_the_vocabulary_or_not_ids(capsys, ids):
    code, _, err = run_cli(capsys, "run", "--prompt-ids", ids, "--threads", "1")
    assert_one_line_error(code, err, int(ExitCode.USAGE), "--prompt-ids")


@pytest.mark.parametrize("vocab", [16, 512, 8191])
def test_tokenizer_of_another_model_is_named(capsys, tmp_path, vocab):
    folder = tmp_path / "m"
    write_random_model(folder, "qwen3_moe", seed=0, preset="tiny", vocab_size=vocab)
    shutil.copy(TINY / "tokenizer.json", folder / "tokenizer.json")  # ids up to 8191
    code, _, err = run_cli(capsys, "run", "--model", str(folder), "--prompt", "hello", "--threads", "1")
    line = assert_one_line_error(code, err, int(ExitCode.MODEL), "tokenizer.json")
    assert str(vocab) in line and "--prompt-ids" not in line


def test_tokenizer_that_fits_the_vocabulary_loads(capsys, tmp_path):
    folder = tmp_path / "m"
    write_random_model(folder, "qwen3_moe", seed=0, preset="tiny", vocab_size=8192)
    shutil.copy(TINY / "tokenizer.json", folder / "tokenizer.json")
    code, _, err = run_cli(capsys, "run", "--model", str(folder), "--prompt", "hello", "--max-new", "2",
                           "--threads", "1")
    assert code == 0, err


def _bad_sessions(tmp_path: Path) -> dict[str, Path]:
    demo = (DEMO / "chat-intro.jsonl").read_text().splitlines()
    cases = {
        "empty": b"", "not json": b"{nope", "binary": bytes(range(256)) * 4, "a list": b"[1,2]\n",
        "not utf-8": b'{"format": "strata-session", "x": "\xff"}\n', "NUL": b"\x00" * 100,
        "deep": b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "foreign format": b'{"format": "other", "version": 1}\n',
        "future version": (demo[0].replace('"version":1', '"version":99') + "\n").encode(),
        "turn before header": ("\n".join(demo[1:2] + demo[:1]) + "\n").encode(),
        "bad settings": (demo[0].replace('"temperature":0.0', '"temperature":NaN') + "\n").encode(),
    }
    out = {}
    for name, data in cases.items():
        p = tmp_path / (name.replace(" ", "_") + ".jsonl")
        p.write_bytes(data)
        out[name] = p
    folder = tmp_path / "a_folder.jsonl"
    folder.mkdir()
    out["a folder"] = folder
    out["missing"] = tmp_path / "missing.jsonl"
    return out


def test_bench_on_bad_files_is_one_line_and_exit_4(capsys, tmp_path):
    for name, path in _bad_sessions(tmp_path).items():
        code, out, err = run_cli(capsys, "bench", "-m", "fake", str(path))
        line = assert_one_line_error(code, err, int(ExitCode.SESSION))
        assert path.name in line, (name, line)
        assert "model:" not in out  # no model was loaded for nothing


def test_bench_skips_a_bad_file_among_good_ones(capsys, tmp_path):
    bad = _bad_sessions(tmp_path)["not json"]
    code, out, err = run_cli(capsys, "bench", "-m", "fake", str(DEMO / "chat-intro.jsonl"), str(bad), "--json")
    assert code == 0, err
    rows = json.loads(out)["sessions"]
    assert [("error" in r) for r in rows] == [True, False] or [("error" in r) for r in rows] == [False, True]
    assert "skipped" in err and "Traceback" not in err
