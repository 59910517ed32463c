"""`rlc export RUN_DIR --out DIR [--step N]`: HF weights from a run's native checkpoint."""

from __future__ import annotations

from pathlib import Path

import click

from rlc_cli.commands._common import guarded


@click.command("export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="New (or empty) directory for the HF checkpoint.",
)
@click.option("--step", type=int, default=None, help="Checkpoint step (default: the newest).")
@guarded
def command(run_dir: Path, out: Path, step: int | None) -> None:
    """Export a run's newest (or --step N) complete checkpoint as an HF checkpoint."""
    from compiler.diagnostics import Diagnostic, DiagnosticError
    from rlc_cli.extras import require_extra
    from runtime.entrypoints.export import ExportError, check_export, export_run

    try:
        check_export(run_dir, out, step)  # argument errors before torch is imported
        require_extra("runtime", "export")
        found, path = export_run(run_dir, out, step)
    except ExportError as exc:
        raise DiagnosticError(Diagnostic("error", "export-failed", str(exc))) from exc
    click.echo(f"exported step {found} of {run_dir} -> {path}")
