"""`strata convert SRC DST`: a Hugging Face MoE checkpoint folder or a .gguf file becomes a strata pack."""
from __future__ import annotations

import os
from typing import Optional

import typer

from .. import diagnostics
from ..telemetry import plural

from . import ExitCode, app, debug_enabled, fail


@app.command("convert", short_help="Convert a checkpoint into a strata pack.")
def convert(
    src: str = typer.Argument(..., metavar="SRC", help="Hugging Face checkpoint folder (config.json + *.safetensors), a .gguf file, or a bundled alias (strata-tiny)."),
    dst: str = typer.Argument(..., metavar="DST", help="Folder to create: the strata pack."),
    force: bool = typer.Option(False, "--force", help="Replace DST if it is a strata pack (or an empty folder)."),
    quantize: Optional[str] = typer.Option(None, "--quantize", metavar="FORMAT",
                                           help="Store the experts of a checkpoint as q8_0, q4_k, q5_k or q6_k blocks (ggml's reference rounding)."),
) -> None:
    """Convert a checkpoint into a strata pack: dense weights in one file, experts as aligned,
    checksummed blobs (one read per expert). A .gguf file keeps its blocks as they are (F16 experts become F32). Atomic: an interrupted run leaves no pack behind."""
    from ..errors import ModelError, UsageError
    from ..models import ALIASES, resolve_model
    from ..pack.converter import convert as convert_pack
    from ..telemetry import human_bytes

    if src in ALIASES and not os.path.exists(src):  # as --model takes it; a path of that name wins
        try:
            src = str(resolve_model(src))
        except ModelError as e:
            raise fail(str(e), ExitCode.MODEL) from None
    progress = diagnostics.ProgressBar("converting")
    try:
        header = convert_pack(src, dst, progress=progress, force=force, quantize=quantize)
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
    print(f"wrote {dst}: {plural(ex['num_layers'], 'MoE layer')} x {plural(ex['num_experts'], 'expert')} "
          f"({ex['dtype']}, {human_bytes(ex['stride'])} each, {human_bytes(ex['bytes'])} of experts), "
          f"{plural(header['dense']['tensors'], 'dense tensor')} ({human_bytes(header['dense']['bytes'])})")
