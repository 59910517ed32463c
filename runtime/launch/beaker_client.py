"""A beaker-py client from the environment, or a clear error: used by the background
evaluator inside a Beaker job and by `rlc launch` / `rlc status`."""

from __future__ import annotations

from typing import Any

from compiler.diagnostics import Diagnostic, DiagnosticError


def beaker_client() -> Any:
    try:
        from beaker import Beaker
    except ImportError as exc:
        raise DiagnosticError(
            Diagnostic(
                "error",
                "launch-no-beaker",
                "beaker-py is not installed, so rlc cannot submit to Beaker",
                help=(
                    "pip install -e '.[launch]' in the rlc checkout (or `rlc launch --dry-run`)",
                ),
            )
        ) from exc
    try:
        return Beaker.from_env()
    except Exception as exc:  # noqa: BLE001 - beaker-py raises several config errors
        raise DiagnosticError(
            Diagnostic(
                "error",
                "launch-no-credentials",
                f"cannot configure a Beaker client: {exc}",
                help=("set BEAKER_TOKEN or run `beaker config set user_token ...`",),
            )
        ) from exc
