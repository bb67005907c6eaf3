"""`strata info` for a GGUF file: architecture, the mix of weight formats (bytes per format),
and the weight bytes one decoded token reads: every dense matrix (the LM head included, the
embedding only as the LM head of a tied model) plus top-k of each MoE layer's experts."""
from __future__ import annotations

import os
import re
from collections import Counter
from typing import Any

from .arch import spec_from_metadata
from .reader import open_gguf

_EXPERTS = re.compile(r"^blk\.(\d+)\.ffn_(gate|up|down|gate_up)_exps\.weight$|^blk\.(\d+)\.ffn_(gate|up|down)\.\d+\.weight$")


def gguf_info(path: str | os.PathLike) -> dict[str, Any]:
    model = open_gguf(path)
    spec = spec_from_metadata(model)
    by_format: Counter[str] = Counter()
    expert_bytes: Counter[int] = Counter()  # per layer, all experts
    params = dense = 0
    for t in model.tensors.values():
        by_format[t.type] += t.nbytes
        params += t.n_elements
        m = _EXPERTS.match(t.name)
        if m:
            expert_bytes[int(m.group(1) or m.group(3))] += t.nbytes
        elif t.name == "token_embd.weight" and not spec["tie_word_embeddings"]:
            continue  # a token reads one row of it (it is also the LM head only when tied)
        elif not t.name.startswith("blk.") or int(t.name.split(".")[1]) < spec["num_layers"]:
            dense += t.nbytes
    E, k = spec["num_experts"], spec["top_k"]
    per_token = dense + sum(b * k // E for l, b in expert_bytes.items() if l < spec["num_layers"]) if E else dense
    layer_types = Counter(spec["layer_types"])
    return {
        "path": os.fspath(path),
        "format": "gguf" + (f" ({len(model.files)} files)" if len(model.files) > 1 else ""),
        "model_type": spec["arch"],
        "layers": spec["num_layers"],
        "layer_types": dict(layer_types),
        "hidden_size": spec["hidden_size"],
        "vocab_size": spec["vocab_size"],
        "experts": E,
        "experts_per_token": k,
        "moe_intermediate_size": spec["moe_intermediate_size"],
        "shared_expert": bool(spec["shared_expert_intermediate_size"]),
        "context_length": spec["max_position_embeddings"],
        "size_on_disk": sum(os.path.getsize(f) for f in model.files),
        "params": params,
        "dtype": by_format.most_common(1)[0][0] if by_format else None,
        "formats": dict(by_format.most_common()),
        "expert_bytes": sum(expert_bytes.values()),
        "bytes_per_token": per_token,
        "tensors": len(model.tensors),
        "tokenizer": model.get("tokenizer.ggml.model"),
        "chat_template": model.get("tokenizer.chat_template") is not None,
    }
