"""A compiled manifest as the runtime reads it: the resolved spec, the plan, the run
directory layout and the command lines, typed by the contract's models.

Two ways in, one for each kind of process:

* the entry of a run (``python -m runtime.entrypoints.execute``, ``rlc run``) verifies the manifest once
  through the compiler (`compiler.manifest.trust`: digest, signature, schema, rules,
  re-derivation), then `parse`s it here and marks its environment (`VERIFIED_ENV`), so
* every process it starts (trainer ranks, evaluators, preparation, node processes) reads
  the same file with `read_pinned`: the bytes' digest must equal the verified one, and the
  typed parse is all that is left; the compiler is not run again.

Nothing here imports the compiler or the runtime (tests/unit/test_import_graph.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from contract.canonical import CanonicalError, digest_of
from contract.env import PIN_ENV, VERIFIED_ENV
from contract.plan import Plan, Record
from contract.safe_read import MANIFEST_LIMIT, read_regular
from contract.spec.root import Spec

__all__ = [
    "PIN_ENV",
    "VERIFIED_ENV",
    "ContractError",
    "RunContract",
    "parse",
    "read_pinned",
    "verified_pin",
]


class ContractError(ValueError):
    """A manifest that is not the verified one, or does not fit the contract's types."""


class Process(Record):
    """One process's compiled command line and environment (placeholders: the documented
    names of ``runtime.node.launch_argv``)."""

    argv: list[str]
    env: dict[str, str] = {}


class Commands(Record):
    engine_argv: list[list[str]]
    trainer_argv: list[str]
    router_argv: list[str]
    teacher_argv: list[str] = []  # on-policy distillation only (absent otherwise)
    engine_env: list[dict[str, str]] = []  # one per engine, beside engine_argv
    teacher_env: dict[str, str] = {}
    evaluator_argv: list[str] = []  # background evaluation only
    judges: dict[str, Process] = {}  # managed judge name -> its server
    trainer_rank: Process | None = None  # a follower trainer rank (world size > 1 only)


class RunPaths(Record):
    """Where the run writes (``manifest.paths``; `compiler.resolve.paths` derives it)."""

    root: str
    checkpoints: str
    metrics: str
    rollouts: str
    export_hf: str
    engine_weights: str
    prepared: str
    eval_snapshots: str


class RunContract(BaseModel):
    """What the runtime carries out. The manifest's other keys (provenance, facts, the
    compiler's version and warnings, the runtime lock) are for people and `rlc lint`."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True, defer_build=True)

    name: str
    digest: str
    config: Spec
    plan: Plan
    paths: RunPaths
    commands: Commands


def parse(manifest: Mapping[str, Any], where: str = "manifest") -> RunContract:
    """The typed contract of a manifest (raises `ContractError` naming the first bad field)."""
    try:
        return RunContract.model_validate(manifest)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ContractError(
            f"{where}: `{loc}` does not fit the contract ({first['msg']}); "
            f"{exc.error_count()} problem(s) in all: recompile with this rlc"
        ) from None


def read_pinned(path: str | Path, pin: str) -> dict[str, Any]:
    """The manifest at ``path`` as a dict, refused unless its digest, recomputed over its
    body, is its own ``digest`` and equals ``pin`` (the digest verified upstream)."""
    p = Path(path)
    try:
        manifest = json.loads(read_regular(p, MANIFEST_LIMIT))
    except OSError as exc:
        raise ContractError(f"{p}: cannot read the manifest: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ContractError(f"{p}: cannot read the manifest: {exc}") from None
    if not isinstance(manifest, dict):
        raise ContractError(f"{p}: is not a JSON object")
    claimed = manifest.get("digest")
    try:
        actual = digest_of({k: v for k, v in manifest.items() if k != "digest"})
    except CanonicalError as exc:
        raise ContractError(f"{p}: is not canonical JSON: {exc}") from None
    if claimed != actual or actual != pin:
        raise ContractError(
            f"{p}: its digest is {actual}, but the verified manifest's is {pin}; "
            "it changed after verification"
        )
    return manifest


def verified_pin(env: Mapping[str, str] | None = None) -> str | None:
    """The digest a parent process verified (None: verify here)."""
    env = os.environ if env is None else env
    return env.get(VERIFIED_ENV) or None
