"""Tensor publication: trainer weights reach same-node engines without a disk round trip.

- ``ColocatedPublisher``: the engine lives in the trainer process (``InProcessServer``);
  each tensor is copied device to device into the engine's parameters (the copy kernel casts
  fp32 -> bf16), under the engine's pause protocol.
- ``TensorPublisher``: the engine is another process on the same node; the trainer's tensors
  travel as CUDA IPC (GPU) or shared-memory (CPU) handles in ``/update_weights_from_tensor``
  bodies, in buckets of ``bucket_bytes``, so a sender-side cast or contiguous copy never
  needs more than one bucket. Non-final buckets carry ``flush_cache=false``: the engine keeps
  admission paused until the last bucket, which carries ``weight_version``.

Both check afterwards that the engine's device checksum (``wsum64``) equals the trainer's,
so a wrong, missing or stale tensor fails the publication loudly. Disk publication stays the
fallback and the path to engines on other nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from runtime import control_http

from .audit import WeightAuditError
from .checksum import device_checksum
from .disk import DiskPublisher, PublicationError, engine_version
from .ipc import serialize_named_tensors

DEFAULT_BUCKET_BYTES = 512 * 1024**2
TRANSPORTS = ("disk", "tensor")


@dataclass
class TensorPublishResult:
    version: int
    buckets: int
    bytes: int
    send_s: float
    audit_s: float


def nbytes(state: Mapping[str, torch.Tensor], name: str) -> int:
    """Size of entry ``name`` as published; a lazily gathered state (the sharded trainer's
    ``PublishedState``) knows it without gathering."""
    sized = getattr(state, "nbytes", None)
    if callable(sized):
        return int(sized(name))
    t = state[name]
    return t.numel() * t.element_size()


def bucket_plan(
    state: Mapping[str, torch.Tensor],
    bucket_bytes: int,
    unit: Callable[[str], str] | None = None,
) -> list[list[str]]:
    """Names in consecutive groups of at most ``bucket_bytes`` (a larger unit is a bucket
    alone). ``unit`` maps a name to a key; consecutive names with one key never part (a
    name converter that needs a whole layer gets it in one bucket)."""
    units: list[list[str]] = []
    key: object = object()
    for name in state:
        k = unit(name) if unit is not None else name
        if not units or k != key:
            units.append([])
            key = k
        units[-1].append(name)
    plan: list[list[str]] = []
    size = 0
    for names in units:
        n = sum(nbytes(state, x) for x in names)
        if plan and plan[-1] and size + n <= bucket_bytes:
            plan[-1].extend(names)
            size += n
        else:
            plan.append(list(names))
            size = n
    return plan


def gather(
    state: Mapping[str, torch.Tensor], names: Sequence[str]
) -> list[tuple[str, torch.Tensor]]:
    """The entries ``names``: one collective gather for a sharded trainer's state."""
    many = getattr(state, "gather", None)
    values = many(list(names)) if callable(many) else [state[n] for n in names]
    return list(zip(names, values, strict=True))


def buckets(
    state: Mapping[str, torch.Tensor], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of at most ``bucket_bytes``, each gathered when reached: drop a
    bucket before taking the next and at most one is held."""
    for names in bucket_plan(state, bucket_bytes):
        yield gather(state, names)


def _float_dtype(name: str | None) -> torch.dtype | None:
    value = getattr(torch, name, None) if name else None
    return value if isinstance(value, torch.dtype) else None


class ColocatedPublisher:
    """Direct device copies into in-process engines (``Engine`` objects, not URLs)."""

    def __init__(self, engines: Sequence[Any], *, audit: bool = True) -> None:
        self.engines = list(engines)
        self.do_audit = audit

    def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> TensorPublishResult:
        t0 = time.monotonic()
        named = [(n, t.detach()) for n, t in state_dict.items()]
        for engine in self.engines:
            res = engine.update_weights_from_tensors(named, version=str(version))
            if not res.get("success"):
                raise PublicationError(
                    f"in-process engine refused v{version}: {res.get('message')}"
                )
        t1 = time.monotonic()
        if self.do_audit:
            self.audit(state_dict)
        size = sum(t.numel() * t.element_size() for _, t in named)
        return TensorPublishResult(version, 1, size, t1 - t0, time.monotonic() - t1)

    def audit(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        for engine in self.engines:
            dtype = next(engine.model.parameters()).dtype
            want = device_checksum(state_dict, dtype=dtype)
            got = engine.checksum("wsum64")
            if got != want:
                raise WeightAuditError(
                    f"in-process engine weights differ after publication\n"
                    f"  trainer: {want}\n  engine:  {got}"
                )


class TensorPublisher:
    """``/update_weights_from_tensor`` to engines on this node (same interface as disk)."""

    def __init__(
        self,
        urls: Sequence[str],
        timeout_s: float,
        *,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        audit: bool = True,
    ) -> None:
        self.urls = list(urls)
        self.timeout_s = timeout_s
        self.bucket_bytes = bucket_bytes
        self.do_audit = audit
        self._dtypes: dict[str, torch.dtype | None] = {}

    def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> TensorPublishResult:
        t0 = time.monotonic()
        plan = bucket_plan(state_dict, self.bucket_bytes)
        size = 0
        for i, names in enumerate(plan):  # one bucket gathered at a time, sent to every engine
            group = gather(state_dict, names)
            size += sum(t.numel() * t.element_size() for _, t in group)
            for url in self.urls:
                self._post(url, group, version, i == len(plan) - 1)
            del group
        for url in self.urls:
            got = engine_version(url, self.timeout_s)
            if got != str(version):
                raise PublicationError(
                    f"engine {url} reports weight_version {got!r} after loading v{version}"
                )
        t1 = time.monotonic()
        if self.do_audit:
            self.audit(state_dict)
        return TensorPublishResult(version, len(plan), size, t1 - t0, time.monotonic() - t1)

    def _post(
        self, url: str, group: list[tuple[str, torch.Tensor]], version: int, last: bool
    ) -> None:
        # ``group`` (the sender's tensors) stays referenced until the engine has answered
        body: dict[str, Any] = {
            "serialized_named_tensors": [serialize_named_tensors(group)],
            "load_format": "direct",
            "flush_cache": last,
            "abort_all_requests": False,
        }
        if last:
            body["weight_version"] = str(version)
        try:
            r = control_http.post(
                f"{url}/update_weights_from_tensor", json=body, timeout=self.timeout_s
            )
            data = r.json() if r.content else {}
        except (httpx.HTTPError, ValueError) as exc:
            raise PublicationError(
                f"engine {url} did not take weights v{version}: {type(exc).__name__}: {exc}"
            ) from exc
        if r.status_code != 200 or not data.get("success", False):
            message = data.get("message") or (data.get("error") or {}).get("message") or r.text
            raise PublicationError(
                f"engine {url} refused weights v{version} (HTTP {r.status_code}): {message}"
            )

    def _engine_dtype(self, url: str) -> torch.dtype | None:
        if url not in self._dtypes:
            r = control_http.get(f"{url}/get_model_info", timeout=self.timeout_s)
            r.raise_for_status()
            self._dtypes[url] = _float_dtype(r.json().get("dtype"))
        return self._dtypes[url]

    def audit(self, state_dict: Mapping[str, torch.Tensor]) -> dict[str, str]:
        """Device checksums: trainer (cast to each engine's dtype) against every engine. The
        engines compute theirs while the trainer computes its own."""
        dtypes = {url: self._engine_dtype(url) for url in self.urls}
        with ThreadPoolExecutor(max_workers=max(1, len(self.urls))) as pool:
            asked = {url: pool.submit(self._engine_checksum, url) for url in self.urls}
            mine = {d: device_checksum(state_dict, dtype=d) for d in dict.fromkeys(dtypes.values())}
            got = {url: future.result() for url, future in asked.items()}
        for url in self.urls:
            if got[url] != mine[dtypes[url]]:
                raise WeightAuditError(
                    "weight audit failed: engine weights differ from the trainer's\n"
                    f"  trainer: {mine[dtypes[url]]}\n  {url}: {got[url]}"
                )
        return got

    def _engine_checksum(self, url: str) -> str:
        r = control_http.get(
            f"{url}/get_weight_checksum", params={"kind": "wsum64"}, timeout=self.timeout_s
        )
        r.raise_for_status()
        return str(r.json().get("checksum"))


def make_publisher(
    transport: str, urls: Sequence[str], timeout_s: float, root: Path
) -> DiskPublisher | TensorPublisher:
    """The publisher the spec's ``runtime.publication_transport`` names."""
    if transport == "tensor":
        return TensorPublisher(urls, timeout_s)
    if transport == "disk":
        return DiskPublisher(root, urls, timeout_s)
    raise ValueError(f"unknown publication transport {transport!r} (one of {TRANSPORTS})")
