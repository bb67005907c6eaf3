"""strata packs: a Hugging Face MoE checkpoint rearranged for streaming.

A pack is a folder:

    strata-pack.json     small versioned header (layout, dtypes, source identity)
    dense.safetensors    every tensor that stays resident (embeddings, mixers, routers, ...)
    experts.bin          page 0..: a binary header + CRC32 table; then one 4 KiB-aligned blob
                         per (MoE layer, expert) holding gate | up | down, so one read brings one
                         expert
    config.json, tokenizer files, chat template: copied from the source folder

One module per job: `format` (names, header, reading a pack), `converter` (writing one),
`options` (parsers of --expert-cache / --io-mode / --eviction / --routing) and `loader` (a pack
into an engine). Which loader a model path needs is decided by `strata.loader`, not here.
The names below are re-exported lazily, so `import strata.pack.options` stays light.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "format": ("PACK_FORMAT", "PACK_VERSION", "HEADER_NAME", "DENSE_NAME", "EXPERTS_NAME", "ALIGN",
               "EXPERTS_MAGIC", "PackInfo", "is_pack", "read_pack", "pack_tensor_table",
               "check_pack_matches", "config_digest"),
    "converter": ("convert", "write_synthetic_pack", "find_experts", "ExpertLayout", "source_identity"),
    "options": ("IO_MODES", "EVICTIONS", "parse_cache_size", "parse_routing", "routing_is_approximate"),
    "loader": ("load_pack", "open_expert_store"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'strata.pack' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
