"""This node's roles, read from the compiled placement and the launcher's rank variables.

Beaker sets ``BEAKER_REPLICA_RANK`` / ``BEAKER_REPLICA_COUNT`` and, with leader selection,
``BEAKER_LEADER_REPLICA_HOSTNAME``; a local run has none of them and is node 0 of 1. The
placement is decided at compile time, so a node never guesses what to start.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.config import EnginePlacement, PlacementPlan


class PlacementError(RuntimeError):
    """The launcher's view (rank/count) disagrees with the compiled placement."""


@dataclass(frozen=True)
class NodeIdentity:
    rank: int
    count: int
    leader_host: str


@dataclass(frozen=True)
class NodeRoles:
    """What this node starts: engine processes, the router, the trainer."""

    rank: int
    engines: tuple[EnginePlacement, ...]
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
    try:
        rank = int(env.get("BEAKER_REPLICA_RANK", "0") or 0)
        count = int(env.get("BEAKER_REPLICA_COUNT", "1") or 1)
    except ValueError as exc:
        raise PlacementError(f"bad Beaker replica variables: {exc}") from None
    leader = env.get("BEAKER_LEADER_REPLICA_HOSTNAME") or "127.0.0.1"
    if not 0 <= rank < count:
        raise PlacementError(f"BEAKER_REPLICA_RANK={rank} is outside 0..{count - 1}")
    return NodeIdentity(rank=rank, count=count, leader_host=leader)


def roles_for(plan: PlacementPlan, ident: NodeIdentity) -> NodeRoles:
    """Select this node's roles; refuse a replica count that differs from the plan."""
    if ident.count != plan.num_nodes:
        raise PlacementError(
            f"the manifest was compiled for {plan.num_nodes} node(s) but the launcher started "
            f"{ident.count} (BEAKER_REPLICA_COUNT); recompile or fix the replica count"
        )
    return NodeRoles(
        rank=ident.rank,
        engines=tuple(e for e in plan.engines if e.node == ident.rank),
        router=plan.router_node == ident.rank,
        trainer=ident.rank in plan.trainer_nodes,
        leader=ident.rank == 0,
    )


def engine_url(engine: EnginePlacement, ident: NodeIdentity) -> str:
    """URL of an engine as seen from this node (other nodes are reached via the leader host)."""
    host = engine.host if engine.node == ident.rank else ident.leader_host
    return f"http://{host}:{engine.port}"
