"""Models for the rlc runtime: OLMo-core transformers, the builtin tokenizer, weight files."""

from .hf import export_hf
from .loader import (
    FAMILIES,
    LoadedModel,
    ModelLoadError,
    family_of,
    load_model,
    save_native,
    source_format,
)
from .tokenizer import Tokenizer, build_builtin_tokenizer, number_token_ids
from .weights import load_safetensors, save_safetensors, state_checksum

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
