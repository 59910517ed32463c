"""Distributed publication: trainer weights broadcast over a torch.distributed group.

SGLang's own protocol, so the same publisher drives real SGLang servers and the embedded
engine: the trainer hosts the rendezvous (rank 0) and asks each engine to join with
``/init_weights_update_group`` (``rank_offset`` = the engine's first rank); each bucket is
announced with ``/update_weights_from_distributed`` (names, dtypes, shapes) while rank 0
broadcasts the tensors, in that order. NCCL between GPUs, gloo on CPU. Non-final buckets
carry ``flush_cache=false``; the last one carries ``weight_version``, and the call returns
when every engine reports it (barrier mode). This is the path to engines in other
processes and on other nodes; the colocated CUDA-IPC path is ``tensor.py``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import timedelta
from typing import Any

import httpx
import torch

from runtime import control_http
from runtime.engines.process import free_port

from .audit import WeightAuditError, _audit_sglang
from .disk import PublicationError, engine_version
from .tensor import DEFAULT_BUCKET_BYTES, TensorPublishResult, bucket_plan, gather

GROUP_NAME = "weight_update_group"


def _layer(name: str) -> str:
    """``blocks.N`` for a layer's tensors (converted to engine names together), else the
    name: OLMo-core's HF converter maps a layer's tensors among themselves."""
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "blocks" and len(parts) > 2 else name


def init_weight_group(
    *,
    backend: str,
    master_address: str,
    master_port: int,
    rank: int,
    world_size: int,
    group_name: str = GROUP_NAME,
    timeout_s: float = 600.0,
) -> Any:
    """A process group outside the default one, set up the way SGLang's engines do it
    (TCP rendezvous at the trainer, the store prefixed by the group name), so a trainer and
    a real SGLang server meet on the same keys. Rank 0 hosts the store."""
    import torch.distributed.distributed_c10d as c10d

    timeout = timedelta(seconds=timeout_s)
    store, rank, world_size = next(
        c10d.rendezvous(f"tcp://{master_address}:{master_port}", rank, world_size, timeout=timeout)
    )
    store.set_timeout(timeout)
    prefixed = c10d.PrefixStore(group_name, store)
    pg, _ = c10d._new_process_group_helper(
        world_size,
        rank,
        [],
        c10d.Backend(backend),
        prefixed,
        group_name=group_name,
        timeout=timeout,
    )
    c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


def receive(
    group: Any,
    names: Sequence[str],
    dtypes: Sequence[str],
    shapes: Sequence[Sequence[int]],
    device: torch.device,
) -> list[tuple[str, torch.Tensor]]:
    """Engine side: take one announced bucket from rank 0's broadcasts, in order."""
    out: list[tuple[str, torch.Tensor]] = []
    works = []
    for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
        dt = getattr(torch, str(dtype).removeprefix("torch."), None)
        if not isinstance(dt, torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r} for {name}")
        t = torch.empty([int(s) for s in shape], dtype=dt, device=device)
        works.append(torch.distributed.broadcast(t, src=0, group=group, async_op=True))
        out.append((name, t))
    for w in works:
        assert w is not None
        w.wait()
    return out


class DistributedPublisher:
    """Streams each policy version to every engine over one broadcast group."""

    def __init__(
        self,
        urls: Sequence[str],
        timeout_s: float,
        *,
        master_address: str,
        master_port: int,
        bind_host: str = "127.0.0.1",
        backend: str = "gloo",
        ranks_per_engine: int = 1,
        dtype: torch.dtype | None = None,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        audit: bool = True,
        convert: Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None,
    ) -> None:
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.master_address = master_address
        self.master_port = master_port
        # where a re-formed group's rendezvous port is picked ("0.0.0.0" across nodes)
        self.bind_host = bind_host
        self.backend = backend
        self.ranks_per_engine = ranks_per_engine
        self.dtype = dtype
        self.bucket_bytes = bucket_bytes
        self.do_audit = audit
        # the engine's names: SGLang loads HF names, the embedded engine OLMo-core's
        self.converts = convert is not None
        self.convert = convert or (lambda sd: sd)
        # trainer logprobs of (prompt, response): the audit of engines that cannot show weights
        self.logprobs: Callable[[list[int], list[int]], list[float]] | None = None
        self.group: Any = None
        self._members: list[str] = []
        self._spent = False  # a broadcast failed: the next publication forms a new group
        self._rendezvous_tried = False  # this port has hosted (or still hosts) a rendezvous
        self._pool = ThreadPoolExecutor(max_workers=max(len(self.urls), 1) + 1)

    # ---- group ---------------------------------------------------------------------------
    def connect(self) -> None:
        """Host the rendezvous and have every engine join; blocks until all have joined."""
        world = 1 + self.ranks_per_engine * len(self.urls)
        self._rendezvous_tried = True
        futures = [
            self._pool.submit(
                self._post,
                url,
                "/init_weights_update_group",
                {
                    "master_address": self.master_address,
                    "master_port": self.master_port,
                    "rank_offset": 1 + i * self.ranks_per_engine,
                    "world_size": world,
                    "group_name": GROUP_NAME,
                    "backend": self.backend,
                },
            )
            for i, url in enumerate(self.urls)
        ]
        # rank 0's rendezvous waits for every engine to connect; an engine that answers its
        # join request with an error never will, so its answer ends the wait (it would
        # otherwise last the whole timeout and then hide the engine's reason)
        hosted = self._pool.submit(
            init_weight_group,
            backend=self.backend,
            master_address=self.master_address,
            master_port=self.master_port,
            rank=0,
            world_size=world,
            timeout_s=self.timeout_s,
        )
        pending: set[Future[Any]] = {hosted, *futures}
        while not hosted.done():
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            refused = [str(f.exception()) for f in done if f is not hosted and f.exception()]
            if refused:
                raise PublicationError(
                    "engines did not join the weight-update group: " + "; ".join(refused)
                )
        try:
            self.group = hosted.result()
        except Exception as exc:
            raise PublicationError(
                f"the weight-update group at {self.master_address}:{self.master_port} "
                f"({self.backend}, {world} ranks) did not form: {exc}"
            ) from exc
        self._wait(futures, "join the weight-update group")
        self._members = list(self.urls)
        self._spent = False

    def close(self) -> None:
        if self.group is not None:
            # the trainer's side first. An engine still inside a broadcast that was cut
            # short waits out its group's timeout on its own thread (neither destroying nor
            # aborting a gloo group ends that wait); the next group does not need it.
            with contextlib.suppress(Exception):
                torch.distributed.destroy_process_group(self.group)
            self.group = None
        if self._rendezvous_tried:
            # every engine asked to join frees the group's name again: the members, and an
            # engine that kept an older group when a join failed (it refuses a second one)
            for url in dict.fromkeys([*self._members, *self.urls]):
                with contextlib.suppress(httpx.HTTPError):
                    control_http.post(
                        f"{url}/destroy_weights_update_group",
                        json={"group_name": GROUP_NAME},
                        timeout=5,
                    )
        self._pool.shutdown(wait=False)

    # ---- publication ---------------------------------------------------------------------
    def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> TensorPublishResult:
        if self.group is None or self.urls != self._members or self._spent:
            # an engine left (health check), a broadcast failed or the last group did not
            # form: the survivors form a new group (the loop republishes this version to them)
            if self.group is not None or self._rendezvous_tried:
                self.close()
                self._pool = ThreadPoolExecutor(max_workers=max(len(self.urls), 1) + 1)
                # a port free now: the old one may still be held by a rendezvous that did
                # not complete, and the next port up may belong to anyone (other runs, other
                # tests on the host); a taken port fails the new group with EADDRINUSE
                self.master_port = free_port(self.bind_host)
            self.connect()
        t0 = time.monotonic()
        # one bucket gathered (a sharded trainer), converted and cast at a time, then dropped
        plan = bucket_plan(state_dict, self.bucket_bytes, _layer if self.converts else None)
        sent = 0
        for i, names in enumerate(plan):
            sent += self._send(state_dict, names, version, last=i == len(plan) - 1)
        for url in self.urls:
            got = engine_version(url, self.timeout_s)
            if got != str(version):
                raise PublicationError(
                    f"engine {url} reports weight_version {got!r} after loading v{version}"
                )
        t1 = time.monotonic()
        if self.do_audit:
            self.audit(state_dict)
        return TensorPublishResult(version, len(plan), sent, t1 - t0, time.monotonic() - t1)

    def _send(
        self, state: Mapping[str, torch.Tensor], names: list[str], version: int, *, last: bool
    ) -> int:
        """Gather, convert, cast and broadcast one bucket; its tensors go when this returns."""
        group = gather(state, names)
        if self.converts:
            group = list(self.convert(dict(group)).items())
        tensors = [(n, self._cast(t)) for n, t in group]
        del group
        body: dict[str, Any] = {
            "names": [n for n, _ in tensors],
            "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in tensors],
            "shapes": [list(t.shape) for _, t in tensors],
            "group_name": GROUP_NAME,
            "flush_cache": last,
            "abort_all_requests": False,
        }
        if last:
            body["weight_version"] = str(version)
        futures = [
            self._pool.submit(self._post, url, "/update_weights_from_distributed", body)
            for url in self.urls
        ]
        sent = 0
        try:
            for _, t in tensors:
                torch.distributed.broadcast(t, src=0, group=self.group)
                sent += t.numel() * t.element_size()
        except Exception as exc:  # an engine died mid-broadcast: this group is spent
            self._spent = True
            raise PublicationError(f"broadcast of weights v{version} failed: {exc}") from exc
        self._wait(futures, f"take weights v{version}")
        return sent

    def _served_on_host(
        self, state_dict: Mapping[str, torch.Tensor], converted: bool
    ) -> dict[str, torch.Tensor]:
        """What the engines should serve, under their names and dtype, in host memory
        (built a bucket at a time: no second full copy on the trainer's device)."""
        if converted or not self.converts:
            return {n: self._cast(t).cpu() for n, t in state_dict.items()}
        out: dict[str, torch.Tensor] = {}
        for names in bucket_plan(state_dict, self.bucket_bytes, _layer):
            for n, t in self.convert(dict(gather(state_dict, names))).items():
                out[n] = self._cast(t).cpu()
        return out

    def _cast(self, t: torch.Tensor) -> torch.Tensor:
        t = t.detach()
        if self.dtype is not None and t.is_floating_point() and t.dtype != self.dtype:
            t = t.to(self.dtype)
        return t.contiguous()

    def _post(self, url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            r = control_http.post(f"{url}{path}", json=body, timeout=self.timeout_s)
            data = r.json() if r.content else {}
        except (httpx.HTTPError, ValueError) as exc:
            raise PublicationError(f"engine {url}{path}: {type(exc).__name__}: {exc}") from exc
        if r.status_code != 200 or not data.get("success", False):
            message = data.get("message") or r.text
            raise PublicationError(f"engine {url}{path} (HTTP {r.status_code}): {message}")
        return dict(data)

    def _wait(self, futures: list[Future[dict[str, Any]]], what: str) -> None:
        errors = []
        for fut in futures:
            try:
                fut.result(timeout=self.timeout_s)
            except Exception as exc:  # every engine's answer is read before raising
                errors.append(str(exc))
        if errors:
            raise PublicationError(f"engines did not {what}: " + "; ".join(errors))

    # ---- audit ---------------------------------------------------------------------------
    def audit(self, state_dict: Mapping[str, torch.Tensor], *, converted: bool = False) -> None:
        """The engine's device checksum where it has one (embedded engine); SGLang's own
        ``/get_weights_by_name`` (leading values of a few tensors) otherwise."""
        from .checksum import device_checksum

        want: str | None = None
        served: dict[str, torch.Tensor] | None = None
        for url in self.urls:
            r = control_http.get(
                f"{url}/get_weight_checksum", params={"kind": "wsum64"}, timeout=self.timeout_s
            )
            if r.status_code == 404:  # SGLang: its own endpoints, then behaviour
                if served is None:
                    served = self._served_on_host(state_dict, converted)
                _audit_sglang(url, served, self.logprobs, self.timeout_s)
                continue
            r.raise_for_status()
            if want is None:  # one tensor gathered at a time
                want = device_checksum(
                    state_dict if converted else self.convert(state_dict), dtype=self.dtype
                )
            got = str(r.json().get("checksum"))
            if got != want:
                raise WeightAuditError(
                    "weight audit failed: engine weights differ from the trainer's\n"
                    f"  trainer: {want}\n  {url}: {got}"
                )
