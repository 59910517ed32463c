"""GRPO: group-relative advantages and the clipped, token-averaged policy loss.

The loss of one microbatch is returned as a *sum* over its tokens divided by the token count
of the whole global batch (all ranks, all microbatches), so accumulating gradients over
microbatches and summing them over ranks gives exact token-level averaging.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .settings import GRPOConfig


def group_advantages(
    rewards: Sequence[float], *, normalize_std: bool = False, eps: float = 1e-6
) -> list[float]:
    """``r - mean(group)``, optionally divided by the group's (population) std + eps."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    adv = [r - mean for r in rewards]
    if normalize_std:
        std = math.sqrt(sum(a * a for a in adv) / len(adv))
        adv = [a / (std + eps) for a in adv]
    return adv


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi."""
    log_ratio = ref_logp - logp
    if estimator == "k1":
        return -log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio.square()
    return torch.exp(log_ratio) - log_ratio - 1.0


METRIC_SUMS = (
    "loss",
    "pg_loss",
    "kl",
    "entropy",
    "clip_frac",
    "clip_low_frac",
    "clip_high_frac",
    "ratio",
    "tis_weight",
    "logprob_abs_diff",
)


def behaviour_logp(cur: torch.Tensor, old_logp: torch.Tensor | None) -> torch.Tensor:
    """The PPO "old" log-probs: ``old_logp`` where known, else ``cur`` (the current policy,
    detached), exact when a collection is one optimizer step."""
    return cur if old_logp is None else torch.where(torch.isnan(old_logp), cur, old_logp)


def grpo_loss(
    logp: torch.Tensor,
    *,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    old_logp: torch.Tensor | None,
    rollout_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    entropy: torch.Tensor | None,
    cfg: GRPOConfig,
    token_divisor: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss (sum over tokens / ``token_divisor``) and metric *sums* over masked tokens.

    ``old_logp`` entries that are NaN (or ``None``) fall back to ``logp.detach()``, the
    current policy, which is exact when a collection is one optimizer step.
    ``rollout_logp`` NaNs mean "unknown": TIS weight 1, excluded from the mismatch metric.
    """
    mask = mask.to(logp.dtype)
    cur = logp.detach()
    old = behaviour_logp(cur, old_logp)
    log_ratio = logp - old
    ratio = torch.exp(log_ratio)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - cfg.eps_clip, 1.0 + cfg.eps_clip_high)
    pg = torch.maximum(pg1, pg2)

    have_rollout = (
        torch.zeros_like(mask, dtype=torch.bool)
        if rollout_logp is None
        else ~torch.isnan(rollout_logp)
    )
    if rollout_logp is not None and cfg.off_policy_correction == "tis":
        safe = torch.where(have_rollout, rollout_logp, old)
        tis = torch.exp(old - safe).clamp(max=cfg.tis_clip).detach()
    else:
        tis = torch.ones_like(pg)
    per_token = pg * tis

    kl = torch.zeros_like(pg)
    if ref_logp is not None:
        kl = kl_penalty(logp, ref_logp, cfg.kl_estimator)
        if cfg.kl_coef:
            per_token = per_token + cfg.kl_coef * kl
    ent = entropy if entropy is not None else torch.zeros_like(pg)
    if cfg.entropy_coef and entropy is not None:
        per_token = per_token - cfg.entropy_coef * entropy

    loss = (per_token * mask).sum() / max(token_divisor, 1.0)

    with torch.no_grad():
        clipped_high = (ratio > 1.0 + cfg.eps_clip_high) & (advantages > 0)
        clipped_low = (ratio < 1.0 - cfg.eps_clip) & (advantages < 0)
        m = mask.detach()
        diff = torch.zeros_like(pg)
        if rollout_logp is not None:
            diff = torch.where(have_rollout, (cur - rollout_logp).abs(), diff)
        sums = {
            "loss": (per_token.detach() * m).sum(),
            "pg_loss": (pg.detach() * m).sum(),
            "kl": (kl.detach() * m).sum(),
            "entropy": (ent.detach() * m).sum(),
            "clip_frac": ((clipped_high | clipped_low).to(m.dtype) * m).sum(),
            "clip_low_frac": (clipped_low.to(m.dtype) * m).sum(),
            "clip_high_frac": (clipped_high.to(m.dtype) * m).sum(),
            "ratio": (ratio.detach() * m).sum(),
            "tis_weight": (tis * m).sum(),
            "logprob_abs_diff": (diff * m * have_rollout.to(m.dtype)).sum(),
            "rollout_tokens": (m * have_rollout.to(m.dtype)).sum(),
            "ratio_max": torch.where(m > 0, ratio.detach(), torch.zeros_like(ratio)).max()
            if m.numel()
            else torch.zeros(()),
            "ratio_min": torch.where(m > 0, ratio.detach(), torch.full_like(ratio, math.inf)).min()
            if m.numel()
            else torch.full((), math.inf),
        }
    return loss, sums
