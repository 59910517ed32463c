"""The default weight-publication transport, chosen from the placement.

Disk snapshots cost seconds a collection (a safetensors write and read of the whole model);
tensor handles and broadcasts cost a fraction of that. So on GPUs the default is the fastest
transport the placement allows; a ``runtime.publication_transport`` in the spec (``disk``
included) always wins. CPU runs keep disk: they are the smoke path, and their snapshots are
the publication record tests and users read.
"""

from __future__ import annotations

from typing import Any


def publication_transport(config: dict[str, Any], placement: dict[str, Any]) -> tuple[str, str]:
    """(transport, the reason recorded as its provenance) for a resolved config + placement."""
    inf, tr = config["inference"], config["trainer"]
    if tr["gpus"] <= 0:
        return "disk", "'disk' on CPU runs"
    trainer_nodes = set((placement.get("trainer") or {}).get("nodes") or [0])
    engine_nodes = {int(e.get("node", 0)) for e in placement.get("engines") or []}
    same_node = len(trainer_nodes) == 1 and engine_nodes <= trainer_nodes
    colocated = inf["placement"] == "colocated"
    sglang = inf["engine"] == "sglang"
    drain = config["async"]["enabled"] and config["async"]["publication_mode"] == "engine_drain"
    if same_node and not sglang:
        return "tensor", "'tensor' (CUDA IPC): every embedded engine shares the trainer's node"
    if colocated:
        if sglang:
            return "disk", "'disk': SGLang engines share the trainer's GPUs (HF snapshots)"
        return "disk", "'disk': colocated engines on several nodes"
    if drain:
        return "disk", "'disk': engine_drain publishes engine by engine across nodes"
    return "distributed", "'distributed' (NCCL broadcast): engines on GPUs of their own"
