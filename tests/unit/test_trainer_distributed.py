"""The trainer over several real processes (gloo, CPU): FSDP2 and expert-parallel updates
match one rank on the same batch; sharded checkpoints resume on the same topology only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from runtime.checkpoints import CheckpointManager  # noqa: E402
from runtime.checkpoints.manager import CheckpointMismatch  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.trainer import Sample, Trainer, TrainerConfig  # noqa: E402
from runtime.trainer.split import split_indices  # noqa: E402

WORKER = Path(__file__).parent / "dist" / "parity_worker.py"
ROOT = Path(__file__).resolve().parents[2]


def _spawn(world: int, args: dict[str, Any]) -> dict[str, Any]:
    """Run the worker as ``world`` real rank processes; rank 0's report."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(args)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    out = Path(args["out"])
    report = json.loads(out.read_text())
    report["state"] = torch.load(out.with_suffix(".pt"))
    return report


def _one_rank(args: dict[str, Any]) -> dict[str, Any]:
    """The same update in this process, world 1 (the reference)."""
    sys.path.insert(0, str(WORKER.parent))
    try:
        import parity_worker as w
    finally:
        sys.path.pop(0)
    trainer = Trainer(
        TrainerConfig(
            model_source=args["model"],
            lr=1e-3,
            clip_grad=0.5,
            sequence_packing=args.get("packing", True),
            packing_max_tokens=48,
            router_aux_loss_coef=args.get("aux"),
            router_z_loss_coef=args.get("z"),
            router_replay=bool(args.get("replay")),
        )
    )
    replay = bool(args.get("replay"))
    try:
        metrics = trainer.train_step(w.batch(replay=replay))
        logprobs = [t.tolist() for t in trainer.compute_logprobs(w.batch(1, replay=replay))]
        return {
            "metrics": metrics,
            "logprobs": logprobs,
            "state": trainer.state_dict_for_publication(),
        }
    finally:
        trainer.close()


def _assert_same_update(one: dict[str, Any], many: dict[str, Any], world: int, ep: int) -> None:
    m1, m2 = one["metrics"], many["metrics"]
    for key in ("loss", "pg_loss", "entropy", "grad_norm", "response_tokens", "samples"):
        assert m2[key] == pytest.approx(m1[key], rel=1e-5, abs=1e-6), key
    for key in ("router/aux_loss", "router/z_loss", "replay/route_mismatch", "replay/decisions"):
        if key in m1:
            assert m2[key] == pytest.approx(m1[key], rel=1e-5), key
    assert m2["trainer/world_size"] == world and m2["trainer/expert_parallel"] == ep
    for a, b in zip(one["logprobs"], many["logprobs"], strict=True):
        assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4)
    s1, s2 = one["state"], many["state"]
    assert s1.keys() == s2.keys()
    for k in s1:
        assert s2[k].shape == s1[k].shape, k
        assert torch.allclose(s1[k], s2[k], atol=1e-4), k


def _samples(groups: list[tuple[int, int]]) -> list[Sample]:
    out = []
    for g, (n, length) in enumerate(groups):
        for _ in range(n):
            out.append(Sample([1] * 3, [2] * length, 0.5, group_id=g))
    return out


def test_split_keeps_groups_whole_and_balances_tokens() -> None:
    samples = _samples([(2, 10), (2, 2), (2, 9), (2, 3), (2, 1)])
    shares = split_indices(samples, 2)
    assert sorted(i for s in shares for i in s) == list(range(len(samples)))
    for share in shares:
        groups = {samples[i].group_id for i in share}
        for g in groups:  # every sample of a group on the same rank
            assert all(i in share for i, s in enumerate(samples) if s.group_id == g)
    tokens = [sum(samples[i].num_tokens for i in s) for s in shares]
    assert abs(tokens[0] - tokens[1]) <= 10  # within the smallest groups, not 80 vs 0
    assert split_indices(samples, 2) == shares  # every rank computes the same split


def test_fsdp_world2_matches_world1_and_checkpoints_keep_topology(tmp_path: Path) -> None:
    args = {"model": "builtin:tiny", "out": str(tmp_path / "w2.json")}
    one = _one_rank(args)
    ckpt = tmp_path / "ckpt"
    two = _spawn(2, {**args, "ckpt": str(ckpt), "save": True})
    _assert_same_update(one, two, world=2, ep=1)
    step_dir = ckpt / "step-000001"
    assert (step_dir / "dist").is_dir() and not (step_dir / "model").exists()

    # world 2 resumes it: the second update starts from the saved weights and optimizer
    again = _spawn(
        2, {**args, "out": str(tmp_path / "again.json"), "ckpt": str(ckpt), "restore": True}
    )
    assert again["restored_step"] == 1
    assert again["metrics"]["step"] == 2.0

    # world 1 refuses it, naming both topologies
    trainer = Trainer(TrainerConfig(model_source="builtin:tiny"))
    try:
        with pytest.raises(CheckpointMismatch, match=r"world 2 \(EP1, cpu\).*world 1 \(EP1, cpu\)"):
            CheckpointManager(ckpt).restore(trainer)
    finally:
        trainer.close()


def test_expert_parallel_ep2_matches_world1_with_router_losses_and_replay(
    tmp_path: Path,
) -> None:
    # one sample per row: router losses are row-local, so rows must match across topologies;
    # replay executes the recorded experts, the mismatch metric is summed over the ranks
    args = {
        "model": "builtin:tiny-moe",
        "packing": False,
        "aux": 0.01,
        "z": 0.001,
        "replay": True,
        "out": str(tmp_path / "ep2.json"),
    }
    one = _one_rank(args)
    assert one["metrics"]["replay/decisions"] > 0
    two = _spawn(2, {**args, "ep": 2})
    _assert_same_update(one, two, world=2, ep=2)
