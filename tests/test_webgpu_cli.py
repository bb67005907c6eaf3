"""`strata info --gpu`: adapter, driver and limits, and the one-line errors around it."""
from __future__ import annotations

import io
import json
import sys

import pytest

from strata.cli import ExitCode, app
from strata.cli.runner import run_app
from webgpu_helpers import open_test_device


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("STRATA_DEBUG", "0")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))


def run(capsys, *args):
    with pytest.raises(SystemExit) as info:
        run_app(app, list(args))
    out, err = capsys.readouterr()
    return info.value.code, out, err


def test_info_gpu_shows_adapter_and_limits(capsys):
    dev = open_test_device()
    expected = dev.info()
    code, out, _ = run(capsys, "info", "--gpu", "any")
    assert code == 0
    assert expected["device"] in out
    assert "binding max" in out and "chunks of" in out
    assert f"auto backend  {'cpu' if expected['software'] else 'webgpu'} " in out
    code, out, _ = run(capsys, "info", "--gpu", "any", "--json")
    data = json.loads(out)["webgpu"]
    assert data["limits"]["max_storage_binding"] == expected["limits"]["max_storage_binding"]
    assert data["backend"] == expected["backend"]


def test_info_gpu_auto_refuses_software_adapter_in_one_line(capsys):
    dev = open_test_device()
    code, out, err = run(capsys, "info", "--gpu", "auto")
    if dev.info()["software"]:
        assert code == ExitCode.MODEL  # as `run --backend webgpu` without an adapter; it was 1, a bug's code
        lines = [line for line in err.splitlines() if line.startswith("strata:")]
        assert len(lines) == 1 and "no GPU adapter" in lines[0] and "install" in lines[0]
        assert "Traceback" not in err
    else:
        assert code == 0


def test_info_needs_model_or_gpu(capsys):
    code, _, err = run(capsys, "info")
    assert code != 0 and "needs a MODEL" in err


def test_info_gpu_bad_choice(capsys):
    code, _, err = run(capsys, "info", "--gpu", "nvidia")
    assert code == ExitCode.USAGE and "unknown adapter choice 'nvidia'" in err and err.count("\n") == 1


def _run_tokens(capsys, *extra):
    code, out, err = run(capsys, "run", "-m", "strata-tiny", "--prompt", "def add(a, b):", "--max-new", "6",
                         "--json", *extra)
    assert code == 0, err
    return json.loads(out)["tokens"]


def test_run_backend_webgpu_greedy_tokens_match_cpu_and_drafting_is_lossless(capsys):
    open_test_device()
    cpu = _run_tokens(capsys, "--backend", "cpu")
    assert _run_tokens(capsys, "--backend", "webgpu") == cpu
    assert _run_tokens(capsys, "--backend", "webgpu", "--draft", "none") == cpu


def test_backend_auto_takes_webgpu_only_on_a_real_gpu():
    from strata.webgpu import resolve_backend

    dev = open_test_device()
    assert resolve_backend("auto") == ("cpu" if dev.info()["software"] else "webgpu")
    assert resolve_backend("cpu") == "cpu" and resolve_backend("webgpu") == "webgpu"


def test_run_rejects_unknown_backend(capsys):
    code, _, err = run(capsys, "run", "-m", "strata-tiny", "--prompt", "x", "--backend", "metal")
    assert code != 0 and "--backend must be cpu or webgpu or auto, not 'metal'" in err


def test_backend_webgpu_without_a_usable_adapter_is_one_line(capsys, monkeypatch):
    dev = open_test_device()
    if not dev.info()["software"]:
        pytest.skip("this machine has a real GPU: the forced 'auto' adapter choice would succeed")
    monkeypatch.setenv("STRATA_WEBGPU_ADAPTER", "auto")  # a real GPU only: none here
    code, _, err = run(capsys, "run", "-m", "strata-tiny", "--prompt", "x", "--max-new", "1", "--backend", "webgpu")
    lines = [line for line in err.splitlines() if line.startswith("strata:")]
    assert code != 0 and len(lines) == 1
    assert "--backend webgpu: webgpu: no GPU adapter" in lines[0] and "internal error" not in lines[0]


def _bad_setting_line(capsys, monkeypatch, name, value):
    """`strata run --backend webgpu` with the environment variable `name` set to `value`: it must
    fail with exactly one `strata:` line, which is returned, and exit 2 (bad input; it was 1,
    the code of a bug)."""
    open_test_device()
    monkeypatch.setenv(name, value)
    code, _, err = run(capsys, "run", "-m", "strata-tiny", "--prompt", "x", "--max-new", "1", "--backend", "webgpu")
    lines = [line for line in err.splitlines() if line.startswith("strata:")]
    assert code == ExitCode.USAGE and len(lines) == 1
    return lines[0]


def test_unknown_row_loop_choice_is_one_line_not_an_internal_error(capsys, monkeypatch):
    line = _bad_setting_line(capsys, monkeypatch, "STRATA_WEBGPU_XLOAD", "bogus")
    assert "STRATA_WEBGPU_XLOAD='bogus': use one of lanes, lanes4, direct, staged" in line
    assert "internal error" not in line


def test_unknown_quant_fold_choice_is_one_line_not_silently_off(capsys, monkeypatch):
    """STRATA_WEBGPU_QUANT_FOLD takes 0 or 1 (unset: the K-quant formats); another value was read
    as 'off' without a word."""
    line = _bad_setting_line(capsys, monkeypatch, "STRATA_WEBGPU_QUANT_FOLD", "yes")
    assert "STRATA_WEBGPU_QUANT_FOLD='yes': use 0 or 1" in line


@pytest.mark.parametrize("name,value,says", [
    ("STRATA_WEBGPU_ROW_SPLIT", "on", "use 0 or 1"),
    ("STRATA_WEBGPU_FOLD", "gate,yes", "use 0, 1 or a comma list of swiglu,moe_norm,"),
    ("STRATA_WEBGPU_REPEAT", "add_rmsnorm:99", "use a comma list of kernel entry points"),
    ("STRATA_WEBGPU_NORM_WG", "300", "use 64, 128, 256, 512 or 1024"),
])
def test_an_unknown_setting_is_one_line(capsys, monkeypatch, name, value, says):
    line = _bad_setting_line(capsys, monkeypatch, name, value)
    assert f"{name}={value!r}: {says}" in line
    assert "internal error" not in line


@pytest.mark.parametrize("value", ["0", "soon", "-3", "5000"])
def test_bad_early_first_is_one_line(capsys, monkeypatch, value):
    """STRATA_WEBGPU_EARLY_FIRST takes a dispatch count from 1 to 4096 (unset: 48)."""
    line = _bad_setting_line(capsys, monkeypatch, "STRATA_WEBGPU_EARLY_FIRST", value)
    assert f"STRATA_WEBGPU_EARLY_FIRST={value!r}: use a whole number of dispatches from 1 to 4096" in line


def test_unknown_adapter_variable_is_one_usage_line(capsys, monkeypatch):
    line = _bad_setting_line(capsys, monkeypatch, "STRATA_WEBGPU_ADAPTER", "gpu0")
    assert "STRATA_WEBGPU_ADAPTER='gpu0': use one of auto, software, any" in line
