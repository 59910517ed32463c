"""Data files the spec names must exist where they can be seen: a missing one is an error at
the line that names it, at validate time, not a runtime failure after start-up.

Paths under a Beaker mount (``launch.weka_mounts``, or ``/weka/``) may exist only on the
cluster and are checked there. Re-derivation does not run this check: a manifest is
re-checked on machines that need not hold the data.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from compiler.diagnostics import Diagnostic, Span


def _remote(path: str, mounts: list[str]) -> bool:
    norm = posixpath.normpath(path)
    roots = [*mounts, "/weka"]
    return any(norm == r.rstrip("/") or norm.startswith(r.rstrip("/") + "/") for r in roots)


def data_paths(config: dict[str, Any]) -> list[tuple[tuple[Any, ...], str]]:
    """``(doc path, resolved path)`` of every data file the config names."""
    data = config["data"]
    out: list[tuple[tuple[Any, ...], str]] = []
    for key in ("prompt_data", "reward_config", "manifest"):
        if data.get(key):
            out.append((("data", key), str(data[key])))
    for i, task in enumerate(data.get("tasks") or []):
        if task.get("path"):
            out.append((("data", "tasks", i, "path"), str(task["path"])))
    for i, ev in enumerate(data.get("eval") or []):
        if ev.get("path"):
            out.append((("data", "eval", i, "path"), str(ev["path"])))
    return out


def missing_data_files(config: dict[str, Any], bound: Any) -> list[Diagnostic]:
    from compiler.spec.model_source import note_inputs

    mounts = [str(m["mount_path"]) for m in config["launch"]["weka_mounts"]]
    out: list[Diagnostic] = []
    for doc_path, path in data_paths(config):
        if _remote(path, mounts):
            continue
        note_inputs(path)  # a cached compile replays only while this stays as it is
        if os.path.exists(path):
            continue
        found = bound.writer(doc_path) or bound.locate(doc_path)
        span: Span | None = found[1].value.span if found else None
        where = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in doc_path)
        out.append(
            Diagnostic(
                "error",
                "data-file-missing",
                f"{where.replace('.[', '[')}: no such file or directory: {path}",
                span,
                help=(
                    "a path written in the spec resolves against the spec's directory, one "
                    "given with --set against the working directory; leave a task's path out "
                    "to use the data rlc ships for it",
                ),
            )
        )
    return out
