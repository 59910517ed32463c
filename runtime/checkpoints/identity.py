"""Which compiled specs may continue each other's checkpoints.

A run directory is reused only by the same experiment. Two manifests are the same experiment
when their resolved configs agree on everything that shapes the trajectory: model, data,
algorithm, optimizer, trainer, inference, rewards. Fields that only say how long to go on,
how often to save or evaluate, where to log, or how the job is launched may change between a
run and its continuation (extending ``training.num_rollouts`` is the common case), so they are
left out of the resume key.
"""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

# Dotted paths (a section name covers the whole section) a continuation may change.
RESUMABLE_CHANGES: tuple[str, ...] = (
    "training.num_rollouts",
    "checkpoint",
    "evaluation",
    "tracking",
    "launch",
    "runtime",
    "output",
    "description",
    "compiler_cache",
)


def _drop(tree: dict[str, Any], dotted: str) -> None:
    *head, last = dotted.split(".")
    node: Any = tree
    for part in head:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(last, None)


def resume_view(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a resolved config a continuation must keep."""
    view = copy.deepcopy(config)
    for dotted in RESUMABLE_CHANGES:
        _drop(view, dotted)
    return view


def resume_key(config: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of :func:`resume_view`."""
    text = json.dumps(resume_view(config), sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def differing_fields(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths where two resume views differ (for a message that says what changed)."""
    out: list[str] = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}.{key}" if prefix else str(key)
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += differing_fields(va, vb, path)
        elif va != vb:
            out.append(path)
    return out
