"""The on-policy distillation loss: token-level gradients, what it ignores (unknown teacher
log-probs, masked tokens, prompt and padding positions), the GRPO mix, and one real
trainer step that moves the student toward the teacher."""

from __future__ import annotations

import math

import pytest
import torch

from runtime.trainer.distill import DistillConfig, opd_loss
from runtime.trainer.grpo import GRPOConfig
from runtime.trainer.packing import IGNORE, pack_samples, pad_row
from runtime.trainer.trainer import Trainer, TrainerConfig
from runtime.trainer.types import Sample

NAN = float("nan")


def _loss(
    s: list[float],
    t: list[float],
    *,
    adv: list[float] | None = None,
    mask: list[float] | None = None,
    distill: DistillConfig | None = None,
    divisor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    logp = torch.tensor(s, requires_grad=True)
    n = len(s)
    loss, sums = opd_loss(
        logp,
        teacher_logp=torch.tensor(t),
        advantages=torch.tensor(adv if adv is not None else [0.0] * n),
        mask=torch.tensor(mask if mask is not None else [1.0] * n),
        old_logp=None,
        rollout_logp=None,
        ref_logp=None,
        entropy=None,
        cfg=GRPOConfig(),
        distill=distill or DistillConfig(),
        token_divisor=divisor if divisor is not None else float(n),
    )
    loss.backward()
    assert logp.grad is not None
    return loss, logp.grad, sums


def test_reverse_kl_gradient_is_the_per_token_log_ratio() -> None:
    s, t = [-1.0, -2.0, -0.5], [-0.2, -2.5, -0.5]
    _, grad, sums = _loss(s, t, distill=DistillConfig(coef=2.0))
    # on-policy (ratio 1): d loss / d s_i = coef * (s_i - t_i) / tokens
    want = [2.0 * (a - b) / 3 for a, b in zip(s, t, strict=True)]
    assert grad.tolist() == pytest.approx(want)
    assert float(sums["opd_kl"]) == pytest.approx(sum(a - b for a, b in zip(s, t, strict=True)))
    assert float(sums["opd_tokens"]) == 3


def test_unknown_and_masked_tokens_carry_no_distillation() -> None:
    _, grad, sums = _loss([-1.0, -1.0, -1.0], [NAN, -3.0, -3.0], mask=[1.0, 0.0, 1.0])
    assert grad.tolist() == pytest.approx([0.0, 0.0, (-1.0 + 3.0) / 3])
    assert float(sums["opd_tokens"]) == 1
    assert float(sums["opd_kl"]) == pytest.approx(2.0)


def test_reward_weight_mixes_the_grpo_advantage() -> None:
    s, t, adv = [-1.0, -1.0], [-1.0, -1.0], [0.5, 0.5]  # teacher agrees: only rewards pull
    _, none, _ = _loss(s, t, adv=adv)  # pure distillation ignores the advantage
    assert none.tolist() == pytest.approx([0.0, 0.0])
    _, mixed, _ = _loss(s, t, adv=adv, distill=DistillConfig(reward_weight=2.0))
    assert mixed.tolist() == pytest.approx([-2.0 * 0.5 / 2] * 2)


def test_k3_is_added_and_differentiated_directly() -> None:
    s, t = [-1.0, -3.0], [-2.0, -1.0]
    loss, grad, sums = _loss(s, t, distill=DistillConfig(loss="reverse_kl_k3", coef=0.5))
    k3 = [math.exp(b - a) - (b - a) - 1 for a, b in zip(s, t, strict=True)]
    assert float(loss) == pytest.approx(0.5 * sum(k3) / 2)
    # d k3 / d s = 1 - exp(t - s)
    assert grad.tolist() == pytest.approx(
        [0.5 * (1 - math.exp(b - a)) / 2 for a, b in zip(s, t, strict=True)]
    )
    assert float(sums["opd_k3"]) == pytest.approx(sum(k3))


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="loss"):
        DistillConfig(loss="forward_kl")
    with pytest.raises(ValueError, match="coef"):
        DistillConfig(coef=0.0)


def test_packing_puts_teacher_logprobs_at_the_response_targets_only() -> None:
    a = Sample([1, 2, 3], [4, 5], 0.0, teacher_logprobs=[-0.1, -0.2])
    b = Sample([6], [7, 8, 9], 0.0)  # not scored: NaN everywhere
    (row,) = pack_samples([a, b], max_tokens=64)
    t = row.teacher_logprobs
    assert t is not None
    have = ~torch.isnan(t)
    # position p-1 .. n-2 of a document predicts its response tokens; prompts predict nothing
    assert have.nonzero().flatten().tolist() == [2, 3]
    assert t[have].tolist() == pytest.approx([-0.1, -0.2])
    assert (row.targets[have] != IGNORE).all()
    padded = pad_row(row, 16)
    assert padded.teacher_logprobs is not None and padded.teacher_logprobs.shape[0] == 16
    assert torch.isnan(padded.teacher_logprobs[row.num_tokens :]).all()
    with pytest.raises(ValueError, match="teacher_logprobs"):
        Sample([1], [2, 3], 0.0, teacher_logprobs=[-1.0])
    (plain,) = pack_samples([b], max_tokens=None)
    assert plain.teacher_logprobs is None


def test_a_trainer_step_moves_the_student_toward_the_teacher() -> None:
    cfg = TrainerConfig(model_source="builtin:tiny", lr=1e-2, seed=3, distill=DistillConfig())
    trainer = Trainer(cfg)
    try:
        prompt, response = [5, 9, 11], [17, 23, 42, 8]
        before = trainer.compute_logprobs([Sample(prompt, response, 0.0)])[0]
        # a teacher sure of these tokens: the reverse KL pulls their student log-probs up
        teacher = [0.0] * len(response)
        metrics = trainer.train_step([Sample(prompt, response, 0.0, teacher_logprobs=teacher)])
        after = trainer.compute_logprobs([Sample(prompt, response, 0.0)])[0]
    finally:
        trainer.close()
    assert metrics["opd_tokens"] == len(response)
    assert metrics["opd_kl"] == pytest.approx(float(before.mean()), abs=1e-4)
    assert float(after.sum()) > float(before.sum()) + 0.1
