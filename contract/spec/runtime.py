"""[runtime]: connection, retry and audit settings of the runtime."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld


class RuntimeSection(Section):
    health_timeout_s: float = fld(5.0, description="timeout of one health probe", gt=0.0)
    generate_timeout_s: float = fld(600.0, description="timeout of one generation request", gt=0.0)
    http_retries: int = fld(3, description="retries of a failed HTTP request", ge=0)
    retry_backoff_s: float = fld(0.5, description="first retry backoff (doubles)", ge=0.0)
    group_retries: int = fld(2, description="whole-group retries of failed generations", ge=0)
    startup_timeout_s: int | None = fld(
        None,
        description="seconds every coordinated start waits (engines, router, judges, the "
        "role registry, the trainer ranks' rendezvous); set launch.coordination.startup_timeout",
        derived="launch.coordination.startup_timeout",
        ge=1,
    )
    publish_timeout_s: float = fld(
        120.0, description="seconds for one weight publication to reach every engine", gt=0.0
    )
    publication_transport: Literal["disk", "tensor", "distributed"] | None = fld(
        None,
        description="how new weights reach the engines: a safetensors snapshot, tensor "
        "handles (CUDA IPC / shared memory) to engines on the trainer's node, or a "
        "torch.distributed broadcast (NCCL on GPUs, gloo on CPU) to engines anywhere",
        note="Unset, it follows the placement on GPUs: 'tensor' (CUDA IPC) when every "
        "embedded engine shares the trainer's node, 'distributed' (NCCL) when engines run on "
        "other nodes or SGLang engines have GPUs of their own, 'disk' where neither applies "
        "(SGLang sharing the trainer's GPUs, engines on several colocated nodes, engine_drain "
        "across nodes) and on CPU runs. Set 'disk' to keep safetensors snapshots.",
        derived="the placement (see note)",
    )
    weight_audit: bool = fld(
        True, description="compare engine and trainer weight checksums at start"
    )
    max_logprob_mismatch: float | None = fld(
        None,
        description="fail if the mean trainer/engine logprob gap exceeds this",
        aliases=("runtime.max_train_rollout_logprob_abs_diff",),
        ge=0.0,
    )
    seed: int | None = fld(None, description="trainer seed", derived="data.seed", ge=0)
