"""GGUF model -> engine: the spec and tensor table from the file's metadata, the tensor bytes
mapped by the engine in place (block formats stay as they are stored)."""
from __future__ import annotations

import hashlib
import json
import os

from .arch import spec_from_metadata
from .names import canonical_tensors
from .reader import GGUFModel, open_gguf


def model_id_of(spec: dict, table: dict) -> str:
    """Stable identity: the spec and the names/formats/shapes of the dense tensors."""
    h = hashlib.sha256()
    h.update(json.dumps({k: spec[k] for k in sorted(spec)}, sort_keys=True).encode())
    for name in sorted(table):
        if ".mlp.experts." in name:
            continue
        t = table[name]
        h.update(f"{name}|{t.type}|{','.join(map(str, t.shape))};".encode())
    return h.hexdigest()[:16]


def engine_config(model: GGUFModel, spec: dict) -> dict:
    """What the front ends read from engine.config: the spec plus the ids a generation ends on."""
    cfg = dict(spec)
    eos = [model.get(k) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")]
    cfg["hf_config"] = {"eos_token_id": [int(i) for i in eos if isinstance(i, int) and not isinstance(i, bool)],
                        "gguf_file": os.path.basename(model.path)}
    cfg["formats"] = sorted({t.type for t in model.tensors.values()})
    return cfg


def load_gguf(path, *, threads: int | None = None, fold: str = "eager", ctx: int | None = None,
              backend: str = "cpu"):
    """An engine over a .gguf file (or split set); every expert resident (mapped)."""
    from ..model import _default_threads, _engine_module  # noqa: PLC0415 - shared with the HF loader

    if fold not in ("eager", "lazy"):
        raise ValueError(f"fold must be 'eager' or 'lazy', not {fold!r}")
    model = open_gguf(path)
    spec = spec_from_metadata(model)
    table = canonical_tensors(model, spec)
    rows = [(name, t.path, t.offset, t.type, list(t.shape)) for name, t in table.items()]
    return _engine_module().Engine(
        spec, rows, None, threads=int(threads or _default_threads()), fold=fold, ctx=int(ctx or 0),
        model_id=model_id_of(spec, table), config_json=json.dumps(engine_config(model, spec)), backend=backend,
    )
