"""[teacher] and [distillation]: on-policy distillation (``training.algorithm = "opd"``).

The teacher is a second, frozen model served by a managed engine beside the student's
rollout engines. After each collection the runtime asks it for the log-probabilities of the
tokens the student sampled (one prefill per sample, no generation) and trains the student
toward it with a per-token distillation loss, optionally mixed with the GRPO reward term.
"""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class TeacherSection(Section):
    source: str | None = fld(
        None,
        description="teacher checkpoint: an HF directory, an OLMo-core checkpoint directory, "
        "or `builtin:NAME` (loaded like model.source)",
        note='required with training.algorithm = "opd"; it must share the student\'s '
        "tokenizer (the teacher scores the student's token ids). Relative paths resolve "
        "against the spec file's directory.",
        min_length=1,
    )
    format: Literal["hf", "olmo_core", "builtin"] | None = fld(
        None,
        description="teacher checkpoint format",
        derived="'builtin' for builtin:NAME sources, else 'hf'",
    )
    hf_template: str | None = fld(
        None,
        description="HF config/tokenizer template of an OLMo-core teacher checkpoint",
    )
    engine: Literal["embedded", "sglang"] | None = fld(
        None,
        description="the teacher's server: embedded (CPU or GPU) or sglang",
        derived="inference.engine",
    )
    gpus: int | None = fld(
        None,
        description="GPUs of the teacher server (its tensor parallelism); 0 serves it on CPU",
        derived="1 on a GPU run, 0 on a CPU run",
        ge=0,
        le=8,
    )
    dtype: Literal["bfloat16", "float32"] | None = fld(
        None, description="teacher parameter dtype for serving", derived="model.dtype"
    )
    max_running_requests: int = fld(
        64, description="sequences the teacher scores at once", ge=1, le=4096
    )
    max_context_length: int | None = fld(
        None,
        description="the teacher server's context window",
        derived="inference.max_context_length + 1 (a full-context sample is scored whole; "
        "servers refuse an input as long as their context)",
        ge=2,
        le=1048577,
    )
    mem_fraction_static: float | None = fld(
        None,
        description="SGLang static memory fraction of the teacher's GPUs",
        derived="0.8 (the teacher has its GPUs to itself)",
        gt=0.0,
        le=1.0,
    )
    seed: int | None = fld(
        None,
        description="the teacher server's seed (also the init of a builtin teacher)",
        derived="inference.seed + 1 (a builtin teacher is not the student's initial model)",
        ge=0,
    )
    num_params: int | None = fld(
        None,
        description="teacher parameter count for the plan's memory estimate",
        derived="known for builtin models and readable HF checkpoints",
        ge=1,
    )


class DistillationSection(Section):
    loss: Literal["reverse_kl", "reverse_kl_k3"] = fld(
        "reverse_kl",
        description="per-token distillation loss on the student's own samples",
        note="reverse_kl: the student's per-token reverse KL to the teacher, "
        "log p_student - log p_teacher of each sampled token, enters as a negative per-token "
        "advantage of the policy-gradient loss (same clip and TIS as GRPO); its expectation "
        "is the gradient of KL(student || teacher). reverse_kl_k3: the k3 estimator "
        "exp(t - s) - (t - s) - 1 added to the loss and differentiated directly (lower "
        "variance, biased).",
    )
    coef: float = fld(1.0, description="weight of the distillation term", gt=0.0)
    reward_weight: float = fld(
        0.0,
        description="weight of the GRPO reward advantage beside the distillation term "
        "(0: pure distillation; rewards are still scored and logged)",
        ge=0.0,
    )
