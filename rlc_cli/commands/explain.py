"""`rlc explain FIELD|RULE|MANIFEST FIELD`."""

from __future__ import annotations

from pathlib import Path

import click

from rlc_cli.commands._common import guarded, read_format_option


@click.command("explain")
@click.argument("name")
@click.argument("field", required=False)
@read_format_option
@guarded
def command(name: str, field: str | None, fmt: str) -> None:
    """Explain a spec field, a rule id, a native option (native.sglang.KEY), or with a
    manifest path and a field, where that value came from."""
    from compiler.manifest import explain

    if field is not None or name.endswith(".json"):
        if field is None:
            raise click.UsageError("give the field to explain: rlc explain MANIFEST FIELD")
        text = explain.explain_manifest_field(Path(name), field)
        _echo(fmt, text, manifest=name, field=field)
        return
    _echo(fmt, explain.explain_name(name), name=name)


def _echo(fmt: str, text: str, **query: str) -> None:
    if fmt == "json":
        import json

        click.echo(json.dumps({**query, "explanation": text}, indent=2))
    else:
        click.echo(text)
