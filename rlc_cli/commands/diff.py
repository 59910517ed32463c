"""`rlc diff A B`: semantic diff of two manifests or specs; exit 1 when they differ."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rlc_cli.commands._common import EXIT_FINDINGS, guarded


@click.command("diff")
@click.argument("left", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("right", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@guarded
def command(left: Path, right: Path, fmt: str) -> None:
    """Compare two manifests (or specs, compiled in memory) field by field."""
    from compiler.manifest.diff import diff_manifests, load_side, render

    a, b = load_side(left), load_side(right)
    changes = diff_manifests(a, b)
    if fmt == "json":
        click.echo(json.dumps([c.to_json() for c in changes], indent=2, sort_keys=True))
    else:
        click.echo(render(changes, str(left), str(right)))
    if changes:
        sys.exit(EXIT_FINDINGS)
