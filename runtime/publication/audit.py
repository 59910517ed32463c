"""Startup weight audit: every engine must serve exactly the trainer's weights.

A silent mismatch (wrong checkpoint, a conversion bug, a stale snapshot) makes every
logprob ratio wrong while training still "works"; comparing checksums before the first
collection turns it into a loud failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from runtime import control_http


class WeightAuditError(RuntimeError):
    """Trainer and engine weights differ."""


def engine_checksum(url: str, timeout_s: float) -> str:
    r = control_http.get(f"{url}/get_weight_checksum", timeout=timeout_s)
    r.raise_for_status()
    data = r.json()
    value = data.get("checksum") if isinstance(data, dict) else data
    if not value:
        raise WeightAuditError(f"engine {url} returned no checksum: {data!r}")
    return str(value)


def _audit_sglang(
    url: str,
    state: Mapping[str, Any] | None,
    logprobs: Callable[[list[int], list[int]], list[float]] | None,
    timeout_s: float,
) -> None:
    if state is not None:
        try:
            audit_by_name(url, state, timeout_s)
            return
        except httpx.HTTPStatusError:
            if logprobs is None:
                raise
    if logprobs is None:
        raise WeightAuditError(f"weight audit: {url} has no checksum endpoint")
    audit_by_logprobs(url, logprobs, timeout_s)


def audit_by_name(url: str, state: Mapping[str, Any], timeout_s: float, width: int = 16) -> None:
    """Where an engine has no checksum endpoint (SGLang): compare the leading values of the
    first, middle and last tensors through SGLang's ``/get_weights_by_name``. ``state`` is
    under the engine's names and in its dtype."""
    import torch

    names = list(state)
    for name in dict.fromkeys([names[0], names[len(names) // 2], names[-1]]):
        r = control_http.post(
            f"{url}/get_weights_by_name",
            json={"name": name, "truncate_size": width},
            timeout=timeout_s,
        )
        r.raise_for_status()
        got = torch.tensor(r.json(), dtype=torch.float32)
        mine = state[name].detach().float().cpu()
        mine = mine[..., :width] if mine.dim() > 1 else mine[:width]
        mine = mine[: got.shape[0]] if got.dim() == mine.dim() else mine
        if mine.numel() != got.numel() or not torch.allclose(
            got.flatten(), mine.flatten(), rtol=1e-2, atol=1e-3
        ):
            raise WeightAuditError(f"weight audit failed: {url} serves other values for {name}")


LOGPROB_TOLERANCE = 0.05  # mean |trainer - engine| per token; a wrong tensor is far above


def audit_by_logprobs(
    url: str,
    logprobs: Callable[[list[int], list[int]], list[float]],
    timeout_s: float,
    prompt: Sequence[int] = tuple(range(3, 19)),
) -> float:
    """An engine that can show neither a checksum nor its weights (SGLang's OLMo models
    lack ``get_weights_by_name``) is audited by behaviour: its greedy continuation's
    logprobs against the trainer's (``logprobs(prompt, response)``) for the same tokens."""
    body = {
        "input_ids": list(prompt),
        "sampling_params": {"max_new_tokens": 8, "temperature": 0.0, "ignore_eos": True},
        "return_logprob": True,
    }
    r = control_http.post(f"{url}/generate", json=body, timeout=timeout_s)
    r.raise_for_status()
    items = (r.json().get("meta_info") or {}).get("output_token_logprobs") or []
    if not items:
        raise WeightAuditError(f"weight audit: {url} returned no logprobs")
    engine = [float(i[0]) for i in items]
    mine = logprobs(list(prompt), [int(i[1]) for i in items])
    gap = sum(abs(a - b) for a, b in zip(engine, mine, strict=True)) / len(engine)
    if gap > LOGPROB_TOLERANCE:
        raise WeightAuditError(
            f"weight audit failed: {url} scores its own greedy tokens {gap:.3g} nats/token "
            f"away from the trainer (tolerance {LOGPROB_TOLERANCE})"
        )
    return gap


def audit(
    trainer_checksum: str,
    urls: Sequence[str],
    timeout_s: float,
    state: Mapping[str, Any] | None = None,
    logprobs: Callable[[list[int], list[int]], list[float]] | None = None,
) -> dict[str, str]:
    """Compare each engine's checksum with the trainer's; raise on any difference. An
    engine without rlc's checksum endpoint (SGLang) is audited with SGLang's own
    endpoints: its weights by name (``state``: engine names and dtype), and where the model
    cannot show them, by ``logprobs`` (see ``audit_by_logprobs``)."""
    got: dict[str, str] = {}
    for url in urls:
        if state is not None or logprobs is not None:
            r = control_http.get(f"{url}/get_weight_checksum", timeout=timeout_s)
            if r.status_code == 404:
                _audit_sglang(url, state, logprobs, timeout_s)
                continue
        got[url] = engine_checksum(url, timeout_s)
    bad = {u: c for u, c in got.items() if c != trainer_checksum}
    if bad:
        lines = "\n".join(f"  {u}: {c}" for u, c in bad.items())
        raise WeightAuditError(
            "startup weight audit failed: engine weights differ from the trainer's\n"
            f"  trainer: {trainer_checksum}\n{lines}"
        )
    return got
