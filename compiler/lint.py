"""`rlc lint`: re-check compiled manifests in CI.

Per file: readable canonical JSON, supported versions, digest, the manifest JSON Schema,
and the installed compiler's rules re-run on the recorded config. A manifest compiled
under other rules is reported stale. Built for throughput: the schema validator and the
rule set are built once per process.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from compiler.diagnostics import Diagnostic, Span


@dataclass
class LintReport:
    path: str
    findings: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok, "findings": [d.to_json() for d in self.findings]}


@cache
def _validator() -> Any:
    import jsonschema

    from compiler.resources import schemas_dir

    schema = json.loads((schemas_dir() / "manifest.schema.json").read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


@cache
def _ruleset() -> Any:
    from compiler.resources import rules_dir
    from compiler.rules import load_rules

    return load_rules(rules_dir())


class ManifestView:
    """The rules' view of a manifest: config paths, ``plan.*``, ``facts.*``, recorded spans."""

    def __init__(self, manifest: dict[str, Any]):
        self.config = manifest.get("config", {})
        self.plan = manifest.get("plan", {})
        self.facts = manifest.get("facts", {})
        prov: dict[str, Any] = manifest.get("provenance", {})
        self.explicit = {
            p for p, v in prov.items() if v.get("kind") in ("spec", "override", "recipe")
        }
        self.spans: dict[str, Span] = {}
        for p, v in prov.items():
            s = v.get("span")
            if s and isinstance(s.get("line"), int):
                self.spans[p] = Span(
                    str(s.get("file")),
                    s["line"],
                    s.get("column") or 1,
                    s.get("end_line") or s["line"],
                    s.get("end_column") or (s.get("column") or 1) + 1,
                )

    def get(self, path: str) -> Any:
        from compiler.rules import UNSET

        head, _, rest = path.partition(".")
        if head == "facts":
            return self.facts.get(rest, UNSET)
        node: Any = self.plan if head == "plan" else self.config
        parts = rest.split(".") if head == "plan" else path.split(".")
        for part in parts:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return UNSET
        return node

    def is_set(self, path: str) -> bool:
        if path in self.explicit:
            return True
        prefix = path + "."
        return any(p.startswith(prefix) for p in self.explicit)

    def span(self, path: str) -> Span | None:
        return self.spans.get(path)


def _err(path: str, code: str, message: str, *help_: str) -> Diagnostic:
    return Diagnostic("error", code, f"{path}: {message}", help=help_)


def lint_manifest(path: str | Path, data: bytes | None = None) -> LintReport:
    from compiler.canonical import canonical_bytes
    from compiler.manifest import verify_manifest
    from compiler.rules import evaluate

    shown = str(path)
    report = LintReport(shown)
    try:
        raw = Path(path).read_bytes() if data is None else data
        manifest = json.loads(raw.decode("utf-8"))
    except OSError as exc:
        report.findings.append(_err(shown, "manifest-io", f"cannot read: {exc.strerror or exc}"))
        return report
    except (UnicodeDecodeError, ValueError) as exc:
        report.findings.append(_err(shown, "manifest-invalid", f"not valid JSON: {exc}"))
        return report
    problems = verify_manifest(manifest, shown)
    report.findings.extend(problems)
    if not isinstance(manifest, dict):
        return report
    try:
        if raw.rstrip(b"\n") != canonical_bytes(manifest).rstrip(b"\n"):
            report.findings.append(
                _err(
                    shown,
                    "manifest-not-canonical",
                    "bytes are not in canonical form",
                    "manifests are written by `rlc compile`; do not reformat them",
                )
            )
    except Exception as exc:  # noqa: BLE001 - non-canonical values are a finding
        report.findings.append(_err(shown, "manifest-not-canonical", str(exc)))
    errors = sorted(_validator().iter_errors(manifest), key=lambda e: list(e.absolute_path))
    for error in errors[:20]:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        report.findings.append(
            _err(
                shown,
                "manifest-schema",
                f"at {where}: {error.message}",
                "see schemas/manifest.schema.json",
            )
        )
    if errors or any(d.code == "manifest-version" for d in problems):
        return report
    ruleset = _ruleset()
    recorded = (manifest.get("compiler") or {}).get("rules_digest")
    current = "sha256:" + ruleset.digest
    if recorded != current:
        report.findings.append(
            _err(
                shown,
                "manifest-stale",
                f"compiled under rules {recorded}, but this rlc has rules {current}",
                "recompile the spec with this rlc (`rlc compile`) and commit the new manifest",
            )
        )
    for finding in evaluate(ruleset, ManifestView(manifest)):
        diag = finding.to_diagnostic()
        if diag.severity == "error":
            report.findings.append(
                Diagnostic(
                    diag.severity,
                    diag.code,
                    f"{shown}: {diag.message}",
                    diag.span,
                    diag.secondary,
                    diag.help,
                    diag.notes,
                )
            )
    return report


def expand(paths: Iterable[str]) -> list[Path]:
    """Files, directories (every manifest.json below) and glob patterns."""
    import glob

    out: list[Path] = []
    for p in paths:
        matches = glob.glob(p, recursive=True) if any(c in p for c in "*?[") else [p]
        for m in matches:
            mp = Path(m)
            if mp.is_dir():
                out.extend(sorted(mp.rglob("manifest.json")))
            else:
                out.append(mp)
    return out
