"""WebGPU device discovery: where wgpu-native and the WGSL kernels live, and opening a device.

The C++ engine compiles against the headers of the pinned `wgpu` wheel and loads the library
that wheel ships (wgpu/resources/libwgpu_native-release.so) at run time. This module only finds
the files; it never imports wgpu's Python API.
"""
from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

from .errors import StrataError, UsageError

ADAPTER_CHOICES = ("auto", "software", "any")
# STRATA_WEBGPU_XLOAD: the half-precision matmuls' row loop (engine_ext/webgpu/kernels.cpp)
ROW_LOOPS = ("lanes", "lanes4", "direct", "staged")
# STRATA_WEBGPU_FOLD's names, one per fold of an element-wise op into the kernel that reads it
# (WebGpuBackend::kFoldNames; the test of the one-line error checks both lists agree)
FOLDS = ("swiglu", "moe_norm", "qk_norm", "gate", "gdn", "conv_gdn")


def _library_name() -> str:
    if sys.platform == "darwin":
        return "libwgpu_native-release.dylib"
    if sys.platform == "win32":
        return "wgpu_native-release.dll"
    return "libwgpu_native-release.so"


def library_path() -> Path:
    """The wgpu-native library of the installed `wgpu` wheel (STRATA_WGPU_LIBRARY overrides)."""
    override = os.environ.get("STRATA_WGPU_LIBRARY")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("wgpu")
    if spec is None or spec.origin is None:
        raise StrataError("webgpu: the wgpu package is not installed (pip install wgpu==0.32.0)")
    path = Path(spec.origin).parent / "resources" / _library_name()
    if not path.exists():
        raise StrataError(f"webgpu: {path} is missing (reinstall the wheel: pip install --force-reinstall wgpu==0.32.0)")
    return path


def shader_dir() -> Path:
    """shaders/ inside the installed package, or the source checkout's shaders/ in a dev tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "shaders", here.parent.parent / "shaders"):
        if any(candidate.glob("*.wgsl")):
            return candidate
    raise StrataError(f"webgpu: no WGSL kernels found next to {here} (strata installed without shaders/)")


def _quiet_mesa() -> None:
    # Mesa's Vulkan drivers print "XDG_RUNTIME_DIR is invalid or not set" on every adapter
    # enumeration when the variable is missing (containers, CI, ssh sessions); give them a
    # private folder, as a login session would, so nothing reaches the user's terminal.
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"strata-runtime-{os.getuid()}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return
    import stat

    # only a real folder of our own that nobody else may enter (never one another user made)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o077:
        os.environ["XDG_RUNTIME_DIR"] = path


def native_module():
    """strata._engine.webgpu, or a StrataError when this build has no WebGPU backend."""
    _quiet_mesa()
    from . import _engine

    mod = getattr(_engine, "webgpu", None)
    if mod is None:
        raise StrataError("webgpu: this strata build has no WebGPU backend (rebuild with -DSTRATA_WEBGPU=ON)")
    return mod


def open_device(adapter: str = "auto", max_chunk_bytes: int = 0):
    """Open a WebGPU device. adapter: auto (a real GPU, never a software one), software
    (lavapipe/llvmpipe only), any (a GPU if present, else software)."""
    if adapter not in ADAPTER_CHOICES:
        raise StrataError(f"webgpu: unknown adapter choice {adapter!r} (one of {', '.join(ADAPTER_CHOICES)})")
    mod = native_module()
    try:
        return mod.Device(str(library_path()), str(shader_dir()), adapter, max_chunk_bytes)
    except RuntimeError as exc:
        raise StrataError(str(exc)) from None


def backend_adapter() -> str:
    """The adapter `--backend webgpu` opens: STRATA_WEBGPU_ADAPTER, else any (the user asked for
    WebGPU explicitly, so a software adapter is acceptable there; `--backend auto` is not)."""
    choice = os.environ.get("STRATA_WEBGPU_ADAPTER", "any")
    if choice not in ADAPTER_CHOICES:
        raise UsageError(f"STRATA_WEBGPU_ADAPTER={choice!r}: use one of {', '.join(ADAPTER_CHOICES)}")
    return choice


def backend_config() -> tuple[str, str, str]:
    """(library, shader folder, adapter choice) for the engine's webgpu backend factory; the row
    loop the backend reads from STRATA_WEBGPU_XLOAD, STRATA_WEBGPU_QUANT_FOLD,
    STRATA_WEBGPU_ROW_SPLIT, STRATA_WEBGPU_FOLD, STRATA_WEBGPU_EARLY_FIRST, STRATA_WEBGPU_NORM_WG
    and STRATA_WEBGPU_REPEAT (a timing tool) are checked here, as the adapter choice is."""
    xload = os.environ.get("STRATA_WEBGPU_XLOAD", "")
    if xload and xload not in ROW_LOOPS:
        raise UsageError(f"STRATA_WEBGPU_XLOAD={xload!r}: use one of {', '.join(ROW_LOOPS)}")
    fold = os.environ.get("STRATA_WEBGPU_QUANT_FOLD")
    if fold is not None and fold not in ("0", "1"):
        raise UsageError(
            f"STRATA_WEBGPU_QUANT_FOLD={fold!r}: use 0 or 1 (unset: the K-quant formats fold, the others do not)"
        )
    split = os.environ.get("STRATA_WEBGPU_ROW_SPLIT")
    if split and split not in ("0", "1"):
        raise UsageError(f"STRATA_WEBGPU_ROW_SPLIT={split!r}: use 0 or 1 (unset: 1, narrow matmuls split their window rows)")
    fold_ew = os.environ.get("STRATA_WEBGPU_FOLD")
    if fold_ew and fold_ew not in ("0", "1") and not set(fold_ew.split(",")) <= set(FOLDS):
        raise UsageError(
            f"STRATA_WEBGPU_FOLD={fold_ew!r}: use 0, 1 or a comma list of {','.join(FOLDS)} (unset: none; 1: every fold)"
        )
    early = os.environ.get("STRATA_WEBGPU_EARLY_FIRST")
    if early and not (early.isdigit() and 1 <= int(early) <= 4096):
        raise UsageError(f"STRATA_WEBGPU_EARLY_FIRST={early!r}: use a whole number of dispatches from 1 to 4096 (unset: 48)")
    norm_wg = os.environ.get("STRATA_WEBGPU_NORM_WG")
    if norm_wg and norm_wg not in ("64", "128", "256", "512", "1024"):
        raise UsageError(f"STRATA_WEBGPU_NORM_WG={norm_wg!r}: use 64, 128, 256, 512 or 1024 (unset: 256)")
    repeat = os.environ.get("STRATA_WEBGPU_REPEAT")
    if repeat and not all(re.fullmatch(r"[a-z0-9_]+(:([2-9]|[1-5][0-9]|6[0-4]))?", item) for item in repeat.split(",")):
        raise UsageError(f"STRATA_WEBGPU_REPEAT={repeat!r}: use a comma list of kernel entry points, each with an "
                         "optional :N (2 to 64 times; default 2), e.g. add_rmsnorm,router_topk:3")
    return str(library_path()), str(shader_dir()), backend_adapter()


BACKENDS = ("cpu", "webgpu", "auto")


def resolve_backend(name: str | None) -> str:
    """The engine backend for a --backend value: cpu; webgpu (this build must have it); auto =
    webgpu when a real GPU adapter opens, else cpu (auto never runs on a software adapter)."""
    choice = (name or "cpu").strip().lower()
    if choice not in BACKENDS:
        raise StrataError(f"unknown backend {name!r} (use {', '.join(BACKENDS)})")
    if choice == "cpu":
        return "cpu"
    if choice == "webgpu":
        native_module()
        return "webgpu"
    try:
        open_device("auto")
    except StrataError:
        return "cpu"
    return "webgpu"


def describe(adapter: str = "auto") -> dict:
    """Adapter, driver and limits of the device `adapter` would open (for `strata info`)."""
    return open_device(adapter).info()
