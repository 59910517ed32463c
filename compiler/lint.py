"""`rlc lint`: re-check compiled manifests in CI.

Per file: readable canonical JSON, supported versions, digest, the manifest JSON Schema,
and the installed compiler's rules re-run on the recorded config. A manifest compiled
under other rules is reported stale. Built for throughput: the schema validator and the
rule set are built once per process.
"""

from __future__ import annotations

import hashlib
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
    """A compiled validator for schemas/manifest.schema.json.

    fastjsonschema turns the schema into Python code (20x faster than interpreting it);
    the generated module is cached on disk by the schema's sha256 so later processes
    import its bytecode instead of regenerating it.
    """
    import hashlib
    import importlib.util
    import os

    import fastjsonschema

    from compiler.manifest import _cache_dir
    from compiler.resources import schemas_dir

    raw = (schemas_dir() / "manifest.schema.json").read_bytes()
    key = hashlib.sha256(raw + fastjsonschema.VERSION.encode()).hexdigest()[:24]
    module_path = _cache_dir() / "validators" / f"manifest_{key}.py"
    if not module_path.exists():
        code = fastjsonschema.compile_to_code(json.loads(raw))
        try:
            module_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = module_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(code, encoding="utf-8")
            os.replace(tmp, module_path)
        except OSError:
            namespace: dict[str, Any] = {}
            exec(compile(code, "manifest_schema", "exec"), namespace)  # noqa: S102 - generated
            return _entry(namespace)
    spec = importlib.util.spec_from_file_location(f"rlc_manifest_schema_{key}", module_path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return _entry(vars(module))


def _entry(namespace: dict[str, Any]) -> Any:
    return namespace["validate_https___rlc_dev_schemas_manifest_schema_json"]


def _schema_errors(manifest: dict[str, Any]) -> list[str]:
    import fastjsonschema

    try:
        _validator()(manifest)
    except fastjsonschema.JsonSchemaException as exc:
        return [str(getattr(exc, "message", exc))]
    return []


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
        # a table is set when any field below it is
        self.explicit_tables = {
            ".".join(p.split(".")[:i]) for p in self.explicit for i in range(1, p.count(".") + 1)
        }
        self._provenance = prov

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
        return path in self.explicit or path in self.explicit_tables

    def span(self, path: str) -> Span | None:
        """Spans are rebuilt only for the fields a finding points at."""
        entry = self._provenance.get(path)
        s = entry.get("span") if isinstance(entry, dict) else None
        if not s or not isinstance(s.get("line"), int):
            return None
        col = s.get("column") or 1
        return Span(
            str(s.get("file")),
            s["line"],
            col,
            s.get("end_line") or s["line"],
            s.get("end_column") or col + 1,
        )


def _err(path: str, code: str, message: str, *help_: str) -> Diagnostic:
    return Diagnostic("error", code, f"{path}: {message}", help=help_)


def lint_manifest(path: str | Path, data: bytes | None = None) -> LintReport:
    from compiler.canonical import CanonicalError, canonical_bytes, loads_strict
    from compiler.manifest import verify_manifest
    from compiler.rules import evaluate

    shown = str(path)
    report = LintReport(shown)
    try:
        raw = Path(path).read_bytes() if data is None else data
        manifest = loads_strict(raw.decode("utf-8"))
    except OSError as exc:
        report.findings.append(_err(shown, "manifest-io", f"cannot read: {exc.strerror or exc}"))
        return report
    except CanonicalError as exc:
        report.findings.append(_err(shown, "manifest-not-canonical", str(exc)))
        return report
    except (UnicodeDecodeError, ValueError) as exc:
        report.findings.append(_err(shown, "manifest-invalid", f"not valid JSON: {exc}"))
        return report
    # One serialization serves both checks: the file must be canonical, and then the body's
    # canonical bytes are the file's bytes without the top-level "digest" member.
    whole = canonical_bytes(manifest, check=False) if isinstance(manifest, dict) else b""
    is_canonical = raw.rstrip(b"\n") == whole.rstrip(b"\n")
    actual = None
    claimed = manifest.get("digest") if isinstance(manifest, dict) else None
    if is_canonical and isinstance(claimed, str):
        member = b'"digest":' + json.dumps(claimed).encode() + b","
        if whole.count(member) >= 1 and not whole.startswith(b"{" + member):
            body = whole.replace(b"," + member, b",", 1)
            actual = "sha256:" + hashlib.sha256(body).hexdigest()
    problems = verify_manifest(manifest, shown, trusted=True, actual_digest=actual)
    report.findings.extend(problems)
    if not isinstance(manifest, dict):
        return report
    if not is_canonical:
        report.findings.append(
            _err(
                shown,
                "manifest-not-canonical",
                "bytes are not in canonical form",
                "manifests are written by `rlc compile`; do not reformat them",
            )
        )
    errors = _schema_errors(manifest)
    for message in errors:
        report.findings.append(
            _err(
                shown,
                "manifest-schema",
                f"does not match the manifest JSON Schema: {message}",
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
