"""Each field the contract made take effect, shown by its effect (cheap: no engines)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from compiled_run import compile_manifest, contract, run_config

from contract.run import parse
from contract.spec.compiler_cache import CompilerCacheSection
from contract.spec.data import DataSection
from contract.spec.rewards import RewardsSection
from contract.spec.tracking import TrackingSection
from runtime.config import ConfigError, RunConfig
from runtime.data.manifest import DataManifestError, load_prompts
from runtime.data.records import Prompt
from runtime.data.sampler import PromptSampler
from runtime.metrics import MetricsWriter
from runtime.rollout.collect import Collector, CollectSettings
from runtime.rollout.driver import TrainerAdapter, rollout_concurrency
from runtime.rollout.loop import GRPOLoop, LoopState, MismatchError
from runtime.rollout.shaping import Shaping
from runtime.rollout.types import Group, Sample
from runtime.trainer.schedule import lr_multiplier
from runtime.trainer.trainer import Trainer, TrainerConfig


def _cfg(tmp_path: Path, **sections: dict[str, Any]) -> Any:
    """The runtime's config of a compiled spec with these sections (`compiled_run`)."""
    return run_config(tmp_path, **sections)


# ---- guards: never run something else ------------------------------------------------------
@pytest.mark.parametrize(
    ("algorithm", "why"),
    [
        ("ppo", "training.algorithm"),  # not the spec's type: refused as the manifest is read
        # distillation without a placed teacher never falls back to plain GRPO
        ("opd", "places no teacher"),
    ],
)
def test_unhonoured_values_are_refused_before_anything_starts(
    tmp_path: Path, algorithm: str, why: str
) -> None:
    m = compile_manifest(tmp_path)
    m["config"]["training"]["algorithm"] = algorithm  # edited after compilation
    with pytest.raises(ConfigError, match=why):
        RunConfig.from_contract(parse(m))


# ---- optimizer.min_lr ----------------------------------------------------------------------
def test_min_lr_is_the_floor_of_the_decay(tmp_path: Path) -> None:
    cfg = TrainerConfig.from_contract(
        contract(
            tmp_path,
            optimizer={"lr": 1e-3, "min_lr": 1e-4, "schedule": "cosine"},
            training={"num_rollouts": 10},
        )
    )
    assert cfg.min_lr_ratio == pytest.approx(0.1)
    fn = lr_multiplier(cfg.schedule, warmup_steps=0, total_steps=cfg.total_steps, min_ratio=0.1)
    assert fn(cfg.total_steps) == pytest.approx(0.1)
    assert fn(0) == pytest.approx(1.0)
    m = compile_manifest(tmp_path)
    m["config"]["optimizer"].update(lr=1e-4, min_lr=1e-3)
    with pytest.raises(ValueError, match="min_lr"):
        TrainerConfig.from_contract(parse(m))


# ---- trainer.fp32_lm_head ------------------------------------------------------------------
@pytest.mark.parametrize(("fp32", "dtype"), [(True, torch.float32), (False, torch.bfloat16)])
def test_fp32_lm_head_keeps_logits_in_float32_under_bf16_autocast(
    fp32: bool, dtype: torch.dtype
) -> None:
    tr = Trainer(TrainerConfig(bf16_autocast=True, fp32_lm_head=fp32))
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = tr.model(torch.tensor([[1, 2, 3]]))
        assert logits.dtype == dtype
    finally:
        tr.close()


# ---- rewards.length_penalty / rewards.exclude_truncated ------------------------------------
def _sample(n: int, finish: str = "stop", reward: float = 1.0) -> Sample:
    return Sample(
        prompt_id="p",
        index=0,
        prompt_ids=[1],
        response_ids=[2] * n,
        logprobs=[-0.5] * n,
        finish_reason=finish,
        reward=reward,
    )


def test_length_penalty_and_truncation_exclusion() -> None:
    shaping = Shaping.from_contract(
        RewardsSection.model_validate(
            {
                "length_penalty": {"enabled": True, "target_tokens": 4, "coef": 0.1},
                "exclude_truncated": True,
            }
        )
    )
    short, long_, cut = _sample(3), _sample(9), _sample(9, finish="length")
    shaping.apply([Group(prompt=None, samples=[short, long_, cut])])
    assert short.reward == pytest.approx(1.0)
    assert long_.reward == pytest.approx(0.5)  # 5 tokens over x 0.1
    assert (short.trained, long_.trained, cut.trained) == (True, True, False)
    converted = TrainerAdapter._convert([short, cut])
    assert converted[0].loss_mask is None
    assert converted[1].loss_mask == [0] * 9
    off = Shaping.from_contract(RewardsSection())
    s = _sample(5000, finish="length")
    off.apply([Group(prompt=None, samples=[s])])
    assert s.reward == 1.0 and s.trained


def test_collector_applies_shaping_before_advantages() -> None:
    def generate(ids: list[int], sampling: dict[str, Any], seeds: list[int]) -> list[Any]:
        return [
            {
                "text": "x",
                "output_ids": [7] * (2 + 8 * i),
                "meta_info": {"output_token_logprobs": [[-0.1, 7, None]] * (2 + 8 * i)},
            }
            for i in range(len(seeds))
        ]

    class Always:
        def score_batch(self, items: list[Any]) -> list[Any]:
            from runtime.rewards.base import RewardResult

            return [RewardResult(1.0) for _ in items]

    collector = Collector(
        generate,
        lambda p: [1],
        lambda name: Always(),  # type: ignore[arg-type,return-value]
        CollectSettings(
            samples_per_prompt=2,
            sampling_params={},
            run_seed=0,
            shaping=Shaping(length_penalty=True, target_tokens=2, coef=0.05),
        ),
    )
    prompt = Prompt("p0", "t", [{"role": "user", "content": "q"}], "1", "v")
    groups, _ = collector.collect(lambda n: [prompt][:n], 1, 0)
    short, long_ = groups[0].samples
    assert long_.reward == pytest.approx(1.0 - 0.4)
    assert short.advantage > 0 > long_.advantage  # the shaped reward drives the advantage


# ---- optimizer.use_rollout_logprobs / scoring_pass / scoring checks --------------------------
class RecordingTrainer:
    def __init__(self, ratio: float = 1.0) -> None:
        self.scored = 0
        self.olds: list[list[float] | None] = []
        self.ratio = ratio

    def compute_logprobs(self, samples: Any) -> list[list[float]]:
        self.scored += 1
        return [[-0.25] * len(s.response_ids) for s in samples]

    def train_step(self, samples: Any) -> dict[str, float]:
        self.olds.extend(s.old_logprobs for s in samples)
        return {"loss": 0.0, "ratio_max": self.ratio, "ratio_min": 1.0}

    def state_dict_for_publication(self) -> dict[str, Any]:
        return {}


def _train_loop(cfg: Any, trainer: RecordingTrainer) -> GRPOLoop:
    sampler = PromptSampler([Prompt("p", "t", [], "1", "v")], seed=0)
    collector = Collector(
        lambda *a: [],
        lambda p: [1],
        lambda n: None,
        CollectSettings(1, {}, 0),  # type: ignore[arg-type,return-value]
    )
    return GRPOLoop(
        cfg,
        trainer,
        collector,
        sampler,
        None,
        MetricsWriter(cfg.paths.metrics),
        LoopState(),
    )


def test_rollout_logprob_anchor_pins_the_engine_logprobs(tmp_path: Path) -> None:
    tr = RecordingTrainer()
    loop = _train_loop(_cfg(tmp_path, optimizer={"use_rollout_logprobs": True}), tr)
    loop._train([_sample(3)])
    assert tr.scored == 0 and tr.olds == [[-0.5, -0.5, -0.5]]


def test_required_scoring_pass_runs_every_update(tmp_path: Path) -> None:
    tr = RecordingTrainer()
    loop = _train_loop(_cfg(tmp_path, optimizer={"scoring_pass": True}), tr)
    for _ in range(3):
        loop._train([_sample(2)])
    assert tr.scored == 3 and tr.olds[-1] == [-0.25, -0.25]


def test_skipped_scoring_pass_is_checked_at_its_interval(tmp_path: Path) -> None:
    tr = RecordingTrainer()
    cfg = _cfg(tmp_path, optimizer={"scoring_pass": False, "scoring_check_interval": 2})
    loop = _train_loop(cfg, tr)
    metrics = [loop._train([_sample(2)])[0] for _ in range(5)]
    # checks on updates 0, 2, 4 (first update of the process, then every 2)
    assert tr.scored == 3
    assert [("train/scoring_check_gap" in m) for m in metrics] == [True, False, True, False, True]
    assert tr.olds[1] is None  # skipped updates read the old policy from the training forward


def test_skipped_scoring_pass_check_fails_past_tolerance(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, optimizer={"scoring_pass": False, "scoring_check_tolerance": 1e-3})
    loop = _train_loop(cfg, RecordingTrainer(ratio=1.01))
    with pytest.raises(MismatchError, match="scoring_check_tolerance"):
        loop._train([_sample(2)])


# ---- inference.server_concurrency / async.producer_budget ----------------------------------
def test_in_flight_groups_follow_server_concurrency_and_producer_budget(tmp_path: Path) -> None:
    inf = {"prompts_per_collection": 64, "samples_per_prompt": 8, "max_running_requests": 64}
    wide = _cfg(tmp_path, inference={**inf, "server_concurrency": 64})
    narrow = _cfg(tmp_path, inference={**inf, "server_concurrency": 16})
    assert rollout_concurrency(wide) == 64  # one HTTP slot per group request, one engine
    assert rollout_concurrency(narrow) == 16
    budget = _cfg(
        tmp_path,
        inference={**inf, "server_concurrency": 64},
        **{"async": {"enabled": True, "producer_budget": 24}},
    )
    assert rollout_concurrency(budget) == 3  # 24 samples in flight = 3 groups of 8


# ---- data.prompt_data / data.reward_config -------------------------------------------------
def test_prompt_data_pool_with_its_verifier_registry(tmp_path: Path) -> None:
    prompts = [
        Prompt(
            f"q{i}",
            "arithmetic",
            [{"role": "user", "content": f"{i}+1="}],
            str(i + 1),
            "arithmetic",
        )
        for i in range(3)
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(p.to_json()) + "\n" for p in prompts))
    reg = tmp_path / "verifiers.json"
    reg.write_text(json.dumps({"arithmetic": {"factory": None, "config": {}}}))
    pool = DataSection(prompt_data=str(data), reward_config=str(reg))
    train, ev = load_prompts(pool)
    assert [p.id for p in train] == ["q0", "q1", "q2"] and ev == []
    reg.write_text(json.dumps({"math": {}}))
    with pytest.raises(DataManifestError, match="'arithmetic' is not in the verifier registry"):
        load_prompts(pool)
    cfg = _cfg(tmp_path, data={"tasks": None, "prompt_data": str(data), "reward_config": str(reg)})
    assert cfg.data.tasks is None  # a prompt_data run is a valid config


# ---- [compiler_cache] ------------------------------------------------------------------------
def test_compiler_cache_private_dirs_generations_and_budget(tmp_path: Path) -> None:
    from runtime.compiler_cache import CacheSession, CompilerCache
    from runtime.node.supervisor import Supervisor

    shared = tmp_path / "shared" / "tmp-7d"
    cache = CompilerCache(shared_root=shared, max_storage_bytes=1000)
    first = CacheSession(cache, tmp_path / "a")
    env_e, env_t = first.env_for("engine:0"), first.env_for("trainer")
    assert env_e["TRITON_CACHE_DIR"] != env_t["TRITON_CACHE_DIR"]  # private per process
    # a real child process sees its own directories
    sup = Supervisor(log_dir=tmp_path / "logs", env_for=first.env_for)
    child = sup.start(
        "engine:0",
        [sys.executable, "-c", "import os; print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"],
    )
    child.proc.wait(30)
    assert env_e["TORCHINDUCTOR_CACHE_DIR"] in child.log_path.read_text()
    kernel = Path(env_e["TRITON_CACHE_DIR"]) / "abc" / "k.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"x" * 100)
    gen = first.publish_now()
    assert gen is not None and gen.parent == shared / "generations"
    assert first.publish_now() is None  # unchanged caches publish nothing new
    assert not list(shared.glob(".tmp-*"))  # published atomically, no partial left
    first.close(publish=False)
    # a later job starts from the newest complete generation
    later = CacheSession(cache, tmp_path / "b")
    assert later.restored_from == gen
    seeded = Path(later.env_for("engine:0")["TRITON_CACHE_DIR"]) / "abc" / "k.cubin"
    assert seeded.read_bytes() == b"x" * 100
    # over the byte budget: skipped, never an error
    big = Path(later.env_for("trainer")["TRITON_CACHE_DIR"]) / "big"
    big.write_bytes(b"y" * 2000)
    assert later.publish_now() is None
    later.close(publish=False)
    off = CacheSession(CompilerCache(enabled=False), tmp_path / "c")
    assert off.env_for("trainer") == {}
    off.close()


def test_compiler_cache_env_of_the_beaker_job(tmp_path: Path, monkeypatch: Any) -> None:
    """The job spec's cache variables are what the runtime reads (golden: multinode YAML)."""
    from compiler.emit.beaker import _cache_env
    from runtime.compiler_cache import CacheSession, CompilerCache, CompilerCacheError

    shared = str(tmp_path / "tmp-7d")
    env = _cache_env({"enabled": True, "shared_root": shared})
    assert _cache_env({"enabled": False, "shared_root": shared}) == {}
    monkeypatch.setenv("RLC_COMPILER_CACHE_DIR", str(tmp_path / "local"))
    cache = CompilerCache.from_contract(CompilerCacheSection(shared_root=shared), env=env)
    session = CacheSession(cache)  # private caches under the job's node-local directory
    assert session.base.parent == tmp_path / "local"
    assert session.env_for("trainer")["TRITON_CACHE_DIR"].startswith(str(tmp_path / "local"))
    session.close(publish=False)
    with pytest.raises(CompilerCacheError, match="edited after compile"):
        CompilerCache.from_contract(CompilerCacheSection(shared_root="/elsewhere/tmp-1d"), env=env)


def test_compiler_cache_restore_off_and_publish_interval(tmp_path: Path) -> None:
    """``restore = false`` starts from empty caches; the publisher publishes every
    ``publish_interval_seconds`` from its thread (not only at exit)."""
    import time

    from runtime.compiler_cache import CacheSession, CompilerCache

    shared = tmp_path / "tmp-7d"
    seed = CacheSession(CompilerCache(shared_root=shared), tmp_path / "a")
    (Path(seed.env_for("trainer")["TRITON_CACHE_DIR"]) / "k").parent.mkdir(parents=True)
    (Path(seed.env_for("trainer")["TRITON_CACHE_DIR"]) / "k").write_bytes(b"x")
    assert seed.publish_now() is not None
    seed.close(publish=False)
    fresh = CacheSession(CompilerCache(shared_root=shared, restore=False), tmp_path / "b")
    assert fresh.restored_from is None
    assert not list(Path(fresh.env_for("trainer")["TRITON_CACHE_DIR"]).parent.rglob("k"))
    fresh.close(publish=False)
    timed = CacheSession(
        CompilerCache(shared_root=shared, publish_interval_seconds=0.2), tmp_path / "c"
    )
    kernel = Path(timed.env_for("engine:0")["TORCHINDUCTOR_CACHE_DIR"]) / "new.py"
    kernel.parent.mkdir(parents=True)
    timed.start_publisher()
    kernel.write_text("compiled")
    deadline = time.monotonic() + 30
    while not timed.published and time.monotonic() < deadline:
        time.sleep(0.05)
    assert timed.published, "the publisher thread did not publish within its interval"
    timed.close(publish=False)


def test_compiler_cache_that_cannot_be_published_warns_and_cleans_up(
    tmp_path: Path, capsys: Any
) -> None:
    """A full local disk at the end of a run (here a real short write: the file size limit)
    costs the next job its warm caches, not this run: one warning line, the private caches
    removed, no exception out of ``close``."""
    import resource
    import signal

    from runtime.compiler_cache import CacheSession, CompilerCache

    session = CacheSession(CompilerCache(shared_root=tmp_path / "tmp-7d"), tmp_path / "a")
    kernel = Path(session.env_for("trainer")["TRITON_CACHE_DIR"]) / "k.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"x" * 256 * 1024)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, hard))
    try:
        session.close()
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)
    err = capsys.readouterr().err
    assert "rlc: warning: compiler cache not published" in err and "File too large" in err
    assert not session.base.exists() and not session.published


# ---- trainer.attention_backend ---------------------------------------------------------------
def test_attention_backend_is_the_trainers(tmp_path: Path) -> None:
    """The compiled backend serves the trainer's attention; flex and sdpa agree on logprobs."""
    from runtime.models.attention import DocMaskedSDPABackend, FlexDocAttentionBackend
    from runtime.trainer import Sample as TrainSample

    out = {}
    for backend, cls in (("sdpa", DocMaskedSDPABackend), ("flex", FlexDocAttentionBackend)):
        # the rules keep flex to GPU runs; the trainer honours either (from_contract
        # carries the field, tests/unit/test_runtime_config.py)
        cfg = TrainerConfig(model_source="builtin:tiny", attention_backend=backend)
        tr = Trainer(cfg)
        kinds = {type(m) for m in tr.model.modules() if "Backend" in type(m).__name__}
        assert kinds == {cls}, kinds
        samples = [TrainSample([1, 2, 3], [4, 5, 6], 1.0), TrainSample([7, 8], [9, 10], -1.0)]
        out[backend] = torch.cat(tr.compute_logprobs(samples))
    assert torch.allclose(out["sdpa"], out["flex"], atol=1e-5)


# ---- [tracking] W&B --------------------------------------------------------------------------
def test_wandb_offline_run_is_written_next_to_metrics(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    from runtime.tracking import WandbSink

    sink = WandbSink.from_contract(
        TrackingSection(
            wandb_mode="offline",
            wandb_project="p",
            wandb_run_name="r",
            wandb_group="g",
            wandb_team="team",
            log_interval=2,
        )
    )
    run = sink.start(tmp_path / "wandb", {"name": "t"}, run_id="abc123")
    assert run is not None
    assert (run.run.project, run.run.name, run.run.group) == ("p", "r", "g")
    assert run.run.entity == "team"  # wandb_team is the W&B entity
    logged: list[int] = []
    inner_log = run.run.log
    run.run.log = lambda values, step: (logged.append(step), inner_log(values, step=step))
    for c in range(4):
        run.log({"collection": c, "reward/mean": 0.1 * c, "note": "x"})
    run.finish()
    assert logged == [0, 2]  # every log_interval collections
    assert list((tmp_path / "wandb").rglob("run-abc123.wandb"))
    assert WandbSink.from_contract(TrackingSection()).start(tmp_path / "none", {}, "x") is None
