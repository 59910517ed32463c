"""`rlc schema [spec|manifest]`: the JSON Schema of a spec (or a manifest), for editors.

TOML editors that read JSON Schema (Taplo / Even Better TOML) use it through the
``#:schema`` line at the top of the examples and recipes.
"""

from __future__ import annotations

import click

from rlc_cli.commands._common import guarded


@click.command("schema")
@click.argument("which", type=click.Choice(["spec", "manifest"]), default="spec")
@guarded
def command(which: str) -> None:
    """Print the JSON Schema of a spec (default) or of a manifest."""
    from compiler.resources import schemas_dir

    click.echo((schemas_dir() / f"{which}.schema.json").read_text(encoding="utf-8"), nl=False)
