"""Startup weight audit: every engine must serve exactly the trainer's weights.

A silent mismatch (wrong checkpoint, a conversion bug, a stale snapshot) makes every
logprob ratio wrong while training still "works"; comparing checksums before the first
collection turns it into a loud failure.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx


class WeightAuditError(RuntimeError):
    """Trainer and engine weights differ."""


def engine_checksum(url: str, timeout_s: float) -> str:
    r = httpx.get(f"{url}/get_weight_checksum", timeout=timeout_s)
    r.raise_for_status()
    data = r.json()
    value = data.get("checksum") if isinstance(data, dict) else data
    if not value:
        raise WeightAuditError(f"engine {url} returned no checksum: {data!r}")
    return str(value)


def audit(trainer_checksum: str, urls: Sequence[str], timeout_s: float) -> dict[str, str]:
    """Compare each engine's checksum with the trainer's; raise on any difference."""
    got = {url: engine_checksum(url, timeout_s) for url in urls}
    bad = {u: c for u, c in got.items() if c != trainer_checksum}
    if bad:
        lines = "\n".join(f"  {u}: {c}" for u, c in bad.items())
        raise WeightAuditError(
            "startup weight audit failed: engine weights differ from the trainer's\n"
            f"  trainer: {trainer_checksum}\n{lines}"
        )
    return got
