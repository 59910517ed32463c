"""Managed judges: the runtime starts each ``[judges.NAME]`` with ``mode = "managed"`` on
the GPUs and port the compiled placement gave it, and health-checks it like a rollout
engine before training starts (an unstarted judge would silently score 0).

The server is SGLang where it is installed (its OpenAI-compatible API), otherwise the
embedded engine, which serves the same ``/v1/chat/completions`` route
(``--served-model-name``). Judges are reached at ``http://HOST:PORT`` (see
``runtime.config.judge_bindings``).
"""

from __future__ import annotations

import sys
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

    def argv(self, sglang: bool, device: str) -> list[str]:
        """The judge server's command line."""
        s = self.settings
        model_path = s.prepared_dir or s.model
        context = str(s.max_context_length)
        if sglang:
            argv = [
                sys.executable,
                "-m",
                "sglang.launch_server",
                "--model-path",
                model_path,
                "--served-model-name",
                s.model,
                "--host",
                "0.0.0.0",
                "--port",
                str(self.port),
                "--tp-size",
                str(max(1, len(self.gpus))),
                "--context-length",
                context,
            ]
            if s.revision:
                argv += ["--revision", s.revision]
            if s.context_extension == "qwen3-yarn-128k":
                argv += [
                    "--json-model-override-args",
                    '{"rope_scaling":{"rope_type":"yarn","factor":4.0,'
                    '"original_max_position_embeddings":32768}}',
                ]
            return argv
        return [
            sys.executable,
            "-m",
            "runtime.engines.embedded",
            "--model-path",
            model_path,
            "--served-model-name",
            s.model,
            "--host",
            "0.0.0.0" if self.node else "127.0.0.1",
            "--port",
            str(self.port),
            "--device",
            device,
            "--context-length",
            context,
            "--max-running-requests",
            str(s.max_concurrent_calls),
        ]

    def env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in self.gpus)} if self.gpus else {}


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
    from runtime.engines.sglang import sglang_installed
    from runtime.node.health import healthy as _healthy

    cfg = runner.cfg
    mine = [j for j in planned_judges(cfg.spec, cfg.placement) if j.node == runner.ident.rank]
    sglang = sglang_installed()
    device = "cuda" if cfg.trainer.gpus else "cpu"
    urls = []
    for j in mine:
        runner.sup.start(f"judge:{j.name}", j.argv(sglang, device), env=j.env())
    for j in mine:
        url = f"http://127.0.0.1:{j.port}"
        runner.sup.wait_ready(
            f"judge:{j.name}",
            lambda url=url: _healthy(url, cfg.runtime.health_timeout_s),
            cfg.runtime.startup_timeout_s,
        )
        urls.append(url)
    return urls
