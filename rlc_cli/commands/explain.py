"""`rlc explain FIELD|RULE|MANIFEST FIELD`."""

from __future__ import annotations

from pathlib import Path

import click

from rlc_cli.commands._common import guarded


@click.command("explain")
@click.argument("name")
@click.argument("field", required=False)
@guarded
def command(name: str, field: str | None) -> None:
    """Explain a spec field, a rule id, a native option (native.sglang.KEY), or with a
    manifest path and a field, where that value came from."""
    from compiler.manifest import explain

    if field is not None or name.endswith(".json"):
        if field is None:
            raise click.UsageError("give the field to explain: rlc explain MANIFEST FIELD")
        click.echo(explain.explain_manifest_field(Path(name), field))
        return
    click.echo(explain.explain_name(name))
