"""`strata info MODEL`: a model's metadata (config, tensors, size, pack IO) without loading it."""
from __future__ import annotations

import typer

from ..telemetry import human_bytes
from . import app, common
from .common import JsonOpt


@app.command(short_help="Show a model's metadata without loading it.")
def info(model: str = typer.Argument(..., metavar="MODEL", help="Model folder, pack, or bundled alias."),
         as_json: bool = JsonOpt) -> None:
    """Show a model's metadata (config, tensors, size) without loading it."""
    from ..runtime import model_info

    data = model_info(model)
    if as_json:
        common.print_json(data)
        return
    p = data.get("params") or 0
    print(f"{data['path']}")
    print(f"  format        {data['format']}")
    print(f"  type          {data.get('model_type')}")
    print(f"  layers        {data.get('layers')}" + (f"  {data['layer_types']}" if data.get("layer_types") else ""))
    print(f"  experts       {data.get('experts')} (top-{data.get('experts_per_token')})")
    print(f"  params        {p:,} ({p / 1e9:.2f} B)" if p >= 1e9 else f"  params        {p:,} ({p / 1e6:.1f} M)")
    print(f"  dtype         {data.get('dtype')}")
    print(f"  size on disk  {human_bytes(data.get('size_on_disk') or 0)}")
    io = data.get("pack_io")
    if io:  # what decides a pack's IO (see docs/streaming.md)
        print(f"  experts file  {io['experts_file']}: {io['moe_layers']} MoE layers x {io['experts_per_layer']} "
              f"experts, one {io['expert_dtype']} blob of {human_bytes(io['blob_bytes'])} each "
              f"(stride {human_bytes(io['blob_stride'])}), {human_bytes(data.get('expert_bytes') or 0)} in all")
        print(f"  dense file    {io['dense_file']}: {human_bytes(io['dense_bytes'])} (always resident)")
        print(f"  per layer     all experts {human_bytes(io['layer_bytes'])}; "
              f"one token's top-{data.get('experts_per_token')} {human_bytes(io['topk_bytes_per_layer'])}")
        direct = {True: "yes (--io-mode direct reads around the page cache)",
                  False: "no, this file system refuses it (--io-mode direct falls back to buffered "
                         "reads plus a drop-cache hint)",
                  None: "unknown"}[io["direct_io"]]
        print(f"  O_DIRECT      {direct}")
