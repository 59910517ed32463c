"""Models for the rlc runtime: OLMo-core transformers, the builtin tokenizer, weight files.

The names below load on first use: ``runtime.models.source`` (a source's files) and
``runtime.models.tokenizer`` stay importable without torch, so ``rlc run`` checks a source
before it pays for importing torch and OLMo-core.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hf import export_hf
    from .loader import FAMILIES, LoadedModel, family_of, load_model, save_native
    from .source import ModelLoadError, source_format
    from .tokenizer import Tokenizer, build_builtin_tokenizer, number_token_ids
    from .weights import load_safetensors, save_safetensors, state_checksum

_HOME = {
    "export_hf": ".hf",
    "FAMILIES": ".loader",
    "LoadedModel": ".loader",
    "family_of": ".loader",
    "load_model": ".loader",
    "save_native": ".loader",
    "ModelLoadError": ".source",
    "source_format": ".source",
    "Tokenizer": ".tokenizer",
    "build_builtin_tokenizer": ".tokenizer",
    "number_token_ids": ".tokenizer",
    "load_safetensors": ".weights",
    "save_safetensors": ".weights",
    "state_checksum": ".weights",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home, __name__), name)


__all__ = [
    "FAMILIES",
    "LoadedModel",
    "ModelLoadError",
    "Tokenizer",
    "build_builtin_tokenizer",
    "export_hf",
    "family_of",
    "load_model",
    "load_safetensors",
    "number_token_ids",
    "save_native",
    "save_safetensors",
    "source_format",
    "state_checksum",
]
