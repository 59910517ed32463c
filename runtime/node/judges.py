"""Managed judges: the runtime starts each ``[judges.NAME]`` with ``mode = "managed"`` from
its compiled command line and environment (``commands.judges``: on the GPUs and port the
compiled placement gave it), and health-checks it like a rollout engine before training
starts (an unstarted judge would silently score 0).

The server is the one ``judges.NAME.engine`` names: SGLang (its OpenAI-compatible API) or
the embedded engine, which serves the same ``/v1/chat/completions`` route
(``--served-model-name``). Judges are reached at ``http://HOST:PORT`` (see
``runtime.config.judge_bindings``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from contract.spec.judges import ManagedJudge as ManagedJudgeSpec

if TYPE_CHECKING:
    from contract.plan import Placement
    from contract.spec.root import Spec
    from runtime.node.protocol import Node


@dataclass(frozen=True)
class ManagedJudge:
    name: str
    node: int
    port: int
    gpus: tuple[int, ...]
    settings: ManagedJudgeSpec


def planned_judges(spec: Spec, placement: Placement) -> list[ManagedJudge]:
    """The managed judges of the compiled placement, with their ``[judges.NAME]`` settings."""
    out = []
    for placed in placement.judges:
        settings = spec.judges.get(placed.name)
        if not isinstance(settings, ManagedJudgeSpec):
            continue
        out.append(
            ManagedJudge(
                name=placed.name,
                node=placed.node,
                port=placed.port,
                gpus=tuple(placed.gpus),
                settings=settings,
            )
        )
    return out


def start_managed_judges(runner: Node) -> list[str]:
    """Start this node's managed judges and wait until each answers ``/health``."""
    from runtime.node.launch_argv import judge_process

    cfg = runner.cfg
    mine = [j for j in planned_judges(cfg.spec, cfg.placement) if j.node == runner.ident.rank]
    servers = [(f"judge:{j.name}", *judge_process(cfg, j.name, j.port), j.port) for j in mine]
    return runner.sup.start_servers(
        servers, cfg.runtime.health_timeout_s, cfg.runtime.startup_timeout_s
    )
