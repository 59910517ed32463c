"""`rlc docs [--check]`: regenerate or verify the generated reference and JSON Schemas."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from rlc_cli.commands._common import EXIT_FINDINGS, EXIT_USER, guarded


@click.command("docs")
@click.option("--check", is_flag=True, help="Exit 1 when a generated file is stale; write nothing.")
@click.option(
    "--root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Checkout to write into (default: the checkout rlc runs from).",
)
@guarded
def command(check: bool, root: Path | None) -> None:
    """Regenerate docs/configuration.md, docs/support.md's rule table and schemas/*.json."""
    from compiler.emit.docs_gen import generate, stale
    from compiler.resources import checkout_root

    root = root or checkout_root()
    if root is None:
        click.echo("rlc: docs are generated into a checkout; pass --root DIR", err=True)
        sys.exit(EXIT_USER)
    if check:
        old = stale(root)
        for path in old:
            click.echo(f"stale: {path.relative_to(root)} (run `rlc docs` to regenerate)")
        if old:
            sys.exit(EXIT_FINDINGS)
        click.echo(f"up to date: {len(generate(root))} generated files")
        return
    for path, text in generate(root).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        click.echo(f"wrote {path.relative_to(root)}")
