"""`rlc lint`: re-check compiled manifests in CI.

Per file: readable canonical JSON, supported versions, digest, the manifest JSON Schema,
and the installed compiler's rules re-run on the recorded config. A manifest compiled
under other rules is reported stale. Built for throughput (docs/benchmarks.md, "Lint
throughput"); what each step costs and why each shortcut is sound:

* Canonical form and decode: `canonical.load_if_canonical` decodes and re-encodes with
  orjson and compares bytes, respelling the few floats orjson spells differently. A file it
  declines (not canonical, or a case it cannot judge) takes the exact stdlib path, so a
  non-canonical file is still reported, with the same message as before.
* Digest: for a canonical file, the body's canonical bytes *are* the file's bytes without
  the top-level ``"digest"`` member, so the digest is a sha256 over two slices of the file
  (`canonical.digest_without`); no re-serialization.
* JSON Schema: run on every manifest, even one whose digest matches. The digest only
  proves the body was not changed *after someone computed it*; anyone editing a manifest
  can recompute it (the algorithm is public, there is no key), so a matching digest says
  nothing about schema validity - "its digest checks out, so its parts are as compiled"
  would pass exactly the forged manifests lint exists to catch. What is skipped is only
  work that cannot change a verdict: `lint_schema` first asks a generated yes/no predicate
  built to be at least as strict as fastjsonschema, and calls fastjsonschema (which writes
  the message) only when that predicate does not say "valid".
* Rules: conditions are compiled once per rule set into closures (`rules.compile`),
  equivalent to the tree interpreter.
* The cyclic garbage collector pauses during one file: a decoded manifest is acyclic and
  freed by reference counting, and the collector's passes over it cost ~15% of a lint.
"""

from __future__ import annotations

import gc
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from compiler.diagnostics import Diagnostic, Span
from compiler.manifest.lint_schema import schema_errors
from compiler.rules.expr import UNSET
from contract.canonical import (
    CanonicalError,
    canonical_bytes,
    digest_without,
    load_if_canonical,
    loads_strict,
)
from contract.safe_read import MANIFEST_LIMIT, read_regular


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
def _ruleset() -> Any:
    from compiler.resources import rules_dir
    from compiler.rules import load_rules

    return load_rules(rules_dir())


def _steps(path: str) -> tuple[str, Any]:
    """A rule path split once: ``facts.*`` keys are flat; other segments are dict keys, or
    list indexes when they are digits."""
    head, _, rest = path.partition(".")
    if head == "facts":
        return head, (rest,)
    parts = rest.split(".") if head == "plan" else path.split(".")
    return head, tuple((p, int(p) if p.isdigit() else None) for p in parts)


_STEPS: dict[str, tuple[str, Any]] = {}
_EXPLICIT = frozenset({"spec", "override", "recipe"})


class ManifestView:
    """The rules' view of a manifest: config paths, ``plan.*``, ``facts.*``, recorded spans."""

    def __init__(self, manifest: dict[str, Any]):
        self.config = manifest.get("config", {})
        self.plan = manifest.get("plan", {})
        self.facts = manifest.get("facts", {})
        self._provenance: dict[str, Any] = manifest.get("provenance", {})
        self._keys: list[str] | None = None

    def get(self, path: str) -> Any:
        try:
            head, steps = _STEPS[path]
        except KeyError:
            head, steps = _STEPS.setdefault(path, _steps(path))
        if head == "facts":
            return self.facts.get(steps[0], UNSET)
        node: Any = self.plan if head == "plan" else self.config
        for key, index in steps:
            if isinstance(node, dict):
                if key not in node:
                    return UNSET
                node = node[key]
            elif isinstance(node, list) and index is not None and index < len(node):
                node = node[index]
            else:
                return UNSET
        return node

    def is_set(self, path: str) -> bool:
        """Given by the user (spec, override, recipe); a table is set when any field below
        it is. Answered per path (rules ask about a dozen) rather than for all ~200
        provenance entries up front."""
        if self._explicit(path):
            return True
        if self._keys is None:
            self._keys = sorted(self._provenance)
        prefix = path + "."
        keys = self._keys
        i = bisect_left(keys, prefix)
        while i < len(keys) and keys[i].startswith(prefix):
            if self._explicit(keys[i]):
                return True
            i += 1
        return False

    def _explicit(self, path: str) -> bool:
        entry = self._provenance.get(path)
        return isinstance(entry, dict) and entry.get("kind") in _EXPLICIT

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
    """Lint one manifest file (``data``: its bytes, when the caller has read them)."""
    # A decoded manifest is thousands of acyclic containers, freed by reference counting;
    # the cyclic collector only re-scans them (~15% of a lint), so it pauses meanwhile.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _lint(path, data)
    finally:
        if paused:
            gc.enable()


def _lint(path: str | Path, data: bytes | None) -> LintReport:
    from compiler.manifest.manifest import verify_manifest
    from compiler.rules import evaluate

    shown = str(path)
    report = LintReport(shown)
    try:
        raw = read_regular(path, MANIFEST_LIMIT) if data is None else data
    except OSError as exc:
        report.findings.append(_err(shown, "manifest-io", f"cannot read: {exc.strerror or exc}"))
        return report
    fast = load_if_canonical(raw)
    if fast is not None:
        manifest, compact = fast
        is_canonical = True
    else:
        try:
            manifest, compact, is_canonical = _load_exact(raw)
        except CanonicalError as exc:
            report.findings.append(_err(shown, "manifest-not-canonical", str(exc)))
            return report
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            report.findings.append(_err(shown, "manifest-invalid", f"not valid JSON: {exc}"))
            return report
    actual = None
    claimed = manifest.get("digest") if isinstance(manifest, dict) else None
    if is_canonical and isinstance(claimed, str):
        actual = digest_without(compact, "digest", claimed)
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
    errors = schema_errors(manifest)
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
    report.findings.extend(artifact_findings(manifest, shown))
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


def artifact_findings(manifest: dict[str, Any], shown: str) -> list[Diagnostic]:
    """The run paths and command lines recomputed from the manifest's own config and plan.

    Why: these are what the runtime executes; a hand edit (a shell command in
    ``commands.engine_argv``) must be a finding of plain `rlc lint`, not only of
    ``--rederive``. Cheap (~0.05 ms): it does not re-resolve the user-written config, which
    is what ``--rederive`` adds (derived config values, plan, facts).
    """
    from compiler.resolve.argv import commands
    from compiler.resolve.paths import derived_paths

    try:
        config, plan = manifest["config"], manifest["plan"]
        paths = derived_paths(config)
        fresh = {
            "paths": paths,
            "commands": commands(config, plan, paths),
        }
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        return [_err(shown, "manifest-derived", f"its command lines cannot be derived: {exc!r}")]
    return [
        _err(
            shown,
            "manifest-derived",
            f"`{key}` differs from what the compiler derives from the manifest's config and "
            "plan; derived fields are never edited by hand",
            "recompile the spec instead of editing a manifest",
        )
        for key, value in fresh.items()
        if manifest.get(key) != value
    ]


def _load_exact(raw: bytes) -> tuple[Any, bytes, bool]:
    """The stdlib path: decode, re-serialize, compare (for files the fast path declines)."""
    manifest = loads_strict(raw.decode("utf-8"))
    if not isinstance(manifest, dict):
        return manifest, b"", False
    try:
        whole = canonical_bytes(manifest, check=False).rstrip(b"\n")
    except CanonicalError:  # e.g. a lone surrogate: no UTF-8 bytes encode it
        return manifest, b"", False
    return manifest, whole, raw.rstrip(b"\n") == whole


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
