"""The runtime's one door to a manifest: verified once per run, parsed into the typed
contract everywhere.

`verify` is what the entry of a run calls (``python -m runtime.entrypoints.execute``, ``rlc run``, a
preparation or evaluator job started on its own): every check `rlc lint` makes plus the
re-derivation, through the compiler's contract module `compiler.manifest.trust` (the one
place the runtime reaches the compiler). It then marks the process environment with the
verified digest (`contract.run.VERIFIED_ENV`), so the processes this one starts - trainer
ranks, evaluators, node processes - `load` the manifest by checking its digest against that
mark and parsing the contract, without running the compiler again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from contract.run import VERIFIED_ENV, ContractError, RunContract, parse, read_pinned, verified_pin


class ManifestError(ValueError):
    """The manifest failed verification (digest, version, shape, contract)."""


def verify(path: str | Path) -> RunContract:
    """Verify through `compiler.manifest.trust` (every lint check, then every derived field
    re-derived from the config: a hand-edited command line or path is refused, not run),
    parse the contract, and mark this process's environment for its children."""
    p = Path(path)
    if not p.exists():
        raise ManifestError(f"{p}: no such manifest")
    from compiler.manifest.trust import DiagnosticError, load_trusted

    try:
        manifest = load_trusted(p)
    except DiagnosticError as exc:
        msgs = "; ".join(d.message for d in exc.diagnostics) or str(exc)
        raise ManifestError(f"{p}: {msgs}") from None
    contract = _parse(manifest, p)
    os.environ[VERIFIED_ENV] = contract.digest
    return contract


def load(path: str | Path) -> RunContract:
    """The contract of a manifest this process's parent verified (digest check and parse);
    any other manifest (none verified upstream, or other bytes) is verified here."""
    pin = verified_pin()
    if pin is not None:
        try:
            manifest = read_pinned(path, pin)
        except ContractError:
            pass  # not the manifest verified upstream: the full check decides
        else:
            return _parse(manifest, Path(path))
    return verify(path)


def document(path: str | Path) -> dict[str, Any]:
    """The verified manifest as a document (for the Beaker job renderer), digest-checked."""
    pin = verified_pin()
    if pin is None:
        raise ManifestError(f"{path}: not verified in this process; call verify first")
    try:
        return read_pinned(path, pin)
    except ContractError as exc:
        raise ManifestError(str(exc)) from None


def _parse(manifest: dict[str, Any], where: Path) -> RunContract:
    try:
        return parse(manifest, str(where))
    except ContractError as exc:
        raise ManifestError(str(exc)) from None


def manifest_signature(path: str | Path) -> str | None:
    """The detached ``rlc compile --sign`` signature beside a manifest (``.sig``), if any:
    the Beaker specs carry it into every job, where ``verify`` checks it."""
    from compiler.manifest.trust import read_signature

    try:
        return read_signature(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}.sig: cannot read the signature: {exc}") from None
