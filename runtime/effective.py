"""What a manifest runs, without running it: ``python -m runtime.entrypoints.execute M --print-effective``.

Every component's typed settings (the ``RunConfig`` objects the runtime hands them, dumped
generically: dataclasses and pydantic models become JSON; the untyped ``raw`` pass-through
sections are left out, so a field shows here only through a typed setting) and every
process's command line and environment exactly as this node would start it (the
substitutions of ``runtime.node.launch_argv``, with the compiled ports in place of the ones a
node picks at start-up). Nothing starts, and no tensor library is imported.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

# untyped pass-through (a field reaches the output only through a typed setting), the
# manifest's identity, and the command lines (shown as the processes that run them)
_LEFT_OUT = frozenset({"raw", "config", "digest", "manifest_path", "engine_argv", "router_argv"})


def jsonable(value: Any) -> Any:
    """Dataclasses, pydantic models, paths, tuples and mappings as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name not in _LEFT_OUT
        }
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return jsonable(dump(mode="json"))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [jsonable(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def processes(cfg: Any, commands: dict[str, Any], manifest_path: str) -> dict[str, dict[str, Any]]:
    """name -> {"node", "argv", "env"} of every process the manifest's nodes start, as
    compiled (``commands``) with the node's documented substitutions; a trainer rank's
    run-time values (``{rank}``, ``{trainer_port}``, ...) stay placeholders."""
    from runtime.node.launch_argv import (
        engine_process,
        judge_process,
        router_process,
        substitute,
        substitute_env,
    )

    out: dict[str, dict[str, Any]] = {}
    urls = []
    for e in cfg.placement.engines:
        argv, env = engine_process(cfg, e, manifest=manifest_path)
        out[f"engine:{e.id}"] = {"node": e.node, "argv": argv, "env": env}
        urls.append(f"http://127.0.0.1:{e.port}")
    router = cfg.placement.router
    if router is not None and cfg.router_argv:
        port = router.port
        out["router"] = {
            "node": router.node,
            "argv": router_process(cfg, urls, port, port + 1),
            "env": {},
        }
    for j in cfg.placement.judges:
        if j.name in cfg.contract.commands.judges:
            argv, env = judge_process(cfg, j.name, j.port)
            out[f"judge:{j.name}"] = {"node": j.node, "argv": argv, "env": env}
    trainer_node = min(cfg.placement.trainer.nodes or [0])
    trainer = commands.get("trainer_argv")
    if trainer:
        out["trainer"] = {
            "node": trainer_node,
            "argv": substitute(trainer, manifest=manifest_path),
            "env": {},
        }
    rank = cfg.contract.commands.trainer_rank
    if rank is not None:
        out["trainer_rank"] = {
            "nodes": list(cfg.placement.trainer.nodes or [0]),
            "argv": substitute(rank.argv, manifest=manifest_path),
            "env": dict(rank.env),
        }
    teacher, placed = cfg.contract.commands.teacher_argv, cfg.placement.teacher
    if teacher and placed is not None:
        out["teacher"] = {
            "node": placed.node,
            "argv": substitute(teacher),
            "env": substitute_env(cfg.contract.commands.teacher_env),
        }
    evaluator = cfg.contract.commands.evaluator_argv
    if evaluator:  # background evaluation: a subprocess (or Beaker job) per milestone
        milestone = {"update": "{update}", "checkpoint": "{checkpoint}"}
        out["evaluator"] = {
            "node": trainer_node,
            "argv": substitute(evaluator, manifest=manifest_path, named=milestone),
            "env": {},
        }
    return out


def components(manifest: dict[str, Any], cfg: Any) -> dict[str, Any]:
    """The settings components derive for themselves from the manifest: the trainer's
    (``TrainerConfig``, plain data in a torch-free module), the rollout
    driver's, the tracking sink's and the compiler cache's."""
    from runtime.compiler_cache import CompilerCache
    from runtime.rollout.driver import rollout_concurrency, sampling_seed, submission_granularity
    from runtime.rollout.shaping import Shaping
    from runtime.tracking import WandbSink
    from runtime.trainer.settings import TrainerConfig

    return {
        "rollout": {
            "sampling_seed": sampling_seed(cfg),
            "submission_granularity": submission_granularity(cfg),
            "concurrency": rollout_concurrency(cfg),
        },
        "reward_shaping": Shaping.from_contract(cfg.rewards),
        "trainer": TrainerConfig.from_contract(cfg.contract),
        "tracking": WandbSink.from_contract(cfg.tracking),
        "compiler_cache": CompilerCache.from_contract(cfg.compiler_cache, env={}),
    }


def effective(manifest: dict[str, Any], manifest_path: str) -> dict[str, Any]:
    """The effective view of a verified manifest (see the module docstring)."""
    from contract.run import parse
    from runtime.config import RunConfig

    cfg = RunConfig.from_contract(parse(manifest))
    # the typed settings: the resolved spec sections every component receives (the contract),
    # the plan, and what the runtime joins from them; not the manifest's identity or commands
    settings = {
        **cfg.config_document,
        "plan": cfg.plan,
        "paths": cfg.paths,
        "judge_bindings": cfg.judge_bindings,
        "teacher": cfg.teacher,
    }
    return {
        "settings": jsonable(settings),
        "components": jsonable(components(manifest, cfg)),
        "processes": processes(cfg, manifest.get("commands") or {}, manifest_path),
    }
