"""GGUF models: metadata, tensors, tokenizer and chat template from a .gguf file (or split set).

    model = strata.gguf.open_gguf("m.gguf")      # metadata + tensor infos, checked
    spec = strata.gguf.spec_from_metadata(model)   # the engine's architecture spec
    table = strata.gguf.canonical_tensors(model, spec)
    tok = strata.gguf.load_tokenizer(model)
    eng = strata.gguf.load_gguf("m.gguf")          # what strata.load does for a .gguf path
"""
from __future__ import annotations

from .arch import ARCHS, spec_from_metadata
from .info import gguf_info
from .loader import load_gguf
from .names import WeightRef, canonical_tensors
from .reader import SUPPORTED_TYPES, GGUFModel, GGUFTensor, is_gguf, open_gguf
from .tokenizer import build_tokenizer, chat_template, load_tokenizer

__all__ = ["ARCHS", "SUPPORTED_TYPES", "GGUFModel", "GGUFTensor", "WeightRef", "build_tokenizer",
           "canonical_tensors", "chat_template", "gguf_info", "is_gguf", "load_gguf", "load_tokenizer", "open_gguf", "spec_from_metadata"]
