"""What every HF import/export module shares: its refusal and the files beside the weights."""

from __future__ import annotations

import json
from pathlib import Path

from .tokenizer import Tokenizer


class UnsupportedHFModel(ValueError):
    """The HF checkpoint uses an architecture or option we cannot map to OLMo-core."""


def write_generation_files(out: Path, tokenizer: Tokenizer) -> None:
    """``generation_config.json`` (sampling, as the rollouts do) and the tokenizer."""
    gen = {
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "do_sample": True,
        "temperature": 1.0,
    }
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    tokenizer.save(out)
