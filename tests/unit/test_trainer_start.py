"""The trainer built and warmed up on a thread while the engines start."""

from __future__ import annotations

import threading
import time

import pytest

from runtime.node.trainer_start import DISABLE_ENV, TrainerStart, beside_engines


class FakeTrainer:
    def __init__(self) -> None:
        self.closed = 0
        self.thread = threading.current_thread().name


def test_build_and_warm_up_run_on_one_thread_after_the_preload() -> None:
    order: list[str] = []
    preload_done = threading.Event()

    def wait_first() -> None:
        preload_done.wait(5)
        order.append("preload")

    def build() -> FakeTrainer:
        order.append("build")
        return FakeTrainer()

    def warm(trainer: FakeTrainer) -> int:
        order.append("warm-up")
        return 7

    start = TrainerStart(build, warm, wait_first=wait_first)
    start.start()
    time.sleep(0.05)
    assert order == []  # waits for the imports before building
    preload_done.set()
    trainer = start.built()
    assert trainer.thread == "rlc-trainer-start"
    assert start.warmed() == 7 and order == ["preload", "build", "warm-up"]
    names = [p["name"] for p in start.phases()]
    assert names == ["build", "warm-up (7 rows)"]
    assert start.build_s is not None and start.warm_up_s is not None


def test_without_a_warm_up_the_trainer_is_only_built() -> None:
    start = TrainerStart(FakeTrainer, None)
    assert isinstance(start.built(), FakeTrainer)  # built() starts it if nobody did
    assert start.warmed() == 0 and [p["name"] for p in start.phases()] == ["build"]


def test_a_failed_build_is_raised_on_the_waiting_thread() -> None:
    def build() -> FakeTrainer:
        raise RuntimeError("CUDA out of memory")

    start = TrainerStart(build, None)
    start.start()
    deadline = time.monotonic() + 5
    while True:  # the wait for the engines polls check(): it raises the cause at once
        try:
            start.check()
        except RuntimeError as exc:
            assert "out of memory" in str(exc)
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(RuntimeError, match="out of memory"):
        start.built()
    with pytest.raises(RuntimeError, match="out of memory"):
        start.warmed()


def test_a_failed_warm_up_is_raised_by_warmed_and_the_trainer_still_closes() -> None:
    def warm(trainer: FakeTrainer) -> int:
        raise ValueError("a row failed to compile")

    start = TrainerStart(FakeTrainer, warm)
    trainer = start.built()
    with pytest.raises(ValueError, match="compile"):
        start.warmed()
    start.close(lambda t: setattr(t, "closed", t.closed + 1))
    assert trainer.closed == 0  # taken: its owner closes it


def test_a_run_that_fails_before_taking_the_trainer_closes_it_once() -> None:
    start = TrainerStart(FakeTrainer, None)
    start.start()
    start.warmed()

    def close(t: FakeTrainer) -> None:
        t.closed += 1

    start.close(close)
    start.close(close)
    assert start._trainer is not None and start._trainer.closed == 1


@pytest.mark.parametrize(
    ("world", "gpus", "warms_up", "colocated", "own", "env", "expected"),
    [
        (1, True, True, True, True, {}, True),  # embedded engine on the trainer's GPU
        (1, True, True, True, False, {}, False),  # SGLang on the trainer's GPU: it sizes first
        (1, True, True, False, False, {}, True),  # SGLang on its own GPUs
        (1, False, False, True, False, {}, False),  # a CPU trainer: no warm-up to overlap
        (1, False, False, True, False, {DISABLE_ENV: "1"}, True),  # ... unless asked
        (2, True, True, False, True, {}, False),  # several ranks: collectives stay on one thread
        (1, True, True, True, True, {DISABLE_ENV: "0"}, False),
    ],
)
def test_when_the_trainer_starts_beside_the_engines(
    world: int,
    gpus: bool,
    warms_up: bool,
    colocated: bool,
    own: bool,
    env: dict[str, str],
    expected: bool,
) -> None:
    got = beside_engines(
        trainer_world=world,
        trainer_on_gpus=gpus,
        warms_up=warms_up,
        colocated=colocated,
        pool_from_own_memory=own,
        env=env,
    )
    assert got is expected
