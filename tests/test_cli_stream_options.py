"""The streaming options on the command line (--io-mode, --eviction, --readahead, --routing,
--expert-cache): checked values, pack-only, exact output, and approximate output made visible."""
from __future__ import annotations

import io
import json
import sys

import pytest

pytest.importorskip("strata._engine")
from strata import pack  # noqa: E402
from strata.cli import app  # noqa: E402
from strata.cli import options  # noqa: E402
from strata.cli.runner import run_app  # noqa: E402
from strata.testing.devmodel import write_random_model  # noqa: E402

NOTE = options.APPROXIMATE_NOTE
PROMPT = ["--prompt-ids", "5 6 7 8 5 6 7 8 5 6 7", "--max-new", "12", "--threads", "1"]


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_DEBUG", "0")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("streamcli")
    src = root / "ckpt"
    write_random_model(str(src), arch="qwen3_next", seed=4, preset="tiny", vocab_size=128)
    dst = root / "pack"
    pack.convert(str(src), str(dst))
    assert pack.is_pack(str(dst)) and not pack.is_pack(str(src))
    return src, dst


def strata(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        run_app(app, [str(a) for a in args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def run_json(capsys, model, *extra):
    code, out, err = strata(capsys, "run", "--model", model, *PROMPT, "--json", *extra)
    assert code == 0, err
    return json.loads(out), err


def test_option_parsers_import_neither_numpy_nor_the_engine():
    import subprocess
    import sys

    code = ("import sys, strata.cli.options, strata.pack.options\n"
            "print(sorted(m for m in ('numpy', 'strata._engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_routing_marks_run_output_approximate(capsys, models):
    _, dst = models
    obj, err = run_json(capsys, dst, "--routing", "protect=1,bonus=1", "--expert-cache", "0.5")
    assert obj["stats"]["approximate"] is True
    assert len(obj["tokens"]) == 12
    assert err.count(NOTE) == 1
    # plain output says it too, and --routing off is exact again
    code, out, err = strata(capsys, "run", "--model", dst, *PROMPT, "--routing", "hard-budget")
    assert code == 0 and NOTE in err and len(out.split()) == 12
    obj, err = run_json(capsys, dst, "--routing", "off")
    assert obj["stats"]["approximate"] is False and NOTE not in err


@pytest.mark.parametrize("extra", [
    [],
    ["--expert-cache", "0.25", "--io-mode", "page_cache", "--eviction", "lfu", "--readahead",
     "--routing", "root-readahead"],
    ["--expert-cache", "1", "--io-mode", "direct", "--eviction", "lru", "--no-readahead"],
])
def test_exact_pack_output_equals_the_checkpoint(capsys, models, extra):
    src, dst = models
    ref, _ = run_json(capsys, src)
    got, err = run_json(capsys, dst, *extra)
    assert got["tokens"] == ref["tokens"] and len(got["tokens"]) == 12
    assert got["stats"]["approximate"] is False and ref["stats"]["approximate"] is False
    assert NOTE not in err


@pytest.mark.parametrize("args, flag", [
    (["--routing", "protect=x"], "--routing"),
    (["--routing", "sideways"], "--routing"),
    (["--routing", "anchors=2"], "--routing"),
    (["--routing", ""], "--routing"),
    (["--io-mode", "mmap"], "--io-mode"),
    (["--eviction", "mru"], "--eviction"),
    (["--expert-cache", "lots"], "--expert-cache"),
])
def test_bad_values_are_one_line_usage_errors(capsys, models, args, flag):
    _, dst = models
    code, out, err = strata(capsys, "run", "--model", dst, *PROMPT, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err and err.startswith("strata: error:")


@pytest.mark.parametrize("cmd", [["run", *PROMPT], ["chat", "--message", "hi", "--no-save"]])
def test_pack_options_on_a_checkpoint_folder_say_they_need_a_pack(capsys, models, cmd):
    src, _ = models
    code, out, err = strata(capsys, *cmd, "--model", src, "--routing", "protect=1,bonus=1")
    assert code == 2 and out == ""
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert "--routing needs a strata pack" in line and f"strata convert {src}" in line
    code, _, err = strata(capsys, *cmd, "--model", src, "--io-mode", "page_cache", "--no-readahead")
    assert code == 2 and "--io-mode, --readahead need a strata pack" in err


def test_chat_and_edit_headless_print_the_note(capsys, monkeypatch, tmp_path):
    # the fake generator stands in for a pack (no tokenizer in the tiny random model)
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    import strata.runtime as runtime

    seen = []

    def fake_open(model, **opts):
        seen.append(opts)
        from strata.testing.fake import FakeGenerator

        return FakeGenerator()

    monkeypatch.setattr(runtime, "open_generator", fake_open)
    code, out, err = strata(capsys, "chat", "--model", "fake", "--message", "hi", "--no-save", "--json",
                            "--routing", "protect=2,bonus=1.5", "--io-mode", "page_cache", "--eviction", "lfu")
    assert code == 0, err
    assert err.count(NOTE) == 1 and json.loads(out)["approximate"] is True
    assert seen[-1]["routing"] == {"protect": 2, "bonus": 1.5, "cache_aware": True}
    assert seen[-1]["io_mode"] == "page_cache" and seen[-1]["eviction"] == "lfu"
    assert "readahead" not in seen[-1]  # not given: the engine's default
    f = tmp_path / "a.py"
    f.write_text("x = 1\n")
    code, out, err = strata(capsys, "edit", str(f), "-i", "rename x", "--model", "fake", "--no-input",
                            "--no-save", "--json", "--routing", "hard-budget")
    assert code == 0, err
    assert err.count(NOTE) == 1 and json.loads(out)["approximate"] is True
    code, out, err = strata(capsys, "chat", "--model", "fake", "--message", "hi", "--no-save", "--json")
    assert code == 0 and NOTE not in err and json.loads(out)["approximate"] is False


def test_fake_model_refuses_pack_options(capsys, monkeypatch):
    monkeypatch.setenv("STRATA_ALLOW_FAKE", "1")
    code, _, err = strata(capsys, "chat", "--model", "fake", "--message", "hi", "--no-save",
                          "--expert-cache", "1GiB")
    assert code == 2 and "--expert-cache needs a strata pack" in err


def test_tui_cache_panel_flags_a_real_approximate_run(models):
    from rich.console import Console

    from strata.generate import Generator
    from strata.protocol import GenerationSettings
    from strata.tui.telemetry import TelemetryLog
    from strata.tui.widgets.panels import ColdMissPanel

    _, dst = models
    for routing, flagged in (("protect=1,bonus=1", True), (None, False)):
        gen = Generator.from_path(str(dst), threads=1, expert_cache="0.5", routing=routing)
        gen.generate([5, 6, 7, 8], GenerationSettings(max_new=6))
        assert gen.last_stats and all(s.approximate is flagged for s in gen.last_stats if s.T > 0)
        log = TelemetryLog()
        for s in gen.last_stats:
            log.add(s)
        console = Console(width=60, record=True, file=io.StringIO())
        console.print(ColdMissPanel(log).render_log(60))
        assert ("approximate routing" in console.export_text()) is flagged


def test_info_shows_the_pack_io_facts(capsys, models):
    src, dst = models
    code, out, err = strata(capsys, "info", dst, "--json")
    assert code == 0, err
    data = json.loads(out)
    io_ = data["pack_io"]
    info = pack.read_pack(str(dst))
    assert io_["blob_stride"] == info.ex["stride"] and io_["blob_stride"] % 4096 == 0
    assert io_["blobs"] == info.ex["num_layers"] * info.ex["num_experts"]
    assert io_["layer_bytes"] * io_["moe_layers"] == data["expert_bytes"]
    assert io_["direct_io"] in (True, False, None)
    code, out, _ = strata(capsys, "info", dst)
    assert code == 0 and "experts file" in out and "O_DIRECT" in out and "per layer" in out
    code, out, _ = strata(capsys, "info", src, "--json")
    assert code == 0 and "pack_io" not in json.loads(out)


def test_run_reports_the_expert_cache_counters_for_packs(capsys, models):
    src, dst = models
    obj, _ = run_json(capsys, dst, "--expert-cache", "0.25")
    s = obj["stats"]
    assert s["cold_misses"] > 0 and s["bytes_read"] > 0 and 0 <= s["hit_rate"] <= 1
    assert s["hit_rate"] == pytest.approx(s["hits"] / (s["hits"] + s["cold_misses"]))
    code, _, err = strata(capsys, "run", "--model", dst, *PROMPT, "--stats", "--expert-cache", "0.25")
    assert code == 0 and "expert cache" in err and "misses" in err and "read" in err
    code, _, err = strata(capsys, "run", "--model", src, *PROMPT, "--stats")
    assert code == 0 and "expert cache" not in err  # every expert resident: nothing to report
