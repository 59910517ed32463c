"""`rlc launch MANIFEST [--dry-run]`: submit preparation (when needed), wait for it, then
training; one receipt per submission. ``--dry-run`` prints both specs in submission order."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from rlc_cli.commands._common import EXIT_USER, guarded


@click.command("launch")
@click.argument("manifest", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--dry-run",
    is_flag=True,
    help="Render and print the specs (preparation, then training); submit nothing.",
)
@click.option("--receipts-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option(
    "--allow-dirty",
    is_flag=True,
    help="Submit from a checkout with uncommitted or unpushed changes.",
)
@guarded
def command(manifest: Path, dry_run: bool, receipts_dir: Path | None, allow_dirty: bool) -> None:
    """Submit a compiled manifest to Beaker (its lint must be clean): preparation first.

    The working directory's git checkout must be committed and pushed (its revision goes
    into the receipt) unless --allow-dirty.
    """
    import yaml

    from compiler.diagnostics import DiagnosticError
    from compiler.manifest.lint import lint_manifest
    from rlc_cli.launch.beaker import launch_all
    from rlc_cli.launch.receipts import receipts_dir as default_dir
    from rlc_cli.launch.receipts import write_receipt

    report = lint_manifest(manifest)
    if not report.ok:
        raise DiagnosticError(report.findings)
    from compiler.manifest.trust import load_trusted

    data = load_trusted(manifest)  # also re-derived: a hand-edited command is never submitted
    if not dry_run:
        from rlc_cli.extras import require_extra
        from rlc_cli.launch.checkout import checkout_problem

        require_extra("launch", "launch")
        problem = None if allow_dirty else checkout_problem(Path.cwd())
        if problem:
            click.echo(
                f"rlc: error: {problem}; the receipt's git revision would not say what was "
                "launched: commit and push, or pass --allow-dirty",
                err=True,
            )
            sys.exit(EXIT_USER)
    directory = receipts_dir or default_dir()
    written: list[Path] = []
    submitted = launch_all(
        data,
        manifest,
        dry_run=dry_run,
        record=lambda r: written.append(write_receipt(r, directory)),
        echo=click.echo,
    )
    for (receipt, spec), path in zip(submitted, written, strict=True):
        stage = receipt.extra.get("stage", "train")
        if dry_run:
            click.echo(f"# {stage} ({len(submitted)} submission(s), in this order)")
            click.echo(yaml.safe_dump(spec, sort_keys=False, width=120))
        verb = "dry run of" if dry_run else "submitted"
        click.echo(f"{verb} {receipt.name} (launch {receipt.launch_id}); receipt {path}")
        if receipt.url and not dry_run:
            click.echo(receipt.url)
