"""The GRPO loop with fake trainer/engines: order of phases, versions, stop, resume, async."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from compiled_run import run_config

from runtime.data.records import Prompt
from runtime.data.sampler import PromptSampler
from runtime.metrics import MetricsWriter, read_metrics
from runtime.rewards.base import RewardResult, Verifier
from runtime.rollout.collect import Collector, CollectSettings
from runtime.rollout.loop import GRPOLoop, LoopState, MismatchError, StopFlag


class FirstCharVerifier(Verifier):
    def score(self, response: str, target: Any, metadata: Any) -> RewardResult:
        return RewardResult(1.0 if response[:1] == target else 0.0)


class Engine:
    """Sample i answers str(i % 2): groups always have variance when target is 0 or 1."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0

    def __call__(
        self, ids: list[int], sampling: dict[str, Any], seeds: list[int]
    ) -> list[dict[str, Any]]:
        with self.lock:
            self.calls += 1
        return [
            {
                "text": str(i % 2),
                "output_ids": [i % 2],
                "meta_info": {"output_token_logprobs": [[-0.7, i % 2, None]]},
            }
            for i in range(len(seeds))
        ]


class FakeTrainer:
    def __init__(self, diff: float = 0.01) -> None:
        self.diff = diff
        self.steps: list[list[str]] = []
        self.version = 0

    def compute_logprobs(self, samples: Any) -> list[list[float]]:
        return [[lp + self.diff for lp in s.logprobs] for s in samples]

    def train_step(self, samples: Any) -> dict[str, float]:
        self.steps.append([s.prompt_id for s in samples])
        self.version += 1
        return {"loss": 0.5, "logprob_abs_diff": self.diff, "clip_fraction": 0.0}

    def state_dict_for_publication(self) -> dict[str, Any]:
        return {"version": self.version}


class FakePublisher:
    def __init__(self) -> None:
        self.versions: list[int] = []

    def publish(self, state: dict[str, Any], version: int) -> None:
        # the weights after this collection's update(s), never older ones
        assert state["version"] >= version and state["version"] > getattr(self, "last", -1)
        self.last = state["version"]
        self.versions.append(version)


def _cfg(tmp_path: Any, **sections: dict[str, Any]) -> Any:
    defaults = {"training": {"num_rollouts": 4}, "checkpoint": {"interval": 2}}
    for name, values in defaults.items():
        sections[name] = {**values, **sections.get(name, {})}
    return run_config(tmp_path, **sections)


def _prompts(n: int = 20) -> list[Prompt]:
    return [
        Prompt(f"p{i}", "t", [{"role": "user", "content": "q"}], str(i % 2), "first")
        for i in range(n)
    ]


def _loop(
    cfg: Any, trainer: FakeTrainer, state: LoopState | None = None, **kw: Any
) -> tuple[GRPOLoop, PromptSampler, list[LoopState]]:
    prompts = _prompts()
    sampler = PromptSampler(prompts, seed=1)
    if state is not None and state.sampler:
        sampler.restore(state.sampler)
    collector = Collector(
        Engine(),
        lambda p: [1, 2],
        lambda name: FirstCharVerifier(),
        CollectSettings(
            samples_per_prompt=cfg.inference.samples_per_prompt, sampling_params={}, run_seed=1
        ),
    )
    saved: list[LoopState] = []

    def save(st: LoopState) -> float:
        saved.append(
            LoopState(
                st.collection,
                st.policy_version,
                dict(st.sampler),
                list(st.pending_prompt_ids),
                dict(st.record or {}),
            )
        )
        return 0.0

    by_id = {p.id: p for p in prompts}
    loop = GRPOLoop(
        cfg,
        trainer,
        collector,
        sampler,
        kw.pop("publisher", FakePublisher()),
        MetricsWriter(cfg.paths.metrics),
        state or LoopState(sampler=sampler.state()),
        save_checkpoint=save,
        prompt_lookup=by_id.__getitem__,
        **kw,
    )
    return loop, sampler, saved


def test_sync_loop_trains_publishes_and_checkpoints(tmp_path: Any) -> None:
    cfg = _cfg(tmp_path)
    pub = FakePublisher()
    trainer = FakeTrainer()
    loop, _, saved = _loop(cfg, trainer, publisher=pub)
    state = loop.run()
    assert state.collection == 4 and state.policy_version == 4
    assert pub.versions == [1, 2, 3, 4]
    assert [s.collection for s in saved] == [2, 4]  # interval 2; the final save is not repeated
    recs = read_metrics(cfg.paths.metrics)
    assert [r["collection"] for r in recs] == [0, 1, 2, 3]
    ids = [pid for r in recs for pid in r["prompt_ids"]]
    assert len(ids) == len(set(ids)) == 8  # no prompt repeated
    assert recs[0]["reward/mean"] == 0.5 and recs[0]["mismatch/logprob_abs_mean"] == pytest.approx(
        0.01
    )
    assert recs[-1]["policy_version"] == 4 and "train/loss" in recs[-1]
    assert all(r["time/collection_s"] >= r["time/train_s"] for r in recs)


def test_resume_from_saved_state_continues_exactly(tmp_path: Any) -> None:
    cfg = _cfg(tmp_path)
    full, _, _ = _loop(cfg, FakeTrainer())
    full.run()
    all_ids = [r["prompt_ids"] for r in read_metrics(cfg.paths.metrics)]

    cfg2 = _cfg(tmp_path / "b", training={"num_rollouts": 2})
    first, _, saved = _loop(cfg2, FakeTrainer())
    first.run()
    cfg3 = _cfg(tmp_path / "b")
    trainer = FakeTrainer()
    trainer.version = saved[-1].policy_version  # the checkpoint restores the trainer too
    resumed, _, _ = _loop(cfg3, trainer, state=saved[-1])
    resumed.run()
    assert [r["prompt_ids"] for r in read_metrics(cfg3.paths.metrics)] == all_ids


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_checkpoint_holds_its_collection_record(tmp_path: Any, asynchronous: bool) -> None:
    """Killed between a save and its metrics line, a run loses no record: the checkpoint
    holds it (without the checkpoint's own time) and the resumed run writes it."""
    extra: dict[str, Any] = {"async": {"enabled": True}} if asynchronous else {}
    cfg = _cfg(tmp_path, checkpoint={"interval": 1}, **extra)
    loop, _, saved = _loop(cfg, FakeTrainer())
    loop.run()
    recs = read_metrics(cfg.paths.metrics)
    for st, rec in zip(saved, recs, strict=True):
        assert st.record is not None and st.record["collection"] == st.collection - 1
        assert "time/checkpoint_s" not in st.record and "time/collection_s" not in st.record
        kept = {k: v for k, v in rec.items() if k not in ("time/checkpoint_s", "time/collection_s")}
        assert st.record == kept
    # the kill came after the last save, before its line
    w = MetricsWriter(cfg.paths.metrics)
    w.truncate_from(3)
    w.truncate_from(4, saved=saved[-1].record)
    assert read_metrics(cfg.paths.metrics)[-1] == saved[-1].record
    assert [r["collection"] for r in read_metrics(cfg.paths.metrics)] == [0, 1, 2, 3]
    w.truncate_from(4, saved=saved[-1].record)  # present: not written twice
    w.truncate_from(4, saved=saved[-2].record)  # another collection's: ignored
    assert [r["collection"] for r in read_metrics(cfg.paths.metrics)] == [0, 1, 2, 3]


def test_stop_flag_is_honoured_at_a_boundary_and_saves(tmp_path: Any) -> None:
    cfg = _cfg(tmp_path, checkpoint={"interval": 100}, training={"save_checkpoints": True})
    stop = StopFlag()
    trainer = FakeTrainer()

    class StopAfterOne(FakePublisher):
        def publish(self, state: dict[str, Any], version: int) -> None:
            super().publish(state, version)
            stop.set("test")

    loop, _, saved = _loop(cfg, trainer, publisher=StopAfterOne(), stop=stop)
    state = loop.run()
    assert state.collection == 1 and len(trainer.steps) == 1
    assert [s.collection for s in saved] == [1]


def test_mismatch_limit_fails_clearly(tmp_path: Any) -> None:
    cfg = _cfg(tmp_path, runtime={"max_logprob_mismatch": 0.001})
    loop, _, _ = _loop(cfg, FakeTrainer(diff=0.5))
    with pytest.raises(MismatchError, match="max_logprob_mismatch"):
        loop.run()
    # several optimizer steps per collection pin old logprobs with a scoring pass first
    cfg = _cfg(
        tmp_path / "b",
        runtime={"max_logprob_mismatch": 0.001},
        optimizer={"steps_per_collection": 2},
        inference={"global_batch_size": 2},
    )
    trainer = FakeTrainer(diff=0.5)
    loop, _, _ = _loop(cfg, trainer)
    with pytest.raises(MismatchError):
        loop.run()
    assert trainer.steps == []  # refused before any update


def test_several_steps_split_the_collection(tmp_path: Any) -> None:
    cfg = _cfg(
        tmp_path,
        optimizer={"steps_per_collection": 2},
        inference={"global_batch_size": 2},
        training={"num_rollouts": 1},
    )
    trainer = FakeTrainer()
    loop, _, _ = _loop(cfg, trainer)
    loop.run()
    assert [len(s) for s in trainer.steps] == [2, 2]


def test_async_loop_bounded_lag_and_prompt_accounting(tmp_path: Any) -> None:
    cfg = _cfg(
        tmp_path,
        **{"async": {"enabled": True, "max_policy_lag": 1, "buffer_factor": 2}},
        training={"num_rollouts": 5},
        checkpoint={"interval": 1},
    )
    trainer = FakeTrainer()
    loop, sampler, saved = _loop(cfg, trainer)
    state = loop.run()
    assert state.collection == 5
    recs = read_metrics(cfg.paths.metrics)
    assert all(r["async/lag_max"] <= 1 for r in recs)
    trained = [pid for r in recs for pid in r["prompt_ids"]]
    assert len(trained) == len(set(trained)) == 10
    # what was drawn but not trained is exactly what a resume would replay first
    last = saved[-1]
    assert not set(last.pending_prompt_ids) & set(trained)


def test_rollout_samples_are_dumped_at_the_configured_rate(tmp_path: Any) -> None:
    cfg = _cfg(tmp_path, output={"rollout_sample_rate": 1.0}, training={"num_rollouts": 2})
    loop, _, _ = _loop(cfg, FakeTrainer())
    loop.run()
    files = sorted((tmp_path / "rollouts").glob("*.jsonl"))
    assert [f.name for f in files] == ["collection-000000.jsonl", "collection-000001.jsonl"]
    assert len(files[0].read_text().splitlines()) == 4  # 2 prompts x 2 samples


def test_engine_connection_lost_mid_publication_is_republished_to_survivors(
    tmp_path: Any,
) -> None:
    """An engine killed during a publication resets its connection (the audit's request, a
    reply cut short): that is a failed publication like a failed broadcast, so the health
    check drops the engine and the survivors get the same version; the failed attempt's
    exception is gone by the time they do (its frames hold the old broadcast group)."""
    import gc
    import weakref

    import httpx

    class Held:
        """Stands for the broadcast group the failed attempt's frames reference."""

    class DroppingPublisher(FakePublisher):
        def __init__(self) -> None:
            super().__init__()
            self.urls = ["http://a", "http://b"]
            self.held: weakref.ref[Held] | None = None
            self.held_at_retry: list[bool] = []
            self.b_died = False

        def publish(self, state: dict[str, Any], version: int) -> None:
            if version == 2 and "http://b" in self.urls:
                group = Held()
                self.held = weakref.ref(group)
                self.b_died = True
                raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
            if version == 2:
                gc.collect()
                self.held_at_retry.append(self.held is not None and self.held() is not None)
            super().publish(state, version)

    pub = DroppingPublisher()
    checks: list[list[str]] = []

    def health_check() -> None:
        if pub.b_died:  # what the node's health check does with a dead engine
            pub.urls = ["http://a"]
            checks.append(list(pub.urls))

    cfg = _cfg(tmp_path)
    loop, _, _ = _loop(cfg, FakeTrainer(), publisher=pub, health_check=health_check)
    state = loop.run()
    assert state.policy_version == 4 and pub.versions == [1, 2, 3, 4]
    assert pub.held_at_retry == [False]
    assert checks  # the retry went through the health check
