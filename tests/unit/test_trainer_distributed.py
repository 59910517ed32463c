"""The trainer over several real processes (gloo, CPU): FSDP2 and expert-parallel updates
(with a sharded KL reference, router losses over packed rows) match one rank on the same
batch; router losses do not depend on packing; publication from shards streams one bucket at
a time; bf16 mixed precision uses OLMo-core's policy; sharded checkpoints resume on the same
topology only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from compiled_run import edited_contract  # noqa: E402

from runtime.checkpoints import CheckpointManager  # noqa: E402
from runtime.checkpoints.manager import CheckpointMismatch  # noqa: E402
from runtime.engines.process import free_port  # noqa: E402
from runtime.trainer import Sample, Trainer, TrainerConfig  # noqa: E402
from runtime.trainer.split import split_indices  # noqa: E402

WORKER = Path(__file__).parent / "dist" / "parity_worker.py"
REF_BYTES_TINY = 788_736  # builtin:tiny's parameters, fp32
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


def _worker() -> Any:
    sys.path.insert(0, str(WORKER.parent))
    try:
        import parity_worker as w
    finally:
        sys.path.pop(0)
    return w


def _one_rank(args: dict[str, Any]) -> dict[str, Any]:
    """The same updates in this process, world 1 (the reference)."""
    w = _worker()
    trainer = Trainer(w.config(args))
    try:
        out = w.train(trainer, args)
        out["state"] = {k: v.clone() for k, v in trainer.state_dict_for_publication().items()}
        out["ref_bytes"] = trainer.reference_param_bytes()
        return dict(out)
    finally:
        trainer.close()


def _assert_same_update(one: dict[str, Any], many: dict[str, Any], world: int, ep: int) -> None:
    m1, m2 = one["metrics"], many["metrics"]
    for key in ("loss", "pg_loss", "kl", "entropy", "grad_norm", "response_tokens", "samples"):
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


def test_fsdp_world2_matches_world1_with_sharded_reference_and_checkpoints(
    tmp_path: Path,
) -> None:
    # two updates with a KL term: the first moves the policy off the frozen reference, the
    # second's loss and gradients include the KL (the reference is sharded like the policy)
    args = {"model": "builtin:tiny", "kl": 0.5, "steps": 2, "out": str(tmp_path / "w2.json")}
    one = _one_rank(args)
    assert one["metrics"]["kl"] > 0
    ckpt = tmp_path / "ckpt"
    two = _spawn(2, {**args, "ckpt": str(ckpt), "save": True})
    _assert_same_update(one, two, world=2, ep=1)
    # reference parameter bytes per rank: builtin:tiny holds 788,736 on one rank; each of
    # two FSDP ranks holds its shards only (measured: 394,368, exactly half)
    assert one["ref_bytes"] == REF_BYTES_TINY
    assert two["ref_bytes"] <= REF_BYTES_TINY // 2 + 1024
    step_dir = ckpt / "step-000002"
    assert (step_dir / "dist").is_dir() and not (step_dir / "model").exists()

    # world 2 resumes it: the next updates start from the saved weights and optimizer
    again = _spawn(
        2, {**args, "out": str(tmp_path / "again.json"), "ckpt": str(ckpt), "restore": True}
    )
    assert again["restored_step"] == 2
    assert again["metrics"]["step"] == 4.0

    # world 1 refuses it, naming both topologies
    trainer = Trainer(TrainerConfig(model_source="builtin:tiny"))
    try:
        with pytest.raises(CheckpointMismatch, match=r"world 2 \(EP1, cpu\).*world 1 \(EP1, cpu\)"):
            CheckpointManager(ckpt).restore(trainer)
    finally:
        trainer.close()


@pytest.mark.parametrize("model", ["builtin:tiny-moe", "builtin:tiny-hybrid-moe"])
def test_expert_parallel_ep2_matches_world1_with_router_losses_and_replay(
    tmp_path: Path, model: str
) -> None:
    # router losses are taken over the whole global batch: packed rows of up to 48 tokens,
    # split over two EP ranks, give world 1's update; replay executes the recorded experts,
    # the mismatch metric is summed over the ranks. The hybrid MoE mixes dense and MoE
    # blocks: EP shards only the MoE blocks' experts, the dense blocks are data parallel.
    args = {
        "model": model,
        "aux": 0.05,
        "z": 0.01,
        "replay": True,
        "out": str(tmp_path / "ep2.json"),
    }
    one = _one_rank(args)
    assert one["metrics"]["replay/decisions"] > 0
    two = _spawn(2, {**args, "ep": 2})
    _assert_same_update(one, two, world=2, ep=2)


@pytest.mark.parametrize("reduction", ["token", "response"])
def test_router_losses_do_not_depend_on_packing(reduction: str) -> None:
    """One sample per row, rows of up to 48 tokens and one row of everything: the same
    load-balancing and z losses, gradients and updated weights (world 1)."""
    args = {
        "model": "builtin:tiny-moe",
        "aux": 0.05,
        "z": 0.01,
        "aux_reduction": reduction,
        "z_reduction": reduction,
    }
    packings = [
        _one_rank({**args, "packing": False}),
        _one_rank({**args, "packing": True, "row": 48}),
        _one_rank({**args, "packing": True, "row": 4096}),
    ]
    rows = [p["metrics"]["rows"] for p in packings]
    assert len(set(rows)) == 3, rows  # three different packings of the same batch
    first = packings[0]
    assert first["metrics"]["router/aux_loss"] > 0 and first["metrics"]["router/z_loss"] > 0
    for other in packings[1:]:
        _assert_same_update(first, other, world=1, ep=1)


def test_publication_streams_buckets_from_shards_and_bf16_policy(tmp_path: Path) -> None:
    """World 2 publishes its (gathered) weights to an engine process over a gloo broadcast
    group: the engine then holds world 1's weights, and rank 0 never held more than one
    bucket of full tensors. The same ranks train with OLMo-core's bf16 mixed-precision
    policy (bf16 gathered parameters, fp32 master weights and gradient reduction)."""
    from runtime.engines.embedded.launch import start_embedded
    from runtime.publication.checksum import device_checksum

    port = free_port("127.0.0.1")
    engine = start_embedded(
        "builtin:tiny",
        port=port,
        log_path=tmp_path / "engine.log",
        max_running_requests=2,
        threads=1,
    )
    bucket = 64 * 1024
    try:
        args = {"model": "builtin:tiny", "bf16": True, "out": str(tmp_path / "pub.json")}
        two = _spawn(2, {**args, "publish_url": f"http://127.0.0.1:{port}", "bucket": bucket})
        import httpx

        served = httpx.get(
            f"http://127.0.0.1:{port}/get_weight_checksum", params={"kind": "wsum64"}, timeout=60
        ).json()["checksum"]
    finally:
        engine.stop()
    pub = two["publication"]
    ref = Trainer(_worker().config({"model": "builtin:tiny"}))
    try:
        assert served == device_checksum(ref.state_dict_for_publication())
    finally:
        ref.close()
    assert pub["buckets"] > 4 and pub["left_bytes"] == 0
    assert pub["peak_bytes"] <= max(bucket, pub["largest_bytes"])
    assert pub["peak_bytes"] < pub["model_bytes"] / 4  # never the whole model at once

    assert two["mixed_precision"] == [["torch.bfloat16", "torch.float32"]]
    assert two["master_dtypes"] == ["torch.float32"]
    one = _one_rank(args)  # world 1 under bf16 autocast: equal up to bf16 rounding
    for key in ("loss", "grad_norm"):
        assert two["metrics"][key] == pytest.approx(one["metrics"][key], rel=5e-2, abs=1e-3)


def test_model_dtype_picks_the_compute_dtype(tmp_path: Path) -> None:
    def cfg(dtype: str) -> TrainerConfig:
        return TrainerConfig.from_contract(edited_contract(tmp_path, {"model.dtype": dtype}))

    assert cfg("bfloat16").bf16_autocast is True
    assert cfg("float32").bf16_autocast is False
    assert TrainerConfig().bf16_autocast is None  # built by hand: by device


@pytest.mark.parametrize(
    ("model", "ep"),
    [("builtin:tiny", 1), ("builtin:tiny-moe", 2), ("builtin:tiny-moe", 4)],
    ids=["fsdp", "moe-ep2", "moe-ep4"],
)
def test_world4_matches_world1(tmp_path: Path, model: str, ep: int) -> None:
    """Four real rank processes: FSDP over 4, EP2 beside 2-way data parallel (the experts
    sharded over 2, each shard replicated twice), and EP4 (one expert per rank) give world 1's
    update on the same batch."""
    args: dict[str, Any] = {"model": model, "out": str(tmp_path / "w4.json")}
    if ep > 1:
        args.update({"aux": 0.05, "z": 0.01, "replay": True})
    else:
        args.update({"kl": 0.5, "steps": 2})
    one = _one_rank(args)
    four = _spawn(4, {**args, "ep": ep})
    _assert_same_update(one, four, world=4, ep=ep)
