"""Capture every decode graph a run can meet before its first collection.

The embedded engine captures a CUDA graph per (batch bucket, KV-length bucket, sampling
mode) on first use; left lazy, a bucket first met mid-run stalls that collection for the
capture (and, for a new sampling mode, a recompile). ``/warm_up`` captures them all at once,
given the sampling settings the run will send: the rollouts' and, when shared evaluation
runs on the same engines, the evaluation's.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from runtime import control_http


class WarmUpError(RuntimeError):
    """An engine failed to capture its decode graphs."""


def warm_up_engines(
    urls: Sequence[str],
    sampling: Sequence[dict[str, Any]],
    timeout_s: float,
    max_kv_len: int | None = None,
) -> dict[str, dict[str, Any]]:
    """POST ``/warm_up`` to every engine at once; url -> the engine's answer."""
    body: dict[str, Any] = {"sampling_params": [dict(p) for p in sampling]}
    if max_kv_len is not None:
        body["max_kv_len"] = int(max_kv_len)

    def one(url: str) -> dict[str, Any]:
        try:
            r = control_http.post(f"{url}/warm_up", json=body, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise WarmUpError(f"{url}: decode graph warm-up: {exc}") from None
        try:
            answer = r.json()
        except ValueError:
            answer = {}
        if r.status_code != 200 or not answer.get("success"):
            cause = answer.get("message") or f"HTTP {r.status_code}"
            raise WarmUpError(f"{url}: decode graph warm-up: {cause}")
        return dict(answer)

    with ThreadPoolExecutor(max_workers=max(len(urls), 1)) as pool:
        return dict(zip(urls, pool.map(one, urls), strict=True))
