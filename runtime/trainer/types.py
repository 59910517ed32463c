"""The trainer's input record: one scored response with what the rollout knew about it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Sample:
    """One prompt + sampled response, ready for a GRPO update.

    ``rollout_logprobs`` are the engine's logprobs of ``response_ids`` (for TIS and the
    train/inference mismatch metric). ``old_logprobs`` optionally pins the PPO "old" policy
    (when one collection is split into several optimizer steps); without it the old policy
    is the current parameters (exact for one step per collection). ``loss_mask`` (per response
    token, 1 = trained) lets callers exclude e.g. truncated tails. ``routed_experts`` is used
    only when the trainer runs with ``router_replay``.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    advantage: float
    rollout_logprobs: list[float] | None = None
    old_logprobs: list[float] | None = None
    policy_version: int = 0
    loss_mask: list[int] | None = None
    reward: float | None = None
    group_id: Any = None
    # MoE experts recorded at rollout, for router replay: SGLang's wire form (base64 int32,
    # ``meta_info.routed_experts``) or an array ``(tokens - 1, moe_layers, top_k)`` whose row
    # ``j`` is the routing of token ``j`` of ``prompt_ids + response_ids``.
    routed_experts: Any = None
    # on-policy distillation: the teacher's logprobs of ``response_ids`` (NaN: not scored)
    teacher_logprobs: list[float] | None = None

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        if not self.prompt_ids:
            raise ValueError("a sample needs at least one prompt token")
        for name in ("rollout_logprobs", "old_logprobs", "loss_mask", "teacher_logprobs"):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"{name} has {len(value)} entries for {n} response tokens")

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)
