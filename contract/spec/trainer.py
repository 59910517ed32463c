"""[trainer]: the OLMo-core trainer."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class TrainerSection(Section):
    nodes: int = fld(
        1, description="trainer nodes", aliases=("trainer.trainer_num_nodes",), ge=1, le=256
    )
    gpus: int = fld(
        0,
        description="trainer GPUs per node (0: train on CPU)",
        aliases=("trainer.num_gpus",),
        ge=0,
        le=8,
    )
    cpu_processes: int = fld(
        1, description="trainer processes (gloo ranks) when gpus = 0", ge=1, le=16
    )
    device: Literal["cpu", "cuda"] | None = fld(
        None, description="trainer device", derived="'cuda' if trainer.gpus > 0 else 'cpu'"
    )
    expert_parallel: int = fld(
        1,
        description="expert-parallel degree (MoE); must divide the trainer world",
        aliases=("trainer.expert_parallel_size",),
        ge=1,
        le=1024,
    )
    tensor_parallel: int = fld(1, description="trainer tensor parallelism (only 1)", ge=1, le=64)
    pipeline_parallel: int = fld(
        1, description="trainer pipeline parallelism (only 1)", ge=1, le=64
    )
    context_parallel: int = fld(1, description="trainer context parallelism (only 1)", ge=1, le=64)
    micro_batch_size: int = fld(
        1,
        description="samples per micro-batch (only 1: one packed row of whole samples)",
        ge=1,
        le=1024,
    )
    dynamic_batching: bool = fld(False, description="dynamic batch sizing (not supported)")
    activation_recompute: bool = fld(
        True,
        description="recompute activations in backward (saves memory)",
        aliases=("trainer.activation_checkpointing",),
    )
    attention_backend: Literal["sdpa", "flex", "flash", "torch"] | None = fld(
        None,
        description="attention kernel",
        note="sdpa: torch SDPA with document masks (short documents attend chunk by chunk); "
        "flex: FlexAttention block masks "
        "(GPU); flash: flash-attention varlen (GPU, needs the flash-attn package); "
        "torch: plain attention without document isolation",
        derived="'flex' on GPU, 'sdpa' on CPU",
    )
    sequence_packing: bool = fld(
        False, description="pack whole samples into rows with document-isolated attention"
    )
    packing_max_tokens: int | None = fld(
        None,
        description="tokens per packed row",
        derived="inference.max_context_length when packing",
        ge=1,
        le=1048576,
    )
    row_specialization: Literal["static", "dynamic"] = fld(
        "dynamic",
        description="trainer rows: dynamic = sized to their samples; static = padded to "
        "packing_max_tokens (or the context without packing), one shape for every step",
    )
    fp32_lm_head: bool = fld(False, description="compute the LM head in float32")
    compile_model: bool | None = fld(
        None,
        description="torch.compile each transformer block and the LM head (OLMo-core's "
        "apply_compile: one trace serves every block)",
        note="on one NVIDIA H200 the 1B GRPO update ran 1.39x faster (MFU 31% -> 44%) and "
        "peaked 9.5 GiB lower; the compile runs in the start-up warm-up, beside the engines' "
        "graph capture. With activation_recompute the compiled blocks recompute inside their "
        "own graphs (OLMo-core's activation memory budget, 0) instead of under checkpoint "
        "wrappers. A dense model without dropout on one trainer rank scores its samples on "
        "the training graph (train mode, autograd on, result detached): the warm-up then "
        "compiles one pass instead of two, and the first update's ratio is exactly 1",
        derived="true on GPU for dense models, false otherwise",
    )
    router_aux_loss_coef: float = fld(
        0.0,
        description="MoE load-balancing loss weight (over the whole global batch: expert counts "
        "of every row and rank, gathered by one forward without gradient per update when > 0)",
        aliases=("trainer.router_aux_loss_weight",),
        ge=0.0,
    )
    router_z_loss_coef: float = fld(
        0.0,
        description="MoE router z-loss weight",
        aliases=("trainer.router_z_loss_weight",),
        ge=0.0,
    )
    router_aux_loss_reduction: Literal["token", "response"] = fld(
        "token", description="tokens the aux loss averages over: all, or response tokens only"
    )
    router_z_loss_reduction: Literal["token", "response"] = fld(
        "token", description="tokens the z-loss averages over (global batch): all, or responses"
    )
    router_replay: bool = fld(
        False,
        description="replay the experts recorded at rollout in the trainer forward (MoE)",
        aliases=("trainer.use_rollout_routing_replay",),
    )
