"""An in-process CPU trainer's passes take every core only while the engines wait."""

from __future__ import annotations

import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from runtime.rollout.driver import TrainerAdapter, cpu_update_threads  # noqa: E402


def test_update_threads_follow_the_schedule() -> None:
    cores = len(os.sched_getaffinity(0))
    assert cpu_update_threads("cpu", asynchronous=False, trainer_world=1, env={}) == cores
    assert cpu_update_threads("cpu", asynchronous=True, trainer_world=1, env={}) == 1
    assert cpu_update_threads("cpu", asynchronous=False, trainer_world=2, env={}) == 1
    env = {"OMP_NUM_THREADS": "3"}
    assert cpu_update_threads("cpu", asynchronous=False, trainer_world=1, env=env) is None
    assert cpu_update_threads("cuda", asynchronous=False, trainer_world=1, env={}) is None


class _Inner:
    def __init__(self) -> None:
        self.loaded = type("L", (), {"tokenizer": None})()
        self.seen: list[int] = []

    def train_step(self, samples: Any) -> dict[str, float]:
        self.seen.append(torch.get_num_threads())
        return {}

    def compute_logprobs(self, samples: Any) -> list[Any]:
        self.seen.append(torch.get_num_threads())
        return []


def test_passes_run_on_the_update_threads_and_give_them_back() -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        inner = _Inner()
        adapter = TrainerAdapter(inner, update_threads=2)
        adapter.train_step([])
        adapter.compute_logprobs([])
        assert inner.seen == [2, 2]
        assert torch.get_num_threads() == 1
        TrainerAdapter(inner, update_threads=None).train_step([])
        assert inner.seen[-1] == 1
    finally:
        torch.set_num_threads(before)
