"""`strata run` end to end on a tiny random checkpoint (subprocess: real exit codes and streams)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("strata._engine")
import strata  # noqa: E402
from strata.testing.devmodel import write_random_model  # noqa: E402

# the folder this test imported strata from (app/ in a checkout, site-packages when installed)
APP = str(Path(strata.__file__).resolve().parents[1])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("runm") / "m"
    write_random_model(str(path), arch="qwen3_next", seed=1, preset="tiny", vocab_size=128)
    return path


def strata(*args, stdin=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "strata", *args], input=stdin, capture_output=True,
                          text=True, env=env, timeout=120)


def test_json_output_is_stable_and_drafting_is_lossless(model_dir):
    outs = []
    for draft in (["--draft", "none"], ["--draft", "suffix"], ["--draft", "suffix", "--max-draft", "15"],
                  ["--draft", "baseline"]):
        r = strata("run", "--model", str(model_dir), "--prompt-ids", "5 6 7 8 5 6 7 8 5 6 7",
                   "--max-new", "30", "--temperature", "0.8", "--seed", "7", "--json", "--threads", "1", *draft)
        assert r.returncode == 0, r.stderr
        obj = json.loads(r.stdout)
        assert set(obj) >= {"text", "tokens", "stats", "stop_reason"}
        assert len(obj["tokens"]) == 30 and obj["stop_reason"] == "max_new"
        st = obj["stats"]
        assert {"acceptance", "mean_keep", "t_hist", "tokens_per_s", "accepted_per_s", "window_p50_ms",
                "window_p95_ms", "prefill_s"} <= set(st)
        outs.append(obj["tokens"])
    assert all(o == outs[0] for o in outs)


def test_plain_output_and_stats_on_stderr(model_dir):
    r = strata("run", "--model", str(model_dir), "--prompt-ids", "1,2,3", "--max-new", "5", "--stats")
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) == 5  # no tokenizer: the ids are printed
    assert "tokens in" in r.stderr and "acceptance" in r.stderr
    assert re.search(r"; T=1 x\d+[;,]", r.stderr) and "{" not in r.stderr  # windows per T, not a dict's repr


@pytest.mark.parametrize("args, code, message", [
    (["--max-draft", "16"], 2, "--max-draft"),
    (["--draft", "maybe"], 2, "--draft"),
    (["--top-p", "0"], 2, "--top-p"),
    (["--prompt", "x"], 2, "only one of"),
])
def test_bad_options_are_one_line_usage_errors(model_dir, args, code, message):
    r = strata("run", "--model", str(model_dir), "--prompt-ids", "1 2", *args)
    assert r.returncode == code
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in r.stderr


def test_text_prompt_needs_a_tokenizer_and_missing_model_is_a_model_error(model_dir, tmp_path):
    r = strata("run", "--model", str(model_dir), "--prompt", "hello")
    assert r.returncode == 3 and "tokenizer" in r.stderr
    # chat has no --prompt-ids: the message must not tell it to give token ids
    r = strata("chat", "--model", str(model_dir), "--message", "hello", "--no-save")
    assert r.returncode == 3 and r.stderr.count("\n") == 1, r.stderr
    assert "no tokenizer.json, so it cannot read text (strata run --prompt-ids takes token ids)" in r.stderr
    r = strata("run", "--model", str(tmp_path / "nope"), "--prompt-ids", "1")
    assert r.returncode == 3 and "nope" in r.stderr
    r = strata("run", "--model", str(model_dir), "--prompt-ids", "100000")
    assert r.returncode == 2 and "vocabulary" in r.stderr


def _bundled_or_skip():
    from strata.errors import ModelError
    from strata.models import resolve_model

    try:
        return resolve_model(None)
    except ModelError:
        pytest.skip("the bundled model is not installed")


def test_bundled_model_from_stdin_with_text_and_lossless_drafting():
    _bundled_or_skip()
    outs = []
    for draft in ("none", "suffix"):
        r = strata("run", "--max-new", "40", "--json", "--draft", draft, "--temperature", "0.7", "--seed", "1",
                   stdin="def add(a, b):\n")
        assert r.returncode == 0, r.stderr
        obj = json.loads(r.stdout)
        assert obj["stop_reason"] in ("eos", "max_new") and obj["tokens"]
        assert "\ufffd" not in obj["text"]
        outs.append((obj["tokens"], obj["text"]))
    assert outs[0] == outs[1]


def test_bundled_model_chat_template():
    _bundled_or_skip()
    r = strata("run", "--chat", "--prompt", "Say hello.", "--max-new", "20", "--stats")
    assert r.returncode == 0, r.stderr
    assert "stop:" in r.stderr


def test_a_prompt_that_is_not_utf8_is_one_usage_line():
    # from argv or stdin it reached the tokenizer: "internal error: TypeError: TextInputSequence
    # must be str", exit 1
    _bundled_or_skip()
    env = dict(os.environ)
    env["PYTHONPATH"] = APP + os.pathsep + env.get("PYTHONPATH", "")
    for argv, stdin, what in (([b"--prompt", b"ab\xff"], None, "the prompt is not valid UTF-8"),
                              ([], b"def f():\xff\n", "the prompt on stdin is not valid UTF-8")):
        r = subprocess.run([sys.executable.encode(), b"-m", b"strata", b"run", b"--max-new", b"2", *argv],
                           input=stdin, capture_output=True, env=env, timeout=120)
        err = r.stderr.decode("utf-8", "replace")
        assert r.returncode == 2 and err.count("\n") == 1 and what in err, err
