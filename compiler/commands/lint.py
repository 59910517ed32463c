"""`rlc lint PATHS...`: digest, schema and rules re-checked; exit 1 on findings."""

from __future__ import annotations

import json
import sys

import click

from compiler.commands._common import EXIT_FINDINGS, EXIT_USER, guarded


@click.command("lint")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@guarded
def command(paths: tuple[str, ...], fmt: str) -> None:
    """Lint manifests (files, directories or globs such as 'build/**/manifest.json')."""
    from compiler.diagnostics import render_text
    from compiler.lint import expand, lint_manifest

    files = expand(paths)
    if not files:
        click.echo(f"rlc: no manifests match {' '.join(paths)}", err=True)
        sys.exit(EXIT_USER)
    reports = [lint_manifest(p) for p in files]
    bad = [r for r in reports if not r.ok]
    if fmt == "json":
        click.echo(json.dumps([r.to_json() for r in reports], indent=2))
    else:
        for r in reports:
            if r.ok:
                click.echo(f"ok    {r.path}")
            else:
                click.echo(f"FAIL  {r.path}")
                for d in r.findings:
                    click.echo("  " + render_text(d).replace("\n", "\n  "))
        click.echo(f"{len(reports)} manifest(s), {len(bad)} with findings")
    if bad:
        sys.exit(EXIT_FINDINGS)
