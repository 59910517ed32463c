"""`rlc diff`: field-level differences between two manifests (or specs), with provenance."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class Change:
    path: str
    left: Any
    right: Any
    left_origin: str
    right_origin: str

    def to_json(self) -> dict[str, Any]:
        def v(x: Any) -> Any:
            return None if x is _MISSING else x

        return {
            "path": self.path,
            "left": v(self.left),
            "right": v(self.right),
            "left_origin": self.left_origin,
            "right_origin": self.right_origin,
            "change": "added"
            if self.left is _MISSING
            else "removed"
            if self.right is _MISSING
            else "changed",
        }


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves by dotted path; lists of scalars stay whole, lists of tables are indexed."""
    out: dict[str, Any] = {}
    if isinstance(node, dict) and node:
        for k in sorted(node):
            out.update(flatten(node[k], f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(node, list) and node and any(isinstance(x, dict | list) for x in node):
        for i, x in enumerate(node):
            out.update(flatten(x, f"{prefix}.{i}"))
    else:
        out[prefix] = node
    return out


def origin(manifest: dict[str, Any], path: str) -> str:
    """A short description of where a config value came from."""
    prov = manifest.get("provenance", {})
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        p = prov.get(".".join(parts[:cut]))
        if p is None:
            continue
        kind = p.get("kind")
        span = p.get("span") or {}
        where = f"{span.get('file')}:{span.get('line')}" if span else ""
        if kind == "derived":
            return f"derived: {p.get('formula')}"
        if kind == "recipe":
            return f"recipe {p.get('recipe')} {where}".strip()
        if kind in ("spec", "override"):
            return f"{kind} {where}".strip()
        return str(kind)
    return "plan" if path.startswith("plan.") else "?"


def load_side(path: Path, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """A manifest file, or a spec compiled in memory (errors are raised as diagnostics)."""
    if path.suffix == ".json":
        from compiler.manifest.manifest import load_manifest

        return load_manifest(path)
    from compiler.pipeline import compile_spec

    result = compile_spec(path, list(overrides))
    return result.manifest()


def diff_manifests(left: dict[str, Any], right: dict[str, Any]) -> list[Change]:
    changes: list[Change] = []
    for section in ("config", "plan", "commands"):
        a = flatten(left.get(section, {}), section)
        b = flatten(right.get(section, {}), section)
        for key in sorted(set(a) | set(b)):
            va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
            if va == vb and type(va) is type(vb):
                continue
            field = key.split(".", 1)[1] if section == "config" else key
            changes.append(
                Change(
                    field,
                    va,
                    vb,
                    origin(left, field) if section == "config" else section,
                    origin(right, field) if section == "config" else section,
                )
            )
    return changes


def render(changes: list[Change], left_name: str, right_name: str) -> str:
    if not changes:
        return f"no differences between {left_name} and {right_name}"

    def show(x: Any) -> str:
        return "(absent)" if x is _MISSING else json.dumps(x, sort_keys=True)

    lines = [f"--- {left_name}", f"+++ {right_name}"]
    for c in changes:
        lines.append(f"{c.path}")
        lines.append(f"  - {show(c.left)}    [{c.left_origin}]")
        lines.append(f"  + {show(c.right)}    [{c.right_origin}]")
    config = sum(not c.path.startswith(("plan.", "commands.")) for c in changes)
    lines.append(
        f"{len(changes)} difference(s): {config} in config, {len(changes) - config} in plan/commands"
    )
    return "\n".join(lines)
