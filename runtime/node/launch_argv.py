"""The compiled command lines as this node runs them: the documented substitutions only.

The manifest holds every process's argv (``manifest.commands``). The runtime runs each as
it stands, except for what only this node knows:

- ``python`` / ``python3`` as the program -> this interpreter (the run's venv);
- ``{manifest}`` -> the manifest path, ``{host:N}`` -> the address of node N;
- the value of a port flag the node picked afresh (``--port``, ``--prometheus-port``: the
  machine may run other jobs on the compiled ports), and the values of ``--worker-urls``
  (the engines' addresses as their nodes registered them).

A substitution never adds a flag: a flag to substitute that the compiled argv lacks, or a
placeholder without a value, is an error, so a manifest cannot be run as something else.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

PYTHON_NAMES = ("python", "python3")
_HOST = re.compile(r"\{host:(\d+)\}")


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
) -> list[str]:
    """``argv`` with the node's substitutions (see the module docstring).

    ``values``: flag -> its new single value; ``lists``: flag -> its new values (all the
    tokens after the flag up to the next ``--`` option are replaced).
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
    return [_placeholders(a, manifest, hosts or {}) for a in out]


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


def _placeholders(arg: str, manifest: str | None, hosts: Mapping[int, str]) -> str:
    if "{manifest}" in arg:
        if manifest is None:
            raise SubstitutionError("{manifest} in the command line but no manifest path")
        arg = arg.replace("{manifest}", manifest)

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
    from runtime.engines.backend import backend_for

    if engine.id >= len(cfg.engine_argv):
        raise SubstitutionError(f"the manifest has no command line for engine {engine.id}")
    argv = substitute(
        cfg.engine_argv[engine.id], manifest=manifest, values={"--port": str(engine.port)}
    )
    return argv, backend_for(cfg.inference.engine).env(engine)


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
