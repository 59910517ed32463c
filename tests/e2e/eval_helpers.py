"""Specs and data for the evaluation end-to-end tests (tiny, CPU, builtin model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GSM8K = ROOT / "runtime" / "data" / "datasets" / "gsm8k" / "test.jsonl"

BASE = """
schema_version = 1
name = "{name}"

[model]
source = "builtin:tiny"

[data]
seed = 17

[[data.tasks]]
task = "arithmetic"
train_count = 64
{data_extra}

[output]
root = "{root}"

[training]
num_rollouts = {rollouts}
filter_zero_std_groups = false
{training_extra}

[trainer]
gpus = 0
sequence_packing = true
activation_recompute = false
packing_max_tokens = 512

[inference]
engine = "embedded"
num_engines = 1
prompts_per_collection = 2
samples_per_prompt = 4
max_context_length = 512
max_response_length = 2
max_running_requests = 32

[optimizer]
lr = 1e-3
warmup_steps = 0

{sections}
"""

BACKGROUND = """
[evaluation]
mode = "background"
interval = 2
max_response_length = 4
image = "01HZZZZZZZZZZZZZZZZZZZZZZZ"

[[evaluation.tasks]]
task = "gsm8k::tulu"
scoring = { limit = 3 }
"""


def write_spec(tmp: Path, *, name: str = "evaltest", rollouts: int = 3, **parts: str) -> Path:
    """A tiny spec under ``tmp`` (output.root = tmp/run); ``parts`` fill the placeholders."""
    text = BASE.format(
        name=name,
        root=tmp / "run",
        rollouts=rollouts,
        data_extra=parts.get("data_extra", ""),
        training_extra=parts.get("training_extra", ""),
        sections=parts.get("sections", ""),
    )
    spec = tmp / "spec.toml"
    spec.write_text(text)
    return spec


def compile_to(spec: Path, out: Path) -> Path:
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    return write_manifest(compile_spec(str(spec), []).manifest(), out / "manifest.json")


def tiny_data_root(tmp: Path, rows: int = 3) -> Path:
    """An RLC_DATA_ROOT holding the first ``rows`` GSM8K test problems."""
    if not GSM8K.exists():
        pytest.skip(f"GSM8K not found at {GSM8K} (shipped in runtime/data/datasets)")
    root = tmp / "data"
    (root / "gsm8k").mkdir(parents=True)
    lines = GSM8K.read_text().splitlines()[:rows]
    (root / "gsm8k" / "test.jsonl").write_text("\n".join(lines) + "\n")
    assert all(json.loads(x)["question"] for x in lines)
    return root
