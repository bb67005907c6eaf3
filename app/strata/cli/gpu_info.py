"""`strata info --gpu`: the WebGPU adapter the webgpu backend would use, and its limits."""
from __future__ import annotations

from typing import Any


def gpu_info(adapter: str) -> dict[str, Any]:
    from ..webgpu import describe, resolve_backend

    data = describe(adapter)
    data["auto_backend"] = "webgpu" if not data["software"] else resolve_backend("auto")
    return data


def print_gpu_info(data: dict[str, Any], human) -> None:
    lim = data["limits"]
    kind = "software (not used by --backend auto)" if data["software"] else data["adapter_type"]
    print("webgpu")
    print(f"  adapter       {data['device']} [{kind}]")
    print(f"  driver        {data['driver'] or '-'} via {data['backend']}")
    print(f"  wgpu-native   {data['wgpu_native']} ({data['library']})")
    print(f"  binding max   {human(lim['max_storage_binding'])}; weights in chunks of {human(lim['chunk_bytes'])}")
    print(f"  buffer max    {human(lim['max_buffer'])}; workgroup storage {human(lim['max_workgroup_storage'])}, "
          f"{lim['max_invocations_per_workgroup']} invocations")
    print(f"  auto backend  {data['auto_backend']} (what --backend auto runs on)")
