"""One trainer rank for the distributed parity tests (run as a real process per rank).

Rank 0 drives (one GRPO update, log-probs, publication gather, optional checkpoint save or
restore) and writes what it saw to ``OUT``; the other ranks follow it like
``python -m runtime.trainer.ranks`` does.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import torch

from runtime.checkpoints import CheckpointManager
from runtime.checkpoints.manager import CheckpointMismatch
from runtime.trainer import Sample, Trainer, TrainerConfig


def routing(rng: random.Random, tokens: int, layers: int = 2, experts: int = 4) -> list:
    """A recorded top-2 routing per token (distinct experts), as engines return it."""
    out = []
    for _ in range(tokens - 1):
        first = rng.randrange(experts)
        out.append([[first, (first + 1 + rng.randrange(experts - 1)) % experts]] * layers)
    return out


def batch(
    seed: int = 0, groups: int = 4, per_group: int = 2, replay: bool = False
) -> list[Sample]:
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


def main() -> int:
    args = json.loads(sys.argv[1])
    out = Path(args["out"])
    cfg = TrainerConfig(
        model_source=args["model"],
        lr=1e-3,
        clip_grad=0.5,
        sequence_packing=args.get("packing", True),
        packing_max_tokens=48,
        max_row_tokens=64,
        expert_parallel=args.get("ep", 1),
        world_size=int(os.environ.get("WORLD_SIZE", "1")),
        router_aux_loss_coef=args.get("aux"),
        router_z_loss_coef=args.get("z"),
        router_replay=bool(args.get("replay")),
    )
    trainer = Trainer(cfg)
    if trainer.rank != 0:
        trainer.follow()
        return 0
    result: dict = {"world_size": trainer.world_size}
    manager = CheckpointManager(args["ckpt"]) if args.get("ckpt") else None
    try:
        if args.get("restore"):
            assert manager is not None
            data = trainer.restore_checkpoint(manager)
            result["restored_step"] = None if data is None else data.step
        replay = bool(args.get("replay"))
        m = trainer.train_step(batch(replay=replay))
        result["metrics"] = m
        lps = trainer.compute_logprobs(batch(1, replay=replay))
        result["logprobs"] = [t.tolist() for t in lps]
        if args.get("save"):
            assert manager is not None
            trainer.save_checkpoint(manager, trainer.step)
    except CheckpointMismatch as exc:
        result["refused"] = str(exc)
    sd = trainer.state_dict_for_publication()
    torch.save(sd, out.with_suffix(".pt"))
    out.write_text(json.dumps(result))
    trainer.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
