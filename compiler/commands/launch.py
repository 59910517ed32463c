"""`rlc launch MANIFEST [--dry-run]`: submit the training experiment and write a receipt."""

from __future__ import annotations

from pathlib import Path

import click

from compiler.commands._common import guarded


@click.command("launch")
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Render and print the spec; submit nothing.")
@click.option("--receipts-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@guarded
def command(manifest: Path, dry_run: bool, receipts_dir: Path | None) -> None:
    """Submit a compiled manifest to Beaker (its lint must be clean)."""
    import yaml

    from compiler.diagnostics import DiagnosticError
    from compiler.lint import lint_manifest
    from runtime.launch.beaker import launch
    from runtime.launch.receipts import receipts_dir as default_dir
    from runtime.launch.receipts import write_receipt

    report = lint_manifest(manifest)
    if not report.ok:
        raise DiagnosticError(report.findings)
    from compiler.trust import load_trusted

    data = load_trusted(manifest)  # also re-derived: a hand-edited command is never submitted
    receipt, spec = launch(data, manifest, dry_run=dry_run)
    if dry_run:
        click.echo(yaml.safe_dump(spec, sort_keys=False, width=120))
    path = write_receipt(receipt, receipts_dir or default_dir())
    verb = "dry run of" if dry_run else "submitted"
    click.echo(f"{verb} {receipt.name} (launch {receipt.launch_id}); receipt {path}")
    if receipt.url:
        click.echo(receipt.url)
