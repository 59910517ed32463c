"""Where each node's roles listen: a c10d TCPStore hosted by the leader (node 0).

Every node registers the roles it started (``engine:3`` -> ``http://host:port``, ``router``)
once they are healthy, and looks up the ones it needs from other nodes, waiting with the
manifest's startup timeout; a role that never registers fails the run with a message naming
the node and the role. The same store says when the run is over (``run/done``), so engine-only
nodes stop with the trainer, and carries node heartbeats.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta


class RegistryError(RuntimeError):
    """A role did not register in time, or the leader's registry is gone."""


DONE_KEY = "run/done"
ACK_KEY = "run/acked"


class Registry:
    """One node's handle on the leader's store (node 0 hosts it)."""

    def __init__(
        self, leader: str, port: int, *, node: int, is_leader: bool, timeout_s: float
    ) -> None:
        from runtime.node.heartbeat import store_client

        self.node = node
        self.timeout_s = timeout_s
        try:
            self.store = store_client(leader, port, timeout_s, is_master=is_leader)
        except Exception as exc:  # connection refused / timeout: one line with the cause
            what = "host" if is_leader else "reach"
            raise RegistryError(
                f"node {node} could not {what} the registry at {leader}:{port}: {exc}"
            ) from None
        self.store.set_timeout(timedelta(seconds=min(timeout_s, 30.0)))

    def register(self, role: str, address: str) -> None:
        self.store.set(f"role/{role}", f"{self.node} {address}")

    def lookup(
        self, roles: Sequence[str], owners: dict[str, int], timeout_s: float | None = None
    ) -> dict[str, str]:
        """Addresses of ``roles`` (``owners``: role -> node, for the error message)."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        found: dict[str, str] = {}
        while True:
            for role in roles:
                if role not in found and self.store.check([f"role/{role}"]):
                    found[role] = self.store.get(f"role/{role}").decode().split(" ", 1)[1]
            if len(found) == len(roles):
                return found
            if self.done():
                raise RegistryError("the run ended while this node waited for other roles")
            if time.monotonic() > deadline:
                missing = [r for r in roles if r not in found]
                where = ", ".join(f"{r} on node {owners.get(r, '?')}" for r in missing)
                raise RegistryError(
                    f"node {self.node}: {where} did not come up within "
                    f"{timeout_s or self.timeout_s:.0f}s (launch.coordination.startup_timeout); "
                    "see that node's logs"
                )
            time.sleep(0.5)

    def finish(self, outcome: str, nodes: int = 1, linger_s: float = 30.0) -> None:
        """Say the run is over; the leader, which hosts the store, waits until the other
        ``nodes - 1`` nodes have read it (or ``linger_s``) so none mistakes the end for a
        lost leader."""
        self.store.set(DONE_KEY, outcome)
        deadline = time.monotonic() + linger_s
        while nodes > 1 and time.monotonic() < deadline:
            try:
                if self.store.add(ACK_KEY, 0) >= nodes - 1:
                    return
            except Exception:
                return
            time.sleep(0.2)

    def acknowledge(self) -> None:
        self.store.add(ACK_KEY, 1)

    def done(self) -> str | None:
        """The trainer's outcome once the run is over; raises when the leader is gone."""
        try:
            if self.store.check([DONE_KEY]):
                return self.store.get(DONE_KEY).decode()
        except Exception as exc:
            raise RegistryError(f"node {self.node} lost the leader's registry: {exc}") from None
        return None


class LocalRegistry:
    """A one-node run: nothing to discover, same interface without a store or a port."""

    def __init__(self) -> None:
        self.roles: dict[str, str] = {}
        self.outcome: str | None = None

    def register(self, role: str, address: str) -> None:
        self.roles[role] = address

    def lookup(
        self, roles: Sequence[str], owners: dict[str, int], timeout_s: float | None = None
    ) -> dict[str, str]:
        missing = [r for r in roles if r not in self.roles]
        if missing:
            raise RegistryError(f"node 0: {', '.join(missing)} did not come up")
        return {r: self.roles[r] for r in roles}

    def finish(self, outcome: str, nodes: int = 1, linger_s: float = 0.0) -> None:
        self.outcome = outcome

    def acknowledge(self) -> None:
        pass

    def done(self) -> str | None:
        return self.outcome
