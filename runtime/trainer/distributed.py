"""torch.distributed setup and data-parallel gradient reduction.

The process group always exists (gloo on CPU even for one process, NCCL on CUDA) so the
same code path runs on a laptop and on a GPU node. Gradients are summed explicitly after
local accumulation instead of through DDP hooks: ranks may hold different numbers of packed
rows, and DDP's per-backward reducer would deadlock on unequal microbatch counts.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


@dataclass(frozen=True)
class Rendezvous:
    """Where trainer ranks meet: rank 0's address and port, this process's ranks."""

    addr: str
    port: int
    rank: int
    world_size: int
    local_rank: int = 0


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    owns_group: bool  # we created it, so we destroy it


def init_distributed(
    device: str = "cpu", *, timeout_s: float = 1800.0, rendezvous: Rendezvous | None = None
) -> DistInfo:
    """Join (or create) the default process group.

    Uses ``rendezvous`` when given (rank 0 inside ``runtime.execute``), ``env://`` when
    launched with RANK/WORLD_SIZE/MASTER_ADDR (the trainer-rank launcher, torchrun), else a
    single-process group over a temporary FileStore (no ports needed).
    """
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ.get("LOCAL_RANK", rank))
        return DistInfo(rank, world, local, dist.get_backend(), owns_group=False)
    from datetime import timedelta

    timeout = timedelta(seconds=timeout_s)
    if rendezvous is not None:
        rv = rendezvous
        if backend == "nccl":
            torch.cuda.set_device(rv.local_rank)
        dist.init_process_group(
            backend,
            init_method=f"tcp://{rv.addr}:{rv.port}",
            rank=rv.rank,
            world_size=rv.world_size,
            timeout=timeout,
        )
        return DistInfo(rv.rank, rv.world_size, rv.local_rank, backend, owns_group=True)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_ADDR" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local = int(os.environ.get("LOCAL_RANK", rank))
        if backend == "nccl":
            torch.cuda.set_device(local)
        dist.init_process_group(backend, init_method="env://", timeout=timeout)
    else:
        rank, world, local = 0, 1, 0
        fd, path = tempfile.mkstemp(prefix="rlc-pg-")
        os.close(fd)
        os.unlink(path)
        store = dist.FileStore(path, 1)
        dist.init_process_group(backend, store=store, rank=0, world_size=1, timeout=timeout)
    return DistInfo(rank, world, local, backend, owns_group=True)


def shutdown_distributed(info: DistInfo) -> None:
    if info.owns_group and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum_(tensors: Iterable[torch.Tensor]) -> None:
    """In-place SUM all-reduce of tensors (one flattened bucket per dtype)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        by_dtype.setdefault(t.dtype, []).append(t)
    for group in by_dtype.values():
        flat = _flatten_dense_tensors(group)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        for t, synced in zip(group, _unflatten_dense_tensors(flat, group), strict=True):
            t.copy_(synced)


def all_reduce_grads_(params: Iterable[torch.nn.Parameter]) -> None:
    """Sum gradients over data-parallel ranks (params without grad get zeros first)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    plist = [p for p in params if p.requires_grad]
    for p in plist:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    all_reduce_sum_([p.grad for p in plist if p.grad is not None])


def all_reduce_scalars(
    values: dict[str, float], device: torch.device, op: str = "sum"
) -> dict[str, float]:
    """Reduce a dict of floats over ranks (sum, max or min)."""
    if not dist.is_initialized() or dist.get_world_size() == 1 or not values:
        return dict(values)
    keys = sorted(values)
    t = torch.tensor([values[k] for k in keys], dtype=torch.float64, device=device)
    red = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op]
    dist.all_reduce(t, op=red)
    return dict(zip(keys, t.tolist(), strict=True))
