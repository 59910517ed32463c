"""Load a manifest the runtime may carry out: every check lint makes, then re-derivation.

The digest is an unkeyed checksum: anyone who edits a manifest can recompute it. So the
runtime's entry (`runtime.manifest.verify`, once per run; the processes it starts then only
check the digest, `contract.run`) re-checks what
`rlc lint` checks - canonical JSON without duplicate keys, versions, digest, the manifest
JSON Schema, the rules digest, every rule - and then recomputes everything the compiler
*derives* (defaults, derived config values, facts, plan, paths, command lines) from the
values the user wrote, refusing any difference. Editing a derived field, e.g. putting a
shell command into ``commands.engine_argv``, can then no longer run anything: the only way
to change what runs is to change the user-written config, which the schema and rules see.

Optional provenance beyond that: a keyed HMAC signature (`rlc compile --sign`) verified
when ``RLC_SIGNING_KEY`` is set; and ``RLC_MANIFEST_SHA256`` (set by the Beaker spec)
pins the digest the job was submitted with. docs/ci.md says what each check proves.

It is also the one place the runtime asks the compiler for something derived from a
verified manifest that is not stored in it: the background evaluator's Beaker job
(`evaluator_job`), which embeds the manifest itself and so cannot be a field of it.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from compiler.diagnostics import Diagnostic, DiagnosticError, Span, render_all
from contract.env import PIN_ENV
from contract.safe_read import MANIFEST_LIMIT, SIGNATURE_LIMIT, read_regular, read_regular_text

__all__ = [
    "DiagnosticError",
    "check_manifest",
    "evaluator_job",
    "load_trusted",
    "render_all",
    "sign_bytes",
]

SIGNING_KEY_ENV = "RLC_SIGNING_KEY"
DIGEST_ENV = PIN_ENV
SIGNATURE_SUFFIX = ".sig"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
_EXPLICIT = ("spec", "override", "recipe")
_CONFIG_SPAN = Span("<manifest config>", 1, 1, 1, 2)


def _err(where: str, code: str, message: str, *help_: str) -> Diagnostic:
    return Diagnostic("error", code, f"{where}: {message}", help=help_)


# -- signatures ---------------------------------------------------------------------------
def signature_path(manifest_path: str | Path) -> Path:
    """The detached signature next to a manifest (``manifest.json.sig``)."""
    p = Path(manifest_path)
    return p.with_name(p.name + SIGNATURE_SUFFIX)


def read_signature(manifest_path: str | Path) -> str | None:
    """The detached signature beside a manifest, or None where there is none; a signature
    path that is not a small regular file (a FIFO, a link to a device) is an OSError."""
    try:
        return read_regular_text(signature_path(manifest_path), SIGNATURE_LIMIT).strip() or None
    except FileNotFoundError:
        return None


def sign_bytes(data: bytes, key: str) -> str:
    """``hmac-sha256:<hex>`` over the manifest file's bytes."""
    return "hmac-sha256:" + hmac.new(key.encode(), data, hashlib.sha256).hexdigest()


def write_signature(manifest_path: str | Path, key: str) -> Path:
    """Sign the manifest file's bytes into ``manifest.json.sig`` (atomically)."""
    path = Path(manifest_path)
    sig = signature_path(path)
    tmp = sig.with_name(f".{sig.name}.{os.getpid()}.tmp")
    tmp.write_text(sign_bytes(path.read_bytes(), key) + "\n")
    os.replace(tmp, sig)
    return sig


def signing_key(env: Mapping[str, str] | None = None) -> str | None:
    key = (os.environ if env is None else env).get(SIGNING_KEY_ENV) or None
    return key


def signature_findings(path: str | Path, data: bytes, key: str | None) -> list[Diagnostic]:
    """With a key: the manifest must carry a valid signature. Without one: nothing to prove."""
    if key is None:
        return []
    shown = str(path)
    sig = signature_path(path)
    try:
        claimed = read_regular_text(sig, SIGNATURE_LIMIT).strip()
    except (OSError, UnicodeDecodeError):
        return [
            _err(
                shown,
                "manifest-unsigned",
                f"{SIGNING_KEY_ENV} is set but there is no signature {sig.name} next to it",
                "compile with `rlc compile --sign` and the same key in the environment",
            )
        ]
    if not hmac.compare_digest(claimed, sign_bytes(data, key)):
        return [
            _err(
                shown,
                "manifest-signature",
                f"the signature in {sig.name} does not match this manifest under the key "
                f"in {SIGNING_KEY_ENV}; it was modified or signed with another key",
                "recompile and sign with `rlc compile --sign`",
            )
        ]
    return []


# -- duplicate keys -----------------------------------------------------------------------
def _duplicate_keys(raw: bytes) -> list[str]:
    dups: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                dups.append(k)
            seen.add(k)
        return dict(pairs)

    try:
        json.loads(raw, object_pairs_hook=hook)
    except (ValueError, RecursionError):
        return []
    return dups


# -- re-derivation ------------------------------------------------------------------------
def _user_config(manifest: dict[str, Any]) -> dict[str, Any]:
    """The config with every default and derived leaf removed: what the user wrote."""
    from compiler.resolve.resolve import field_paths

    config = copy.deepcopy(manifest["config"])
    provenance = manifest["provenance"]
    for path in field_paths(config):
        entry = provenance.get(path)
        if isinstance(entry, dict) and entry.get("kind") not in _EXPLICIT:
            node: Any = config
            parts = path.split(".")
            for part in parts[:-1]:
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(parts[-1], None)
    return _drop_none(config)


def _drop_none(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_none(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_drop_none(v) for v in node]
    return node


def _node(value: Any) -> Any:
    from compiler.parse.document import Array, ArrayOfTables, Scalar, ScalarKind, Table

    s = _CONFIG_SPAN
    if isinstance(value, dict):
        return Table({k: _entry(k, v) for k, v in value.items()}, "header", s)
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return ArrayOfTables([_node(v) for v in value], s)
        return Array([_node(v) for v in value], s)
    kind: ScalarKind = (
        "bool"
        if isinstance(value, bool)
        else "integer"
        if isinstance(value, int)
        else "float"
        if isinstance(value, float)
        else "string"
    )
    return Scalar(value, kind, s)


def _entry(key: str, value: Any) -> Any:
    from compiler.parse.document import Entry

    return Entry(key, _CONFIG_SPAN, _node(value))


def _source_info(manifest: dict[str, Any]) -> Any:
    """What the checkpoint said at compile time (it may be unreadable, or readable only,
    where the manifest is re-derived); a forged value only changes which compile-time
    refusal fires: the runtime's loader checks the checkpoint again."""
    from compiler.spec.model_source import SourceInfo

    facts = manifest.get("facts")
    facts = facts if isinstance(facts, dict) else {}
    model = (manifest.get("config") or {}).get("model") or {}
    export = facts.get("model_hf_export_problem", "")
    return SourceInfo(
        problem=str(facts.get("model_source_problem", "")),
        family=str(facts.get("model_source_family", "")),
        export_problem="" if str(model.get("source", "")).startswith("builtin:") else str(export),
        template_problem=str(facts.get("model_template_problem", "")),
        shape={str(k): int(v) for k, v in (facts.get("model_source_shape") or {}).items()},
        recurrent_layers=int(facts.get("model_recurrent_layers", 0) or 0),
    )


def rederive(manifest: dict[str, Any]) -> dict[str, Any]:
    """The derived parts of ``manifest`` recomputed from its user-written config.

    Raises DiagnosticError when that config does not bind (the spec models refuse it).
    """
    from compiler.parse.document import Document, Table
    from compiler.resolve.argv import commands
    from compiler.resolve.resolve import resolve
    from compiler.spec.bind import Layer, bind

    user = _user_config(manifest)
    doc = Document(Table({k: _entry(k, v) for k, v in user.items()}, "root", _CONFIG_SPAN), "")
    bound = bind([Layer("spec", doc)])
    from compiler.spec.secrets import scan

    leaked, _ = scan(bound.merged, lambda path: None)
    if bound.spec is None or leaked:
        raise DiagnosticError([d for d in (*bound.diagnostics, *leaked) if d.is_error])
    lock = manifest.get("runtime_lock")
    facts = manifest.get("facts")
    resolved = resolve(
        bound,
        "manifest.json",
        lock if isinstance(lock, dict) else {},
        _source_info(manifest),
        facts if isinstance(facts, dict) else {},
    )
    config = resolved.config
    return {
        "config": config,
        "plan": resolved.plan,
        "facts": resolved.facts,
        "paths": resolved.paths,
        "commands": commands(config, resolved.plan, resolved.paths),
    }


def _first_difference(a: Any, b: Any, where: str) -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}"
            found = _first_difference(a[k], b[k], f"{where}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _first_difference(x, y, f"{where}.{i}")
            if found:
                return found
        return None
    if type(a) is not type(b) or a != b:
        return where
    return None


def derivation_findings(manifest: dict[str, Any], where: str) -> list[Diagnostic]:
    """Each derived part of the manifest that differs from its recomputation."""
    try:
        fresh = rederive(manifest)
    except DiagnosticError as exc:
        msgs = "; ".join(d.message for d in exc.diagnostics[:3])
        return [_err(where, "manifest-config", f"its config does not bind: {msgs}")]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return [_err(where, "manifest-config", f"its config cannot be resolved: {exc!r}")]
    out = []
    for key in ("config", "plan", "facts", "paths", "commands"):
        diff = _first_difference(manifest.get(key), fresh[key], key)
        if diff is not None:
            out.append(
                _err(
                    where,
                    "manifest-derived",
                    f"`{diff}` differs from what the compiler derives from the manifest's "
                    "config; derived fields are never edited by hand",
                    "recompile the spec instead of editing a manifest",
                )
            )
    return out


# -- the background evaluator's job -------------------------------------------------------
def evaluator_job(
    manifest: dict[str, Any], update: int, checkpoint: str, signature: str | None = None
) -> str | None:
    """The Beaker job that evaluates one milestone snapshot (YAML), or None when the manifest
    has no background evaluator. The compiled template (``beaker/evaluator.yaml`` of
    `rlc compile`, rendered by the same emitter from the verified manifest) with the update
    and the snapshot path filled in; ``signature`` (the manifest's ``.sig``) travels too."""
    from compiler.emit.beaker import (
        EVAL_CHECKPOINT_PLACEHOLDER,
        EVAL_UPDATE_PLACEHOLDER,
        render_beaker,
    )
    from contract.canonical import canonical_bytes

    text = canonical_bytes(manifest).decode("utf-8")
    template = render_beaker(manifest, text, signature).files.get("evaluator.yaml")
    if template is None:
        return None
    return template.replace(EVAL_UPDATE_PLACEHOLDER, str(int(update))).replace(
        EVAL_CHECKPOINT_PLACEHOLDER, checkpoint
    )


# -- the loader ---------------------------------------------------------------------------
def check_manifest(
    path: str | Path, data: bytes, env: Mapping[str, str] | None = None
) -> tuple[dict[str, Any] | None, list[Diagnostic]]:
    """(manifest, problems) for the bytes of a manifest file; problems empty = trusted."""
    from compiler.manifest.lint import lint_manifest

    env = os.environ if env is None else env
    shown = str(path)
    if len(data) > MAX_MANIFEST_BYTES:
        return None, [_err(shown, "manifest-invalid", f"is larger than {MAX_MANIFEST_BYTES} B")]
    report = lint_manifest(path, data)
    problems = list(report.findings)
    dups = _duplicate_keys(data)
    if dups:
        problems.append(
            _err(shown, "manifest-invalid", f"duplicate JSON keys: {', '.join(sorted(set(dups)))}")
        )
    if problems:
        return None, problems
    manifest: dict[str, Any] = json.loads(data)
    pinned = env.get(DIGEST_ENV)
    if pinned and pinned != manifest.get("digest"):
        problems.append(
            _err(
                shown,
                "manifest-digest",
                f"{DIGEST_ENV} says {pinned} but the manifest's digest is "
                f"{manifest.get('digest')}; this is not the manifest that was launched",
            )
        )
    problems.extend(signature_findings(path, data, signing_key(env)))
    problems.extend(derivation_findings(manifest, shown))
    return (None if problems else manifest), problems


def load_trusted(path: str | Path, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read and fully re-check a manifest; raises DiagnosticError listing every problem."""
    p = Path(path)
    try:
        data = read_regular(p, MANIFEST_LIMIT)
    except OSError as exc:
        raise DiagnosticError(
            _err(str(p), "manifest-io", f"cannot read manifest: {exc.strerror or exc}")
        ) from exc
    manifest, problems = check_manifest(p, data, env)
    if manifest is None:
        raise DiagnosticError(problems)
    return manifest
