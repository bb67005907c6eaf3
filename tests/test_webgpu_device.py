"""The WebGPU device layer: library loading and version check, adapter choice (auto never
takes a software adapter), limits and weight chunking, the WGSL preprocessor, shipped shaders."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from strata import StrataError
from webgpu_helpers import open_test_device

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def native():
    from strata import webgpu

    try:
        return webgpu.native_module()
    except StrataError as exc:
        pytest.skip(f"no WebGPU in this build: {exc}")


def test_preprocessor_substitutes_defines_and_drops_naga_only_directives(native):
    src = "enable subgroups;\nenable f16;\n@workgroup_size({{WG}}) fn f() {}\n"
    naga = native.preprocess_wgsl(src, {"WG": "64"}, "naga")
    dawn = native.preprocess_wgsl(src, {"WG": "64"}, "dawn")
    assert "@workgroup_size(64)" in naga and "@workgroup_size(64)" in dawn
    assert "\nenable f16;" in naga
    assert not any(line.strip() == "enable subgroups;" for line in naga.splitlines())
    assert dawn.startswith("enable subgroups;")


def test_preprocessor_names_a_missing_define(native):
    with pytest.raises(RuntimeError, match=r"no value for placeholder \{\{TB\}\}"):
        native.preprocess_wgsl("const TB = {{TB}}u;", {}, "naga")
    with pytest.raises(RuntimeError, match="unterminated"):
        native.preprocess_wgsl("const TB = {{TB", {"TB": "8"}, "naga")


def test_preprocessor_includes_files_with_their_placeholders(native):
    files = {"rows.wgsl": "const TB = {{TB}}u;\n{{include inner.wgsl}}", "inner.wgsl": "fn f() -> u32 { return {{WG}}u; }",
             "other.wgsl": "// other"}
    out = native.preprocess_wgsl("{{include rows.wgsl}}\nfn g() {}", {"TB": "8", "WG": "64"}, "naga", files)
    assert "const TB = 8u;" in out and "return 64u;" in out and out.rstrip().endswith("fn g() {}")
    # an include named by a define takes the file that define names
    out = native.preprocess_wgsl("{{include ROWS}}", {"ROWS": "other.wgsl"}, "naga", files)
    assert out.strip() == "// other"
    with pytest.raises(RuntimeError, match="cannot read shader missing.wgsl"):
        native.preprocess_wgsl("{{include missing.wgsl}}", {}, "naga", files)
    with pytest.raises(RuntimeError, match="bad include name"):
        native.preprocess_wgsl("{{include ../x.wgsl}}", {}, "naga", files)
    with pytest.raises(RuntimeError, match="nested deeper"):
        native.preprocess_wgsl("{{include loop.wgsl}}", {}, "naga", {"loop.wgsl": "{{include loop.wgsl}}"})
    with pytest.raises(RuntimeError, match="no include reader"):
        native.preprocess_wgsl("{{include rows.wgsl}}", {"TB": "8"}, "naga")


def test_matmul_kernels_share_one_row_loop():
    # matmul.wgsl and matmul_gathered.wgsl compute rows only through the included rows_dot
    # (bit-identical by construction), and the three row files define it with one signature
    from strata import webgpu

    root = webgpu.shader_dir()
    for name in ("matmul.wgsl", "matmul_gathered.wgsl"):
        text = (root / name).read_text()
        assert "{{include ROWS}}" in text and "fn rows_dot" not in text and "dot(w_lo" not in text
    sig = "fn rows_dot(lid: u32, buf: u32, base: u32, quads: u32, nr: u32, x0: u32, xs: u32, nt: u32, xv: u32)"
    for name in ("matmul_rows.wgsl", "matmul_rows_direct.wgsl", "matmul_rows_lanes.wgsl", "matmul_rows_lanes4.wgsl"):
        assert sig in (root / name).read_text()


def test_missing_library_is_one_line_error(native, tmp_path):
    # a fresh process: the library table is loaded once per process
    code = (
        "import strata.webgpu as w\n"
        "try:\n    w.open_device('any')\n"
        "except Exception as e:\n    print(type(e).__name__, '|', e)\n"
    )
    env = {**__import__("os").environ, "STRATA_WGPU_LIBRARY": str(tmp_path / "libnothing.so")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    line = out.stdout.strip()
    assert line.startswith("StrataError | cannot load wgpu-native library"), out.stdout + out.stderr
    assert "pip install wgpu==0.32.0" in line and "\n" not in line


def test_library_version_is_checked(native):
    from strata import webgpu

    assert native.library_version(str(webgpu.library_path())).startswith("29.0.")


def test_unknown_adapter_choice(native):
    from strata import webgpu

    with pytest.raises(StrataError, match="unknown adapter choice 'gpu0'"):
        webgpu.open_device("gpu0")


def test_auto_never_takes_a_software_adapter(native):
    from strata import webgpu

    try:
        dev = webgpu.open_device("auto")
    except StrataError as exc:
        msg = str(exc)
        assert "\n" not in msg
        assert "no GPU adapter" in msg or "no adapter found" in msg
        assert "install" in msg  # says what to install
    else:
        assert dev.info()["software"] is False


def test_info_reports_adapter_and_limits():
    dev = open_test_device()
    info = dev.info()
    assert info["backend"] in ("vulkan", "metal", "d3d12")
    assert info["device"]
    assert info["wgpu_native"].startswith("29.0.")
    lim = info["limits"]
    assert lim["max_storage_binding"] >= 128 << 20  # the WebGPU default, lavapipe's value
    assert lim["chunk_bytes"] == min(lim["max_storage_binding"], lim["max_buffer"], 1 << 30) // 256 * 256


def test_software_choice_finds_lavapipe_when_installed():
    dev = open_test_device()
    if not dev.info()["software"]:
        pytest.skip("this machine's adapter is a real GPU")
    from strata import webgpu

    assert webgpu.open_device("software").info()["adapter_type"] == "cpu"


def test_chunk_limit_override():
    dev = open_test_device(max_chunk_bytes=1000)
    assert dev.info()["limits"]["chunk_bytes"] == 768  # rounded down to 256 bytes
    w = np.arange(40 * 16, dtype=np.float32).reshape(40, 16)  # 64 bytes a row: 12 rows a chunk
    y, chunks = dev.matmul(np.ones((1, 16), np.float32), w, "f32")
    assert chunks == 4
    np.testing.assert_array_equal(y[0], w.sum(1))


def test_every_shader_is_one_op_family_with_a_fixed_workgroup():
    shaders = sorted((ROOT / "shaders").glob("*.wgsl"))
    assert {p.stem for p in shaders} >= {
        "matmul", "norm", "rotary", "embedding", "elementwise", "router", "kv_cache", "attention", "gdn", "conv",
    }
    for p in shaders:
        text = p.read_text()
        for line in text.splitlines():
            if "@workgroup_size(" in line:
                # gdn.wgsl: one thread per state column, no cross-thread sum, a size of its own;
                # gdn_fused.wgsl and gdn_conv_fused.wgsl run gdn_step's workgroups (inputs computed in them)
                own = p.name in ("gdn.wgsl", "gdn_fused.wgsl", "gdn_conv_fused.wgsl")
                fixed = "@workgroup_size({{CWG}})" if own else "@workgroup_size({{WG}})"
                assert fixed in line, f"{p.name}: {line.strip()}"
