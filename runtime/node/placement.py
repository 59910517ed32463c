"""This node's roles, read from the compiled placement and the launcher's rank variables.

Beaker sets ``BEAKER_REPLICA_RANK`` / ``BEAKER_REPLICA_COUNT`` and, with leader selection,
``BEAKER_LEADER_REPLICA_HOSTNAME``; other schedulers and ``rlc run --local-nodes`` set
``RLC_NODE_RANK`` / ``RLC_NUM_NODES`` / ``RLC_LEADER_ADDR`` / ``RLC_NODE_ADDR`` (which win).
A local run has none of them and is node 0 of 1. The placement is decided at compile time,
so a node never guesses what to start; where the other nodes' roles listen is discovered
through the leader's registry (``runtime.node.registry``).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from contract.plan import PlacedEngine, Placement


class PlacementError(RuntimeError):
    """The launcher's view (rank/count) disagrees with the compiled placement."""


@dataclass(frozen=True)
class NodeIdentity:
    rank: int
    count: int
    leader_host: str
    address: str = "127.0.0.1"  # where this node's roles listen, as other nodes reach it
    registry_port: int = 29400


@dataclass(frozen=True)
class NodeRoles:
    """What this node starts: engine processes, the router, the trainer."""

    rank: int
    engines: tuple[PlacedEngine, ...]
    router: bool
    trainer: bool
    leader: bool

    def describe(self) -> str:
        parts = [f"engine:{e.id}@{e.port}" for e in self.engines]
        if self.router:
            parts.append("router")
        if self.trainer:
            parts.append("trainer")
        return f"node {self.rank}: " + (", ".join(parts) or "no roles")


def node_identity(env: Mapping[str, str] | None = None) -> NodeIdentity:
    """Rank, replica count and leader host from Beaker's variables (local: 0, 1, localhost)."""
    env = os.environ if env is None else env
    rank_var = "RLC_NODE_RANK" if "RLC_NODE_RANK" in env else "BEAKER_REPLICA_RANK"
    count_var = "RLC_NUM_NODES" if "RLC_NUM_NODES" in env else "BEAKER_REPLICA_COUNT"
    try:
        rank = int(env.get(rank_var, "0") or 0)
        count = int(env.get(count_var, "1") or 1)
        registry_port = int(env.get("RLC_REGISTRY_PORT", "29400") or 29400)
    except ValueError as exc:
        raise PlacementError(f"bad node rank variables: {exc}") from None
    if not 0 <= rank < count:
        raise PlacementError(f"{rank_var}={rank} is outside 0..{count - 1} ({count_var})")
    leader = env.get("RLC_LEADER_ADDR") or env.get("BEAKER_LEADER_REPLICA_HOSTNAME")
    if not leader:
        if count > 1:
            raise PlacementError(
                f"node {rank} of {count}: no leader address (BEAKER_LEADER_REPLICA_HOSTNAME "
                "or RLC_LEADER_ADDR)"
            )
        leader = "127.0.0.1"
    address = env.get("RLC_NODE_ADDR") or (socket.gethostname() if count > 1 else "127.0.0.1")
    return NodeIdentity(rank, count, leader, address=address, registry_port=registry_port)


def roles_for(plan: Placement, ident: NodeIdentity) -> NodeRoles:
    """Select this node's roles; refuse a replica count that differs from the plan."""
    if ident.count != plan.num_nodes:
        raise PlacementError(
            f"the manifest was compiled for {plan.num_nodes} node(s) but the launcher started "
            f"{ident.count} (BEAKER_REPLICA_COUNT); recompile or fix the replica count"
        )
    return NodeRoles(
        rank=ident.rank,
        engines=tuple(e for e in plan.engines if e.node == ident.rank),
        router=plan.router is not None and plan.router.node == ident.rank,
        trainer=ident.rank in plan.trainer.nodes,
        leader=ident.rank == 0,
    )
