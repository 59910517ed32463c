"""torch.distributed setup and data-parallel gradient reduction.

The process group always exists (gloo on CPU even for one process, NCCL on CUDA) so the
same code path runs on a laptop and on a GPU node. Gradients are summed explicitly after
local accumulation instead of through DDP hooks: ranks may hold different numbers of packed
rows, and DDP's per-backward reducer would deadlock on unequal microbatch counts.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

JOINED = "rlc/joined"  # followers count themselves in before the process group forms


@dataclass(frozen=True)
class Rendezvous:
    """Where trainer ranks meet: rank 0's address and port, this process's ranks.

    ``check`` (rank 0) raises when a follower process is gone; it runs while rank 0 waits,
    so a rank that died before joining is named at once instead of after the timeout.
    """

    addr: str
    port: int
    rank: int
    world_size: int
    local_rank: int = 0
    check: Callable[[], None] | None = None


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str
    owns_group: bool  # we created it, so we destroy it
    store: Any = None  # the rendezvous store (rank 0 hosts it): gates between ranks


def await_ranks(
    store: Any,
    key: str,
    count: int,
    timeout_s: float,
    check: Callable[[], None] | None = None,
    what: str = "joined",
) -> None:
    """Rank 0: poll until ``count`` followers added themselves to ``key``, running ``check``
    between polls; a follower that never comes fails after ``timeout_s``, naming the count."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = int(store.add(key, 0))
        if got >= count:
            return
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{count - got} of {count} other trainer rank(s) had not {what} after "
                f"{timeout_s:.0f}s (launch.coordination.startup_timeout); see their logs"
            )
        time.sleep(0.2)


def _meet(rv: Rendezvous, startup_timeout_s: float) -> Any:
    """The rendezvous store: rank 0 hosts it and waits (bounded, watching its ranks) until
    every follower has connected; a follower connects and counts itself in."""
    from torch.distributed import TCPStore

    store = TCPStore(
        rv.addr,
        rv.port,
        is_master=rv.rank == 0,
        wait_for_workers=False,
        timeout=timedelta(seconds=startup_timeout_s),
        use_libuv=True,
    )
    if rv.rank == 0:
        await_ranks(store, JOINED, rv.world_size - 1, startup_timeout_s, rv.check)
    else:
        store.add(JOINED, 1)
    return store


def init_distributed(
    device: str = "cpu",
    *,
    timeout_s: float = 1800.0,
    startup_timeout_s: float | None = None,
    rendezvous: Rendezvous | None = None,
) -> DistInfo:
    """Join (or create) the default process group.

    Uses ``rendezvous`` when given (rank 0 inside ``runtime.entrypoints.execute``), the environment when
    launched with RANK/WORLD_SIZE/MASTER_ADDR (the trainer-rank launcher, torchrun), else a
    single-process group over a temporary FileStore (no ports needed). ``timeout_s`` bounds
    every collective, ``startup_timeout_s`` (default ``timeout_s``) the rendezvous.
    """
    backend = "nccl" if str(device).startswith("cuda") else "gloo"
    if dist.is_initialized():
        rank, world = dist.get_rank(), dist.get_world_size()
        local = int(os.environ.get("LOCAL_RANK", rank))
        return DistInfo(rank, world, local, dist.get_backend(), owns_group=False)
    timeout = timedelta(seconds=timeout_s)
    rv = rendezvous
    if rv is None and all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR")):
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        rv = Rendezvous(
            os.environ["MASTER_ADDR"],
            int(os.environ.get("MASTER_PORT", "29500")),
            rank,
            world,
            int(os.environ.get("LOCAL_RANK", rank)),
        )
    if rv is not None:
        if backend == "nccl":
            torch.cuda.set_device(rv.local_rank)
        store = _meet(rv, timeout_s if startup_timeout_s is None else startup_timeout_s)
        dist.init_process_group(
            backend, store=store, rank=rv.rank, world_size=rv.world_size, timeout=timeout
        )
        return DistInfo(rv.rank, rv.world_size, rv.local_rank, backend, True, store)
    fd, path = tempfile.mkstemp(prefix="rlc-pg-")
    os.close(fd)
    os.unlink(path)
    file_store = dist.FileStore(path, 1)
    dist.init_process_group(backend, store=file_store, rank=0, world_size=1, timeout=timeout)
    return DistInfo(0, 1, 0, backend, owns_group=True)


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
