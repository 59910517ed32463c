"""What every HF import/export module shares: its refusal and the files beside the weights."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

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


def export_state(
    model: Any, state_dict: dict[str, torch.Tensor] | None, dtype: torch.dtype | None
) -> dict[str, torch.Tensor]:
    """The weights to export: ``state_dict`` (e.g. a gathered FSDP state) or the model's
    own, on the CPU, floating-point tensors cast to ``dtype`` when one is given."""
    state = {k: v.detach().cpu() for k, v in (state_dict or model.state_dict()).items()}
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    return state
