"""`strata convert SRC DST`: a Hugging Face MoE checkpoint folder becomes a strata pack."""
from __future__ import annotations

import sys
import time

import typer

from . import ExitCode, app, debug_enabled, fail


class _Progress:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.t0 = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and done < total:
            return
        self.last = now
        frac = done / total if total else 1.0
        rate = done / max(now - self.t0, 1e-6) / (1 << 20)
        bar = "#" * int(frac * 30)
        sys.stderr.write(f"\rconverting [{bar:<30}] {frac * 100:5.1f}%  {rate:7.1f} MiB/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()


@app.command("convert")
def convert(
    src: str = typer.Argument(..., help="Hugging Face checkpoint folder (config.json + *.safetensors)."),
    dst: str = typer.Argument(..., help="Folder to create: the strata pack."),
    force: bool = typer.Option(False, "--force", help="Replace DST if it already exists."),
) -> None:
    """Convert a checkpoint into a strata pack: dense weights in one file, experts as aligned,
    checksummed blobs (one read per expert). Atomic: an interrupted run leaves no pack behind."""
    from ..errors import ModelError, UsageError
    from ..pack.converter import convert as convert_pack
    from ..telemetry import human_bytes

    progress = _Progress(sys.stderr.isatty())
    try:
        header = convert_pack(src, dst, progress=progress, force=force)
    except UsageError as e:
        progress.close()
        raise fail(str(e), ExitCode.USAGE) from None
    except ModelError as e:
        progress.close()
        raise fail(str(e), ExitCode.MODEL) from None
    except OSError as e:
        progress.close()
        if debug_enabled():
            raise
        raise fail(f"{e.filename or dst}: {e.strerror or e}", ExitCode.IO) from None
    progress.close()
    ex = header["experts"]
    print(f"wrote {dst}: {ex['num_layers']} MoE layers x {ex['num_experts']} experts "
          f"({ex['dtype']}, {human_bytes(ex['stride'])} each, {human_bytes(ex['bytes'])} of experts), "
          f"{header['dense']['tensors']} dense tensors ({human_bytes(header['dense']['bytes'])})")
