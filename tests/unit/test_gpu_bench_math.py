"""The FLOP/byte accounting behind the GPU benchmark tables (no GPU needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(rel: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_attention_pairs_causal_and_windowed() -> None:
    raw = _load("benchmarks/raw_olmo_core_step.py", "raw_step_bench")
    assert raw.attention_pairs(4, [None]) == 10  # 1 + 2 + 3 + 4
    # window 2 over 5 positions: 1 + 2 + 2 + 2 + 2
    assert raw.attention_pairs(5, [2]) == 9
    # a window at least the sequence is full causal; layers add up
    assert raw.attention_pairs(5, [8, None]) == 30


def test_task_prompts_deterministic_and_reward_range() -> None:
    task = _load("benchmarks/gpu/task.py", "gpu_task")
    a, b = task.prompts(5), task.prompts(5)
    assert a == b and len(set(a)) == 5
    assert task.reward("") == 0.0
    assert task.reward("12ab") == 0.5
    assert 0.0 <= task.reward("#### 42") <= 1.0
