"""GGUF model -> engine: the spec and tensor table from the file's metadata, the tensor bytes
mapped by the engine in place (block formats stay as they are stored)."""
from __future__ import annotations

import os

from .arch import spec_from_metadata
from .names import canonical_tensors
from .reader import GGUFModel, open_gguf


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
    from ..model import model_id_of, new_engine  # noqa: PLC0415 - shared with the HF loader

    model = open_gguf(path)
    spec = spec_from_metadata(model)
    table = canonical_tensors(model, spec)
    rows = [(name, t.path, t.offset, t.type, list(t.shape)) for name, t in table.items()]
    return new_engine(spec, rows, None, threads=threads, fold=fold, ctx=ctx,
                      model_id=model_id_of(spec, table, fmt="type"), config=engine_config(model, spec),
                      backend=backend)
