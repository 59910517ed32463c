"""What the trainer-side code and the managed judges use of a node (`runtime.entrypoints.execute.NodeRunner`),
as a protocol: they type against it without importing the module that imports them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from runtime.config import RunConfig
    from runtime.node.placement import NodeIdentity
    from runtime.node.supervisor import Supervisor
    from runtime.rollout.loop import StopFlag


class Node(Protocol):
    """One node's running roles: its config, identity, processes and engine addresses."""

    cfg: RunConfig
    ident: NodeIdentity
    resume: str
    progress: bool
    progress_every: int
    stop: StopFlag
    sup: Supervisor
    registry: Any
    engine_urls: list[str]
    gen_url: str
    publisher: Any
    prompts: tuple[Any, dict[str, Any]] | None
    on_close: list[Any]
    rank_pids: Any
    startup: Any  # runtime.node.startup.StartupClock: the start-up phases
    teacher_url: str | None  # on-policy distillation: the teacher this node started

    def health_check(self) -> None: ...
