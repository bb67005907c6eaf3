"""Loading checkpoints into the C++ engine.

    eng = strata.load("path/to/hf-folder")      # config.json + *.safetensors
    logits = eng.run(tokens)                     # (T, vocab) float32
    eng.commit(keep)

``build_engine`` is the lower-level entry the pack loader uses: a spec, a tensor table and
optionally an ExpertStore object created by ``strata._engine``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Iterable, Sequence

from . import config as _config
from .errors import ModelError
from .safetensors_io import ENGINE_DTYPES, TensorInfo, checkpoint_files, read_header

__all__ = ["load", "build_engine", "canonical_name", "model_id_of", "tensor_table"]

_PREFIXES = ("model.language_model.", "language_model.model.", "model.")
_SKIP = re.compile(r"^(model\.)?(visual|vision_tower|mtp|vision_model)\.|^mtp\.")
_STACKED = re.compile(r"^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj|gate_proj|up_proj)(\.weight)?$")


def canonical_name(name: str) -> str | None:
    """HF tensor name -> engine name (``layers.N...``, ``embed_tokens.weight``...), None if not text weights."""
    if _SKIP.match(name):
        return None
    if name == "lm_head.weight":
        return name
    for p in _PREFIXES:
        if name.startswith(p):
            return name[len(p):]
    return name


def _engine_module():
    from . import _engine  # noqa: PLC0415 (the native module, built by scikit-build-core)

    return _engine


def _split_stacked(spec: dict, info: TensorInfo, layer: int, kind: str) -> list[tuple[str, TensorInfo]]:
    """Per-expert views into a stacked [E, ...] expert tensor (no copy: offsets into the file)."""
    E, H, I = spec["num_experts"], spec["hidden_size"], spec["moe_intermediate_size"]
    expect = {"gate_up_proj": (E, 2 * I, H), "down_proj": (E, H, I), "gate_proj": (E, I, H), "up_proj": (E, I, H)}[kind]
    if tuple(info.shape) != expect:
        raise ModelError(f"{info.path}: tensor {info.name} has shape {list(info.shape)}, expected {list(expect)}")
    per = info.nbytes // E
    out = []
    for e in range(E):
        base = info.offset + e * per
        p = f"layers.{layer}.mlp.experts.{e}."
        if kind == "gate_up_proj":
            half = per // 2
            out.append((p + "gate_proj.weight", TensorInfo(info.name, info.path, base, info.dtype, (I, H))))
            out.append((p + "up_proj.weight", TensorInfo(info.name, info.path, base + half, info.dtype, (I, H))))
        else:
            shape = (H, I) if kind == "down_proj" else (I, H)
            out.append((p + f"{kind}.weight", TensorInfo(info.name, info.path, base, info.dtype, shape)))
    return out


def tensor_table(spec: dict, infos: Iterable[TensorInfo], *, experts: bool = True) -> dict[str, TensorInfo]:
    """Canonical name -> TensorInfo for the tensors the spec needs, checked (presence, shape, dtype)."""
    have: dict[str, TensorInfo] = {}
    for info in infos:
        cn = canonical_name(info.name)
        if cn is None:
            continue
        m = _STACKED.match(cn)
        if m and len(info.shape) == 3:
            if experts:
                for k, v in _split_stacked(spec, info, int(m.group(1)), m.group(2)):
                    have[k] = v
            continue
        have[cn] = info
    req = _config.required_tensors(spec, experts=experts)
    table: dict[str, TensorInfo] = {}
    for name, shape in req.items():
        info = have.get(name)
        if info is None:
            raise ModelError(f"missing tensor {name} (model.{name} / model.language_model.{name}) in the checkpoint")
        if tuple(info.shape) != tuple(shape):
            raise ModelError(f"{info.path}: tensor {info.name} has shape {list(info.shape)}, expected {list(shape)}")
        if info.dtype not in ENGINE_DTYPES:
            raise ModelError(f"{info.path}: tensor {info.name} has unsupported dtype {info.dtype} (F32, BF16, F16)")
        table[name] = info
    return table


def model_id_of(spec: dict, table: dict[str, TensorInfo]) -> str:
    """Stable identity of a model: its spec and the names/shapes/dtypes of its dense tensors."""
    h = hashlib.sha256()
    h.update(json.dumps({k: spec[k] for k in sorted(spec)}, sort_keys=True).encode())
    for name in sorted(table):
        if ".mlp.experts." in name:
            continue
        t = table[name]
        h.update(f"{name}|{t.dtype}|{','.join(map(str, t.shape))};".encode())
    return h.hexdigest()[:16]


def _default_threads() -> int:
    from .cpu_threads import default_threads

    return default_threads()


def build_engine(spec: dict, tensors: Sequence, expert_store=None, *, threads: int | None = None,
                 fold: str = "eager", ctx: int | None = None, model_id: str | None = None,
                 config: dict | None = None, backend: str = "cpu"):
    """Engine from a spec and a tensor table.

    ``tensors``: TensorInfo objects or tuples (name, path, byte offset, dtype, shape); names may
    be canonical or Hugging Face names. With ``expert_store`` (an ``_engine.ExpertStore``), expert
    tensors are not needed; without it every expert must be in the table.
    """
    if fold not in ("eager", "lazy"):
        raise ValueError(f"fold must be 'eager' or 'lazy', not {fold!r}")
    infos = [t if isinstance(t, TensorInfo) else TensorInfo(str(t[0]), str(t[1]), int(t[2]), str(t[3]),
                                                             tuple(int(d) for d in t[4])) for t in tensors]
    table = tensor_table(spec, infos, experts=expert_store is None)
    mid = model_id or model_id_of(spec, table)
    rows = [(name, t.path, t.offset, t.dtype, list(t.shape)) for name, t in table.items()]
    cfg = dict(spec)
    if config is not None:
        cfg["hf_config"] = config
    eng_mod = _engine_module()
    return eng_mod.Engine(
        spec, rows, expert_store, threads=int(threads or _default_threads()), fold=fold,
        ctx=int(ctx or 0), model_id=mid, config_json=json.dumps(cfg), backend=backend,
    )


def load(path, *, threads: int | None = None, fold: str = "eager", ctx: int | None = None, expert_store=None,
         backend: str = "cpu", expert_cache=None, **stream_options):
    """Load a Hugging Face checkpoint folder (config.json + *.safetensors) or a .gguf file into an engine.

    A strata pack goes to strata.pack.load_pack (experts stream through a cache of
    `expert_cache`; `stream_options`: io_mode, eviction, io_threads, readahead)."""
    folder = os.fspath(path)
    from . import gguf as _gguf  # noqa: PLC0415
    from . import pack as _pack  # noqa: PLC0415

    if _gguf.is_gguf(folder) and not (stream_options or expert_cache is not None):
        return _gguf.load_gguf(folder, threads=threads, fold=fold, ctx=ctx, backend=backend)
    if _pack.is_pack(folder):
        return _pack.load_pack(folder, expert_cache=expert_cache, threads=threads, fold=fold, ctx=ctx,
                               backend=backend, **stream_options)
    if stream_options or expert_cache is not None:
        raise ModelError(f"{folder}: expert cache options apply to strata packs only (run strata convert first)")
    if not os.path.isdir(folder):
        raise ModelError(f"{folder}: not a model folder")
    raw, spec = _config.read_config(folder)
    infos: list[TensorInfo] = []
    for f in checkpoint_files(folder):
        infos.extend(read_header(f).values())
    return build_engine(spec, infos, expert_store, threads=threads, fold=fold, ctx=ctx, config=raw,
                        backend=backend)
