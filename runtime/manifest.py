"""The runtime's one door to a manifest: load it through the compiler's contract module
(`compiler.manifest.trust`), so no other runtime module imports the compiler."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ManifestError(ValueError):
    """The manifest failed verification (digest, version, shape)."""


def load_verified_manifest(path: str | Path) -> dict[str, Any]:
    """Load through `compiler.manifest.trust`: every lint check, then every derived field re-derived
    from the config (a hand-edited command line or path is refused, not run)."""
    p = Path(path)
    if not p.exists():
        raise ManifestError(f"{p}: no such manifest")
    from compiler.manifest.trust import DiagnosticError, load_trusted

    try:
        return load_trusted(p)
    except DiagnosticError as exc:
        msgs = "; ".join(d.message for d in exc.diagnostics) or str(exc)
        raise ManifestError(f"{p}: {msgs}") from None


def manifest_signature(path: str | Path) -> str | None:
    """The detached ``rlc compile --sign`` signature beside a manifest (``.sig``), if any:
    the Beaker specs carry it into every job, where ``load_verified_manifest`` checks it."""
    from compiler.manifest.trust import read_signature

    try:
        return read_signature(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}.sig: cannot read the signature: {exc}") from None
