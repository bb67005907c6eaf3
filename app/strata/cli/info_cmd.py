"""`strata info MODEL`: a model's metadata (config, tensors, size, pack IO) without loading it."""
from __future__ import annotations

from typing import Optional

import typer

from ..telemetry import human_bytes
from . import app, common
from .common import JsonOpt
from ..errors import UsageError


@app.command(short_help="Show a model's metadata without loading it.")
def info(
    model: Optional[str] = typer.Argument(None, metavar="MODEL", help="Model folder, pack, .gguf file, or bundled alias."),
    as_json: bool = JsonOpt,
    gpu: Optional[str] = typer.Option(None, "--gpu", metavar="auto|software|any",
                                      help="Also show the WebGPU adapter and its limits: auto (a real "
                                           "GPU), software (lavapipe) or any."),
) -> None:
    """Show a model's metadata (config, tensors, size) without loading it; --gpu: the WebGPU adapter."""
    from ..runtime import model_info

    if model is None and gpu is None:
        raise UsageError("strata info needs a MODEL (or --gpu auto|software|any for the WebGPU adapter)")
    gpu_data = None
    if gpu is not None:
        from ..errors import ModelError, StrataError
        from ..webgpu import ADAPTER_CHOICES
        from .gpu_info import gpu_info

        if gpu not in ADAPTER_CHOICES:
            raise UsageError(f"--gpu: unknown adapter choice {gpu!r} (one of {', '.join(ADAPTER_CHOICES)})")
        try:
            gpu_data = gpu_info(gpu)
        except UsageError:
            raise
        except StrataError as exc:  # no adapter, no driver, no WebGPU in this build: exit 3 as --backend webgpu
            raise ModelError(str(exc)) from None
    data = model_info(model) if model is not None else None
    if as_json:
        common.print_json({**(data or {}), "webgpu": gpu_data} if gpu_data is not None else data)
        return
    if gpu_data is not None:
        from .gpu_info import print_gpu_info

        print_gpu_info(gpu_data, human_bytes)
    if data is None:
        return
    p = data.get("params") or 0
    print(f"{data['path']}")
    print(f"  format        {data['format']}")
    print(f"  type          {data.get('model_type')}")
    kinds = ", ".join(f"{n} {kind}" for kind, n in (data.get("layer_types") or {}).items())
    print(f"  layers        {data.get('layers')}" + (f" ({kinds})" if kinds else ""))
    print(f"  experts       {data.get('experts')} (top-{data.get('experts_per_token')})")
    print(f"  params        {p:,} ({p / 1e9:.2f} B)" if p >= 1e9 else f"  params        {p:,} ({p / 1e6:.1f} M)")
    print(f"  dtype         {data.get('dtype')}")
    print(f"  size on disk  {human_bytes(data.get('size_on_disk') or 0)}")
    if data.get("formats"):  # GGUF files: the weight formats and what one token reads
        print("  formats       " + ", ".join(f"{k} {human_bytes(v)}" for k, v in data["formats"].items()))
        print(f"  per token     {human_bytes(data['bytes_per_token'])} of weights "
              f"(dense + top-{data.get('experts_per_token')} experts)")
    io = data.get("pack_io")
    if io:  # what decides a pack's IO (see docs/streaming.md)
        print(f"  experts file  {io['experts_file']}: {io['moe_layers']} MoE layers x {io['experts_per_layer']} "
              f"experts, one {io['expert_dtype']} blob of {human_bytes(io['blob_bytes'])} each "
              f"(stride {human_bytes(io['blob_stride'])}), {human_bytes(data.get('expert_bytes') or 0)} in all")
        print(f"  dense file    {io['dense_file']}: {human_bytes(io['dense_bytes'])} (always resident)")
        print("  expert mix    " + ", ".join(f"{k} {human_bytes(v)}" for k, v in io["expert_formats"].items()) +
              f"; a token's experts {human_bytes(io['expert_bytes_per_token'])} when none is cached")
        print(f"  per layer     all experts {human_bytes(io['layer_bytes'])}; "
              f"one token's top-{data.get('experts_per_token')} {human_bytes(io['topk_bytes_per_layer'])}")
        direct = {True: "yes (--io-mode direct reads around the page cache)",
                  False: "no, this file system refuses it (--io-mode direct falls back to buffered "
                         "reads plus a drop-cache hint)",
                  None: "unknown"}[io["direct_io"]]
        print(f"  O_DIRECT      {direct}")
