"""The compiled processes as this node runs them: the documented substitutions only.

The manifest holds every process's argv and environment (``manifest.commands``: engines,
router, trainer, follower trainer ranks, managed judges, teacher). The runtime runs each as
it stands, except for what only this node knows:

- ``python`` / ``python3`` as the program -> this interpreter (the run's venv);
- ``{manifest}`` -> the manifest path, ``{host:N}`` -> the address of node N;
- the value of a port flag the node picked afresh (``--port``, ``--prometheus-port``: the
  machine may run other jobs on the compiled ports), and the values of ``--worker-urls``
  (the engines' addresses as their nodes registered them); a managed judge's ``--port`` is
  checked to be its planned one, where its clients reach it;
- in a trainer rank's argv and environment: ``{rank}`` (global rank), ``{local_rank}``,
  ``{node_rank}`` (the node's index among the trainer nodes), ``{trainer_addr}`` and
  ``{trainer_port}`` (where rank 0 waits, as it registered), ``{cpu_threads}`` (this node's
  cores split between its ranks);
- in a background evaluator's argv: ``{update}`` and ``{checkpoint}`` (the milestone it
  evaluates and that milestone's snapshot).

A substitution never adds a flag or a variable: a flag to substitute that the compiled argv
lacks, an unknown placeholder or one without a value is an error, so a manifest cannot be
run as something else.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

PYTHON_NAMES = ("python", "python3")
_HOST = re.compile(r"\{host:(\d+)\}")
_NAMED = re.compile(r"\{([a-z_]+)\}")
PLACEHOLDERS = frozenset(
    {
        *("manifest", "rank", "local_rank", "node_rank", "trainer_addr", "trainer_port"),
        *("cpu_threads", "update", "checkpoint"),
    }
)


class SubstitutionError(ValueError):
    """The compiled argv does not have what the node must substitute."""


def substitute(
    argv: Sequence[str],
    *,
    python: str | None = None,
    manifest: str | None = None,
    hosts: Mapping[int, str] | None = None,
    values: Mapping[str, str] | None = None,
    lists: Mapping[str, Sequence[str]] | None = None,
    named: Mapping[str, str] | None = None,
) -> list[str]:
    """``argv`` with the node's substitutions (see the module docstring).

    ``values``: flag -> its new single value; ``lists``: flag -> its new values (all the
    tokens after the flag up to the next ``--`` option are replaced); ``named``: placeholder
    name -> value (``{"rank": "1"}``).
    """
    out = [str(a) for a in argv]
    if not out:
        raise SubstitutionError("empty command line")
    if out[0] in PYTHON_NAMES:
        out[0] = python or sys.executable
    for flag, value in (values or {}).items():
        out = _set_value(out, flag, [str(value)], single=True)
    for flag, items in (lists or {}).items():
        out = _set_value(out, flag, [str(v) for v in items], single=False)
    known = {**(named or {}), **({} if manifest is None else {"manifest": manifest})}
    return [_placeholders(a, known, hosts or {}) for a in out]


def substitute_env(
    env: Mapping[str, str], named: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A compiled environment with the named placeholders' values (see the module docstring)."""
    return {k: _placeholders(str(v), named or {}, {}) for k, v in env.items()}


def _set_value(argv: list[str], flag: str, new: list[str], *, single: bool) -> list[str]:
    for i, a in enumerate(argv):
        if single and a.startswith(flag + "="):
            return [*argv[:i], f"{flag}={new[0]}", *argv[i + 1 :]]
        if a == flag:
            end = i + 2 if single else i + 1
            if not single:
                while end < len(argv) and not argv[end].startswith("--"):
                    end += 1
            if single and end > len(argv):
                break
            return [*argv[: i + 1], *new, *argv[end:]]
    raise SubstitutionError(f"the compiled command line has no {flag} value to substitute")


def _placeholders(arg: str, named: Mapping[str, str], hosts: Mapping[int, str]) -> str:
    def value(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in PLACEHOLDERS:
            raise SubstitutionError(f"unknown placeholder {{{name}}} in the compiled command")
        if name not in named:
            raise SubstitutionError(f"{{{name}}} in the compiled command but no value for it")
        return named[name]

    arg = _NAMED.sub(value, arg)

    def host(m: re.Match[str]) -> str:
        node = int(m.group(1))
        if node not in hosts:
            raise SubstitutionError(f"{{host:{node}}} in the command line but node {node} unknown")
        return hosts[node]

    return _HOST.sub(host, arg)


def engine_process(
    cfg: Any, engine: Any, *, manifest: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """An engine's command line and environment (``cfg``: a ``RunConfig``): its compiled
    argv with the port this node gave it, and the GPUs the plan gave it."""
    if engine.id >= len(cfg.engine_argv):
        raise SubstitutionError(f"the manifest has no command line for engine {engine.id}")
    envs = cfg.contract.commands.engine_env
    if engine.id >= len(envs):
        raise SubstitutionError(f"the manifest has no environment for engine {engine.id}")
    argv = substitute(
        cfg.engine_argv[engine.id], manifest=manifest, values={"--port": str(engine.port)}
    )
    return argv, substitute_env(envs[engine.id])


def judge_process(cfg: Any, name: str, port: int) -> tuple[list[str], dict[str, str]]:
    """A managed judge's compiled command line and environment, on its planned ``port``."""
    compiled = cfg.contract.commands.judges.get(name)
    if compiled is None:
        raise SubstitutionError(f"the manifest has no command line for judge {name!r}")
    try:
        argv = substitute(compiled.argv, values={"--port": str(port)})
    except SubstitutionError as exc:
        raise SubstitutionError(f"judge {name!r}: {exc}") from None
    return argv, substitute_env(compiled.env)


def trainer_rank_process(
    compiled: Any, manifest: str, values: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """A follower trainer rank's compiled command line and environment
    (``commands.trainer_rank``) with this node's ``values`` of the rank placeholders
    (``rank``, ``trainer_port``, ...)."""
    if compiled is None:
        raise SubstitutionError("the manifest has no trainer rank command line (world size 1)")
    return (
        substitute(compiled.argv, manifest=manifest, named=values),
        substitute_env(compiled.env, values),
    )


def router_process(cfg: Any, urls: Sequence[str], port: int, metrics_port: int) -> list[str]:
    """sglang-router's compiled command line with this node's ports and the engines at the
    addresses their nodes registered."""
    if not cfg.router_argv:
        raise SubstitutionError("the manifest has no router command line")
    return substitute(
        cfg.router_argv,
        values={"--port": str(port), "--prometheus-port": str(metrics_port)},
        lists={"--worker-urls": list(urls)},
    )
