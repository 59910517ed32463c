"""[optimizer]: AdamW and the GRPO objective."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class OptimizerSection(Section):
    lr: float = fld(1e-6, description="learning rate", aliases=("optimizer.learning_rate",), ge=0.0)
    schedule: Literal["constant", "cosine", "linear"] = fld(
        "constant", description="learning-rate schedule", aliases=("optimizer.lr_decay_style",)
    )
    warmup_steps: int = fld(
        0, description="linear warmup optimizer steps", aliases=("optimizer.lr_warmup_iters",), ge=0
    )
    min_lr: float = fld(0.0, description="floor of decaying schedules", ge=0.0)
    weight_decay: float = fld(0.0, description="AdamW weight decay", ge=0.0)
    adam_beta1: float = fld(0.9, description="Adam beta1", ge=0.0, lt=1.0)
    adam_beta2: float = fld(0.95, description="Adam beta2", ge=0.0, lt=1.0)
    adam_eps: float = fld(1e-8, description="Adam epsilon", gt=0.0)
    clip_grad: float = fld(1.0, description="gradient-norm clip (0: off)", ge=0.0)
    eps_clip: float = fld(0.2, description="PPO ratio clip, low side", ge=0.0)
    eps_clip_high: float = fld(0.28, description="PPO ratio clip, high side", ge=0.0)
    kl_coef: float = fld(
        0.0,
        description="KL penalty to the initial policy",
        aliases=("optimizer.kl_loss_coef",),
        ge=0.0,
    )
    kl_estimator: Literal["k1", "k2", "k3"] = fld("k3", description="KL estimator")
    entropy_coef: float = fld(0.0, description="entropy bonus", ge=0.0)
    normalize_std: bool = fld(
        False,
        description="divide group advantages by the group's reward std",
        aliases=("optimizer.grpo_std_normalization",),
    )
    use_rollout_logprobs: bool = fld(
        False,
        description="use the engines' logprobs as the PPO anchor instead of a trainer scoring pass",
    )
    steps_per_collection: int | None = fld(
        None,
        description="optimizer updates per rollout collection",
        derived="prompts_per_collection * samples_per_prompt // global_batch_size",
        ge=1,
        le=64,
    )
    scoring_pass: bool | None = fld(
        None,
        description="run a separate pre-update scoring forward for old logprobs",
        derived="true if steps_per_collection != 1 or kl_coef > 0, else false (read from the training forward, checked)",
    )
    scoring_check_interval: int = fld(
        50, description="updates between checks of the skipped scoring pass", ge=0
    )
    scoring_check_tolerance: float | None = fld(
        None,
        description="allowed logprob gap for the scoring-pass check",
        note="eager kernels give the training forward and the scoring pass the same bits; "
        "a compiled trainer runs two differently fused programs (with and without autograd) "
        "whose bf16 roundings differ: 0.024 largest gap over a collection of gpu-dense.toml's "
        "1B on one NVIDIA H200. Dropout moves it far more",
        derived="0.05 with trainer.compile_model, else 0.001",
        ge=0.0,
    )
