"""Building the C++ engine from a spec and a tensor table, and from a checkpoint folder.

``build_engine`` is the lower-level entry every format's loader uses (checkpoints here, packs in
``strata.pack.loader``): a spec, a tensor table and optionally an ExpertStore object created by
``strata._engine``. Which loader a path needs is decided in one place: ``strata.loader``.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Iterable, Mapping, Sequence

from . import config as _config
from .errors import ModelError
from .safetensors_io import ENGINE_DTYPES, TensorInfo, checkpoint_tensors

__all__ = ["load_checkpoint", "build_engine", "canonical_name", "model_id_of", "new_engine", "tensor_table"]

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


def stacked_expert_slices(spec: dict, kind: str, shape, offset: int, nbytes: int, where: str):
    """(canonical name suffix, byte offset, shape, bytes) of every expert's matrix in a stacked
    [E, ...] expert tensor of one layer (no copy: offsets into the file). kind: gate, up, down or
    gate_up (gate and up rows stacked per expert); `where` names the tensor in the error."""
    E, H, I = spec["num_experts"], spec["hidden_size"], spec["moe_intermediate_size"]
    expect = {"gate": (E, I, H), "up": (E, I, H), "down": (E, H, I), "gate_up": (E, 2 * I, H)}[kind]
    if tuple(shape) != expect:
        raise ModelError(f"{where} has shape {list(shape)}, expected {list(expect)}")
    per = nbytes // E
    out = []
    for e in range(E):
        base = offset + e * per
        p = f"mlp.experts.{e}."
        if kind == "gate_up":
            out.append((p + "gate_proj.weight", base, (I, H), per // 2))
            out.append((p + "up_proj.weight", base + per // 2, (I, H), per // 2))
        else:
            out.append((p + f"{kind}_proj.weight", base, expect[1:], per))
    return out


def _split_stacked(spec: dict, info: TensorInfo, layer: int, kind: str) -> list[tuple[str, TensorInfo]]:
    """Per-expert views into a stacked [E, ...] safetensors expert tensor (kind: gate_up_proj, ...)."""
    slices = stacked_expert_slices(spec, kind.removesuffix("_proj"), info.shape, info.offset, info.nbytes,
                                   f"{info.path}: tensor {info.name}")
    return [(f"layers.{layer}.{name}", TensorInfo(info.name, info.path, off, info.dtype, shape))
            for name, off, shape, _ in slices]


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


def model_id_of(spec: dict, table: Mapping[str, Any], fmt: str = "dtype") -> str:
    """Stable identity of a model: its spec and the names/formats/shapes of its dense tensors.
    `fmt` is the attribute of a table entry that names its format (`dtype` for TensorInfo,
    `type` for a GGUF tensor), so every input format hashes the same way."""
    h = hashlib.sha256()
    h.update(json.dumps({k: spec[k] for k in sorted(spec)}, sort_keys=True).encode())
    for name in sorted(table):
        if ".mlp.experts." in name:
            continue
        t = table[name]
        h.update(f"{name}|{getattr(t, fmt)}|{','.join(map(str, t.shape))};".encode())
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
    infos = [t if isinstance(t, TensorInfo) else TensorInfo(str(t[0]), str(t[1]), int(t[2]), str(t[3]),
                                                             tuple(int(d) for d in t[4])) for t in tensors]
    table = tensor_table(spec, infos, experts=expert_store is None)
    rows = [(name, t.path, t.offset, t.dtype, list(t.shape)) for name, t in table.items()]
    cfg = dict(spec)
    if config is not None:
        cfg["hf_config"] = config
    return new_engine(spec, rows, expert_store, threads=threads, fold=fold, ctx=ctx,
                      model_id=model_id or model_id_of(spec, table), config=cfg, backend=backend)


def new_engine(spec: dict, rows: list, expert_store=None, *, threads: int | None, fold: str,
               ctx: int | None, model_id: str, config: dict, backend: str):
    """The `_engine.Engine` over checked tensor rows (name, path, offset, format, shape): the
    options every input format shares (threads, fold, ctx, backend) are settled here, once;
    `config` is what the front ends read back as `engine.config`."""
    if fold not in ("eager", "lazy"):
        raise ValueError(f"fold must be 'eager' or 'lazy', not {fold!r}")
    from .cpu_threads import check_pool_setting

    check_pool_setting()
    if backend == "auto":  # webgpu on a real GPU adapter, else cpu; other names: the engine checks
        from .loader import resolve_backend

        backend = resolve_backend(backend)
    return _engine_module().Engine(
        spec, rows, expert_store, threads=int(threads or _default_threads()), fold=fold,
        ctx=int(ctx or 0), model_id=model_id, config_json=json.dumps(config), backend=backend,
    )


def load_checkpoint(folder: str, *, threads: int | None = None, fold: str = "eager", ctx: int | None = None,
                    backend: str = "cpu"):
    """A Hugging Face checkpoint folder (config.json + *.safetensors) as an engine; every expert is
    resident. `strata.loader.load` is the entry point that also takes packs and aliases."""
    if not os.path.isdir(folder):
        raise ModelError(f"{folder}: not a model folder")
    infos = list(checkpoint_tensors(folder).values())  # headers only: sizes to check the config by
    raw, spec = _config.read_config(folder, bounds=_config.checkpoint_bounds(infos))
    return build_engine(spec, infos, threads=threads, fold=fold, ctx=ctx, config=raw, backend=backend)
