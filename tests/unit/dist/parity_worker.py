"""One trainer rank for the distributed parity tests (run as a real process per rank).

Rank 0 drives (GRPO updates, log-probs, publication gather, optional publication to an
engine, checkpoint save or restore) and writes what it saw to ``OUT``; the other ranks
follow it like ``python -m runtime.trainer.ranks`` does.
"""

from __future__ import annotations

import json
import os
import random
import sys
import weakref
from pathlib import Path
from typing import Any

import torch

from runtime.checkpoints import CheckpointManager
from runtime.checkpoints.manager import CheckpointMismatch
from runtime.trainer import GRPOConfig, Sample, Trainer, TrainerConfig
from runtime.trainer.parallel import mixed_precision


def routing(rng: random.Random, tokens: int, layers: int = 2, experts: int = 4) -> list:
    """A recorded top-2 routing per token (distinct experts), as engines return it."""
    out = []
    for _ in range(tokens - 1):
        first = rng.randrange(experts)
        out.append([[first, (first + 1 + rng.randrange(experts - 1)) % experts]] * layers)
    return out


def batch(seed: int = 0, groups: int = 4, per_group: int = 2, replay: bool = False) -> list[Sample]:
    rng = random.Random(seed)
    out = []
    for g in range(groups):
        prompt = [rng.randrange(5, 600) for _ in range(rng.randrange(3, 9))]
        for _ in range(per_group):
            resp = [rng.randrange(5, 600) for _ in range(rng.randrange(2, 12))]
            out.append(
                Sample(
                    prompt,
                    resp,
                    advantage=rng.uniform(-1.0, 1.0),
                    rollout_logprobs=[-rng.uniform(0.5, 8.0) for _ in resp],
                    group_id=g,
                    routed_experts=routing(rng, len(prompt) + len(resp)) if replay else None,
                )
            )
    return out


def config(args: dict) -> TrainerConfig:
    """The trainer of a parity run (world 1 in the test process, or one rank here)."""
    return TrainerConfig(
        model_source=args["model"],
        lr=1e-3,
        clip_grad=0.5,
        sequence_packing=args.get("packing", True),
        packing_max_tokens=args.get("row", 48),
        max_row_tokens=max(64, args.get("row", 48)),
        expert_parallel=args.get("ep", 1),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        router_aux_loss_coef=args.get("aux"),
        router_z_loss_coef=args.get("z"),
        router_replay=bool(args.get("replay")),
        router_aux_loss_reduction=args.get("aux_reduction", "token"),
        router_z_loss_reduction=args.get("z_reduction", "token"),
        grpo=GRPOConfig(kl_coef=float(args.get("kl", 0.0))),
        bf16_autocast=args.get("bf16"),
    )


def train(trainer: Trainer, args: dict) -> dict:
    """``steps`` updates on the batch (the last one's metrics), then log-probs."""
    replay = bool(args.get("replay"))
    for _ in range(int(args.get("steps", 1))):
        metrics = trainer.train_step(batch(replay=replay))
    lps = trainer.compute_logprobs(batch(1, replay=replay))
    return {"metrics": metrics, "logprobs": [t.tolist() for t in lps]}


def publish(trainer: Trainer, url: str, bucket_bytes: int) -> dict:
    """Publish the weights to the engine at ``url`` over a gloo broadcast group, counting
    the bytes of gathered full tensors alive at once on this rank."""
    from runtime.engines.process import free_port
    from runtime.publication.distributed import DistributedPublisher

    alive = [0, 0]  # now, peak
    inner = trainer.gather_tensors

    def counted(*a: Any, **kw: Any) -> list[torch.Tensor]:
        out = inner(*a, **kw)
        for t in out:
            n = t.numel() * t.element_size()
            alive[0] += n
            weakref.finalize(t, lambda n=n: alive.__setitem__(0, alive[0] - n))
        alive[1] = max(alive)
        return out

    trainer.gather_tensors = counted  # type: ignore[method-assign]
    pub = DistributedPublisher(
        [url], 120, master_address="127.0.0.1", master_port=free_port(), bucket_bytes=bucket_bytes
    )
    try:
        state = trainer.state_dict_for_publication()
        res = pub.publish(state, 1)  # audited: the engine's checksum is the gathered state's
        sizes = [state.nbytes(n) for n in state]
    finally:
        pub.close()
        trainer.gather_tensors = inner  # type: ignore[method-assign]
    return {
        "buckets": res.buckets,
        "peak_bytes": alive[1],
        "left_bytes": alive[0],
        "model_bytes": sum(sizes),
        "largest_bytes": max(sizes),
    }


def main() -> int:
    args = json.loads(sys.argv[1])
    out = Path(args["out"])
    trainer = Trainer(config(args))
    if trainer.rank != 0:
        trainer.follow()
        return 0
    result: dict = {
        "world_size": trainer.world_size,
        "ref_bytes": trainer.reference_param_bytes(),
        "mixed_precision": sorted(mixed_precision(trainer.model)),
        "master_dtypes": sorted({str(p.dtype) for p in trainer.model.parameters()}),
    }
    manager = CheckpointManager(args["ckpt"]) if args.get("ckpt") else None
    try:
        if args.get("publish_url"):
            result["publication"] = publish(trainer, args["publish_url"], args["bucket"])
        if args.get("restore"):
            assert manager is not None
            data = trainer.restore_checkpoint(manager)
            result["restored_step"] = None if data is None else data.step
        result.update(train(trainer, args))
        if args.get("save"):
            assert manager is not None
            trainer.save_checkpoint(manager, trainer.step)
    except CheckpointMismatch as exc:
        result["refused"] = str(exc)
    sd = {k: v.clone() for k, v in trainer.state_dict_for_publication().items()}
    torch.save(sd, out.with_suffix(".pt"))
    out.write_text(json.dumps(result))
    trainer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
