"""The immutable launch manifest: build, write (atomic, read-only, never replaced by a
different one) and load (digest and versions verified).

``digest`` is sha256 over the canonical JSON of the manifest without its ``digest`` key.
This module is pure python (the runtime imports it); it never imports pydantic at load time.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from compiler.diagnostics import Diagnostic, DiagnosticError
from contract.canonical import CanonicalError, canonical_bytes, digest_of
from contract.safe_read import MANIFEST_LIMIT, read_regular


class CompiledSpec(Protocol):
    """What a manifest is built from (``compiler.pipeline.CompileResult``); a protocol so
    the manifest never imports the pipeline that produces it."""

    source_path: str
    overrides: list[str]
    diagnostics: list[Diagnostic]
    source_sha256: str | None
    recipe: str | None
    recipe_sha256: str | None
    resolved: Any
    ruleset: Any
    lock: dict[str, Any]


MANIFEST_VERSION = 1
SCHEMA_VERSION = 1


# The modules the table's builder runs besides the spec models and the contract (its cache
# key).
SCHEMA_DIGEST_READS = (
    "manifest/__init__.py",
    "manifest/manifest.py",
    "diagnostics.py",
)


def schema_digest() -> str:
    """sha256 of the canonical JSON Schema of the spec models.

    Building the JSON Schema costs tens of milliseconds (and imports pydantic), so the
    digest is derived once and cached (`compiler.derive.derived`).
    """
    from compiler.derive.fastpath import spec_table

    digest: str = spec_table("spec-schema-digest", SCHEMA_DIGEST_READS, _schema_digest_now)
    return digest


def _schema_digest_now() -> str:
    return digest_of(spec_json_schema())


def spec_json_schema() -> dict[str, Any]:
    from compiler.spec import Spec

    schema: dict[str, Any] = Spec.model_json_schema(by_alias=True)
    return schema


def build_manifest(result: CompiledSpec) -> dict[str, Any]:
    """The manifest of a successful compile (no errors)."""
    from compiler import __version__
    from compiler.resolve.argv import commands

    resolved = result.resolved
    if resolved is None or result.ruleset is None:
        raise ValueError("build_manifest needs a resolved, checked compile")
    config = resolved.config
    body: dict[str, Any] = {
        "manifest_version": MANIFEST_VERSION,
        "schema_version": SCHEMA_VERSION,
        "name": config["name"],
        "compiler": {
            "version": __version__,
            "schema_digest": schema_digest(),
            "rules_digest": "sha256:" + result.ruleset.digest,
        },
        "source": {
            "path": result.source_path,
            "sha256": result.source_sha256,
            "overrides": list(result.overrides),
            "recipe": result.recipe,
            "recipe_sha256": result.recipe_sha256,
        },
        "config": config,
        "provenance": {k: v.to_json() for k, v in sorted(resolved.provenance.items())},
        "plan": resolved.plan,
        # derived facts the rules read (e.g. /weka paths seen); `rlc lint` re-runs rules on them
        "facts": resolved.facts,
        "commands": commands(config, resolved.plan, resolved.paths),
        "runtime_lock": result.lock,
        "paths": resolved.paths,
        "warnings": [d.to_json() for d in result.diagnostics if d.severity == "warning"],
    }
    body["digest"] = digest_of(body)
    return body


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return canonical_bytes(manifest)


def write_manifest(manifest: dict[str, Any], path: str | Path) -> Path:
    """Write atomically and read-only. The same bytes again is a no-op; different bytes over
    an existing manifest are refused (a manifest is immutable)."""
    path = Path(path)
    data = manifest_bytes(manifest)
    if path.exists():
        try:
            old = path.read_bytes()
        except OSError as exc:
            raise DiagnosticError(
                Diagnostic("error", "manifest-io", f"cannot read existing {path}: {exc}")
            ) from exc
        if old == data:
            return path
        old_digest = _digest_in(old)
        raise DiagnosticError(
            Diagnostic(
                "error",
                "manifest-exists",
                f"{path} already holds a different manifest ({old_digest}); manifests are "
                f"immutable and are never overwritten (new digest {manifest.get('digest')})",
                help=(
                    "compile to another directory with -o, change `name`, or delete the old "
                    "build directory if it is no longer needed",
                ),
            )
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _digest_in(data: bytes) -> str:
    try:
        return str(json.loads(data).get("digest", "?"))
    except (ValueError, AttributeError):
        return "unreadable"


def verify_manifest(
    manifest: Any,
    where: str = "manifest",
    *,
    trusted: bool = False,
    actual_digest: str | None = None,
) -> list[Diagnostic]:
    """Problems with a loaded manifest object: shape, versions, digest.

    ``trusted``: the object came from ``canonical.loads_strict`` (skip the type walk);
    ``actual_digest``: the body's digest when the caller already computed it (lint).
    """
    from compiler import __version__

    def err(code: str, msg: str, *help_: str) -> Diagnostic:
        return Diagnostic("error", code, f"{where}: {msg}", help=help_)

    if not isinstance(manifest, dict):
        return [err("manifest-invalid", "is not a JSON object")]
    out: list[Diagnostic] = []
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        out.append(
            err(
                "manifest-version",
                f"manifest_version {manifest.get('manifest_version')!r} "
                f"is not supported (expected {MANIFEST_VERSION})",
                "recompile the spec",
            )
        )
    if manifest.get("schema_version") != SCHEMA_VERSION:
        out.append(
            err(
                "manifest-version",
                f"schema_version {manifest.get('schema_version')!r} "
                f"is not supported (expected {SCHEMA_VERSION})",
                "recompile the spec",
            )
        )
    compiler = manifest.get("compiler")
    version = compiler.get("version") if isinstance(compiler, dict) else None
    if not isinstance(version, str) or version.split(".")[0] != __version__.split(".")[0]:
        out.append(
            err(
                "manifest-version",
                f"was written by compiler {version!r}, which this rlc {__version__} cannot read",
                "recompile the spec with this rlc",
            )
        )
    claimed = manifest.get("digest")
    body = {k: v for k, v in manifest.items() if k != "digest"}
    try:
        actual = actual_digest or digest_of(body, check=not trusted)
    except CanonicalError as exc:
        out.append(err("manifest-invalid", f"is not canonical JSON: {exc}"))
        return out
    if claimed != actual:
        out.append(
            err(
                "manifest-digest",
                f"digest mismatch: the file says {claimed!r} but its "
                f"content hashes to {actual!r}; it was modified after compilation",
                "recompile the spec instead of editing a manifest",
            )
        )
    for key in ("config", "plan", "commands", "paths", "provenance"):
        if not isinstance(manifest.get(key), dict):
            out.append(err("manifest-invalid", f"missing or invalid `{key}`"))
    return out


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read and verify a manifest; raises DiagnosticError when it cannot be trusted."""
    path = Path(path)
    try:
        data = read_regular(path, MANIFEST_LIMIT)
    except OSError as exc:
        raise DiagnosticError(
            Diagnostic(
                "error", "manifest-io", f"cannot read manifest {path}: {exc.strerror or exc}"
            )
        ) from exc
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise DiagnosticError(
            Diagnostic("error", "manifest-invalid", f"{path} is not valid JSON: {exc}")
        ) from exc
    problems = verify_manifest(manifest, str(path))
    if problems:
        raise DiagnosticError(problems)
    result: dict[str, Any] = manifest
    return result
