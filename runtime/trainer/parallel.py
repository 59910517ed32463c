"""Sharding a loaded OLMo-core model over the trainer ranks with OLMo-core's own parallelism.

FSDP2 (``fully_shard`` as ``Transformer.apply_fsdp`` applies it) on one node, HSDP (shard
within a node, replicate across nodes) on several, and for ``expert_parallel > 1`` OLMo-core's
expert-parallel path: ``apply_ep`` over the ``dp_shard`` mesh dimension with HSDP, as OLMo-core
requires. Gradients are SUMMED over ranks (FSDP's divide factor set to 1): the GRPO loss is
already normalised by the global token count, so the update equals one rank on the whole batch.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


@dataclass(frozen=True)
class MeshPlan:
    """How the trainer world is laid out: ``replicas`` x ``shard`` ranks."""

    world_size: int
    replicas: int
    shard: int
    expert_parallel: int

    @property
    def hsdp(self) -> bool:
        return self.replicas > 1 or self.expert_parallel > 1


def plan_mesh(world_size: int, nodes: int, expert_parallel: int) -> MeshPlan:
    """EP needs HSDP with a shard degree equal to EP (OLMo-core's rule); several nodes shard
    within a node and replicate across nodes; otherwise plain FSDP over the world."""
    if world_size % max(expert_parallel, 1):
        raise ValueError(
            f"trainer.expert_parallel = {expert_parallel} does not divide the world {world_size}"
        )
    if expert_parallel > 1:
        return MeshPlan(world_size, world_size // expert_parallel, expert_parallel, expert_parallel)
    if nodes > 1 and world_size % nodes == 0:
        return MeshPlan(world_size, nodes, world_size // nodes, 1)
    return MeshPlan(world_size, 1, world_size, 1)


def world_mesh(plan: MeshPlan, device_type: str) -> Any:
    """OLMo-core's world mesh for ``plan`` (built once per process, then reused): HSDP
    ``(dp_replicate, dp_shard)`` with the EP mesh over ``dp_shard``, or one ``dp`` dim."""
    from olmo_core.distributed.parallel import (
        DataParallelConfig,
        DataParallelType,
        ExpertParallelConfig,
        build_world_mesh,
        get_world_mesh,
    )

    mesh = get_world_mesh()
    if mesh is not None:
        return mesh
    if plan.hsdp:
        dp = DataParallelConfig(
            name=DataParallelType.hsdp, num_replicas=plan.replicas, shard_degree=plan.shard
        )
    else:
        dp = DataParallelConfig(name=DataParallelType.fsdp)
    ep = ExpertParallelConfig(degree=plan.expert_parallel) if plan.expert_parallel > 1 else None
    return build_world_mesh(dp=dp, ep=ep, device_type=device_type)


def parallelize(
    model: torch.nn.Module,
    plan: MeshPlan,
    device: torch.device,
    *,
    param_dtype: torch.dtype | None = None,
    max_row_tokens: int | None = None,
) -> Any:
    """Apply EP (MoE) and FSDP/HSDP to ``model`` in place; returns the world mesh.

    Every rank holds the same full weights before this call (same source, same seed), so
    sharding only keeps each rank's slice. ``param_dtype`` is the compute dtype of the
    gathered parameters (bf16 on GPUs); the sharded master copy stays fp32.
    """
    from olmo_core.distributed.parallel import get_dp_model_mesh, get_ep_mesh
    from torch.distributed.fsdp import FSDPModule

    # gathering an expert weight (EP shard inside an FSDP shard) takes two all-gathers;
    # DTensor warns about that on every publication: expected here, so keep the log clean
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    mesh = world_mesh(plan, device.type)
    moe = bool(getattr(model, "is_moe", False))
    if plan.expert_parallel > 1:
        if not moe:
            raise ValueError("trainer.expert_parallel > 1 needs an MoE model")
        model.apply_ep(get_ep_mesh(mesh))  # type: ignore[operator]
        _fix_expert_capacity(model, max_row_tokens)
    if moe:
        model.prepare_experts_for_fsdp(  # type: ignore[operator]
            mesh, param_dtype=param_dtype, reduce_dtype=torch.float32
        )
    model.apply_fsdp(  # type: ignore[operator]
        dp_mesh=get_dp_model_mesh(mesh), param_dtype=param_dtype, reduce_dtype=torch.float32
    )
    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)
    return mesh


def _fix_expert_capacity(model: torch.nn.Module, max_row_tokens: int | None) -> None:
    """Capacity-factor expert MLPs size their all-to-all buffers from the local token count,
    which must then agree over the EP group; OLMo-core's answer is a fixed maximum
    microbatch (``warmup_cache``), here the longest packed row."""
    for m in model.modules():
        if hasattr(m, "capacity_factor") and hasattr(m, "warmup_cache"):
            if not max_row_tokens:
                raise ValueError("expert parallelism with capacity-factor experts needs a row size")
            m.warmup_cache(int(max_row_tokens))


def _replicas(t: DTensor) -> int:
    """How many ranks of the tensor's mesh hold the same local shard (Replicate dims)."""
    n = 1
    for dim, p in enumerate(t.placements):
        if p.is_replicate():
            n *= t.device_mesh.size(dim)
    return n


def clip_grad_norm_(params: list[torch.nn.Parameter], max_norm: float | None) -> float:
    """Global gradient norm over the whole (sharded) model; scales grads when ``max_norm``.

    Parameters may live on different meshes (experts vs the rest), so the norm is taken
    from the local shards: each shard's squared sum divided by its replica count, summed
    over all ranks.
    """
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    device = grads[0].device
    total = torch.zeros((), dtype=torch.float64, device=device)
    for g in grads:
        if isinstance(g, DTensor):
            local = g.to_local().detach()
            total += local.double().pow(2).sum() / _replicas(g)
        else:
            total += g.detach().double().pow(2).sum()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(total)
    norm = math.sqrt(float(total))
    if max_norm and norm > 0 and math.isfinite(norm):
        coef = min(1.0, float(max_norm) / (norm + 1e-6))
        if coef < 1.0:
            for g in grads:
                local = g.to_local() if isinstance(g, DTensor) else g
                local.mul_(coef)
    return norm


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The full value of a (possibly doubly) sharded tensor; a collective over its mesh."""
    if isinstance(t, DTensor):
        t = t.full_tensor()
    if isinstance(t, DTensor):  # an expert weight: FSDP over its EP-sharded value
        t = t.full_tensor()
    return t


def reshard(model: torch.nn.Module) -> None:
    """Free every gathered FSDP parameter of ``model`` (keep only this rank's shards)."""
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def local_param_bytes(model: torch.nn.Module) -> int:
    """Bytes of parameters this rank holds: local shards of sharded ones, whole others."""
    total = 0
    for p in model.parameters():
        t: torch.Tensor = p
        while isinstance(t, DTensor):
            t = t.to_local()
        total += t.numel() * t.element_size()
    return total


def mixed_precision(model: torch.nn.Module) -> set[tuple[str, str]]:
    """``(param_dtype, reduce_dtype)`` of every FSDP unit of ``model`` (the policy objects
    OLMo-core gave ``fully_shard``): what the trainer computes and reduces gradients in."""
    from torch.distributed.fsdp import FSDPModule

    out = set()
    for m in model.modules():
        if isinstance(m, FSDPModule):
            policy = m._get_fsdp_state()._mp_policy
            out.add((str(policy.param_dtype), str(policy.reduce_dtype)))
    return out
