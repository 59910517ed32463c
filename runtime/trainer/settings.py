"""The trainer's settings (`TrainerConfig`) and how a compiled run sets them: plain data,
no torch, so what only shows or checks the settings (``--print-effective``,
``rlc plan --effective``) imports no tensor library."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from contract.run import RunContract
from contract.spec.root import Spec
from runtime.config import required

DEFAULT_PACKING_MAX_TOKENS = 8192
LOSSES = ("reverse_kl", "reverse_kl_k3")  # on-policy distillation losses (runtime.trainer.distill)


@dataclass
class GRPOConfig:
    eps_clip: float = 0.2
    eps_clip_high: float = 0.28
    kl_coef: float = 0.0
    kl_estimator: str = "k3"  # k1 | k2 | k3
    entropy_coef: float = 0.0
    off_policy_correction: str = "none"  # tis | none
    tis_clip: float = 2.0

    def __post_init__(self) -> None:
        if self.kl_estimator not in ("k1", "k2", "k3"):
            raise ValueError(f"kl_estimator must be k1, k2 or k3 (got {self.kl_estimator!r})")
        if self.off_policy_correction not in ("tis", "none"):
            raise ValueError(
                f"off_policy_correction must be tis or none (got {self.off_policy_correction!r})"
            )


@dataclass
class DistillConfig:
    loss: str = "reverse_kl"
    coef: float = 1.0
    reward_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"distillation loss must be one of {LOSSES} (got {self.loss!r})")
        if self.coef <= 0 or self.reward_weight < 0:
            raise ValueError("distillation coef must be > 0 and reward_weight >= 0")


@dataclass
class TrainerConfig:
    model_source: str = "builtin:tiny"
    seed: int = 0
    device: str = "cpu"
    lr: float = 1e-6
    schedule: str = "constant"
    warmup_steps: int = 0
    total_steps: int = 100
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    clip_grad: float | None = 1.0
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    distill: DistillConfig | None = None  # on-policy distillation (training.algorithm = "opd")
    sequence_packing: bool = True
    packing_max_tokens: int | None = None
    activation_recompute: bool = False
    compile_model: bool = False  # torch.compile each block and the LM head (OLMo-core's own)
    bf16_autocast: bool | None = None  # None: on for CUDA, off for CPU
    router_aux_loss_coef: float | None = None  # None keeps the model config's value
    router_z_loss_coef: float | None = None
    router_aux_loss_reduction: str = "token"  # "token": all tokens of a row; "response"
    router_z_loss_reduction: str = "token"
    router_replay: bool = False  # execute the experts recorded at rollout (Sample.routed_experts)
    expert_parallel: int = 1
    architecture: str | None = None
    hf_template: str | None = None  # tokenizer of an OLMo-core checkpoint (model.hf_template)
    chat_template: str | None = None  # model.chat_template: a template name or .jinja file
    fp32_lm_head: bool = False  # LM head (and logits) in float32 under bf16 autocast
    row_specialization: str = "dynamic"  # "dynamic": rows sized to their samples; "static"
    world_size: int = 1  # the compiled trainer world; the process group must match it
    nodes: int = 1  # trainer nodes (HSDP replicates across them)
    max_row_tokens: int | None = None  # the longest row (fixes MoE capacity under EP)
    attention_backend: str | None = None  # None keeps the loader's ("sdpa": dense doc masks)
    # launch.coordination.startup_timeout: the ranks' rendezvous and start-up gates, and
    # the bound of every trainer collective (a peer gone silent fails it, not the default 30 min)
    startup_timeout_s: float = 1800.0

    @classmethod
    def from_contract(cls, run: RunContract) -> TrainerConfig:
        """The trainer of a compiled run: every field from the contract (none is left to
        the defaults above, which serve direct construction in tests and benchmarks)."""
        return cls(**contract_settings(run))

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["grpo"] = dict(vars(self.grpo))
        out["distill"] = None if self.distill is None else dict(vars(self.distill))
        return out


def contract_settings(run: RunContract) -> dict[str, Any]:
    """Every `TrainerConfig` field, from the contract (tests/unit/test_runtime_config.py
    checks that none is missing)."""
    c = run.config
    model, trainer, opt, asy = c.model, c.trainer, c.optimizer, c.async_
    ctx = c.inference.max_context_length
    kw: dict[str, Any] = dict(
        model_source=model.source,
        seed=required(c.runtime.seed, "runtime.seed"),
        device=required(trainer.device, "trainer.device"),
        lr=opt.lr,
        schedule=opt.schedule,
        warmup_steps=opt.warmup_steps,
        min_lr_ratio=_min_lr_ratio(opt.lr, opt.min_lr),
        total_steps=run.plan.batch.total_optimizer_steps,
        weight_decay=opt.weight_decay,
        adam_beta1=opt.adam_beta1,
        adam_beta2=opt.adam_beta2,
        adam_eps=opt.adam_eps,
        clip_grad=opt.clip_grad,
        grpo=GRPOConfig(
            eps_clip=opt.eps_clip,
            eps_clip_high=opt.eps_clip_high,
            kl_coef=opt.kl_coef,
            kl_estimator=opt.kl_estimator,
            entropy_coef=opt.entropy_coef,
            off_policy_correction=(asy.off_policy_correction or "none") if asy.enabled else "none",
            tis_clip=asy.tis_clip,
        ),
        sequence_packing=trainer.sequence_packing,
        packing_max_tokens=trainer.packing_max_tokens or ctx,
        activation_recompute=trainer.activation_recompute,
        bf16_autocast=_compute_bf16(model.dtype),
        router_aux_loss_coef=trainer.router_aux_loss_coef,
        router_z_loss_coef=trainer.router_z_loss_coef,
        router_aux_loss_reduction=trainer.router_aux_loss_reduction,
        router_z_loss_reduction=trainer.router_z_loss_reduction,
        router_replay=trainer.router_replay,
        expert_parallel=trainer.expert_parallel,
        architecture=model.architecture,
        hf_template=model.hf_template,
        chat_template=model.chat_template,
        fp32_lm_head=trainer.fp32_lm_head,
        compile_model=required(trainer.compile_model, "trainer.compile_model"),
        row_specialization=trainer.row_specialization,
        world_size=run.plan.placement.trainer.world_size,
        nodes=trainer.nodes,
        max_row_tokens=max(trainer.packing_max_tokens or 0, ctx),
        attention_backend=trainer.attention_backend,
        startup_timeout_s=float(required(c.runtime.startup_timeout_s, "runtime.startup_timeout_s")),
        distill=_distill_config(c),
    )
    return kw


def _distill_config(c: Spec) -> DistillConfig | None:
    """The distillation loss of an ``opd`` run (None for GRPO)."""
    if c.training.algorithm != "opd":
        return None
    d = c.distillation
    return DistillConfig(loss=d.loss, coef=d.coef, reward_weight=d.reward_weight)


def _compute_bf16(dtype: Any) -> bool | None:
    """``model.dtype`` picks the trainer's compute dtype: bf16 compute (FSDP's param_dtype
    and autocast) over fp32 master weights, or fp32 throughout; None: by device."""
    if dtype is None:
        return None
    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"model.dtype must be bfloat16 or float32, not {dtype!r}")
    return dtype == "bfloat16"


def _min_lr_ratio(lr: float, min_lr: float) -> float:
    """``optimizer.min_lr`` as a fraction of the peak LR (the schedules' floor)."""
    if min_lr > lr:
        raise ValueError(f"optimizer.min_lr ({min_lr:g}) exceeds optimizer.lr ({lr:g})")
    return min_lr / lr if lr > 0 else 0.0
