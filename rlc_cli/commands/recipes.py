"""rlc recipes: the named recipe catalog (specs/recipes/*.toml)."""

from __future__ import annotations

import click

from rlc_cli.commands._common import guarded, read_format_option


def catalog() -> list[tuple[str, str]]:
    """(name, description) of every recipe, read with tomllib (fast, no models)."""
    import tomllib

    from compiler.resources import recipes_dir

    out = []
    for path in sorted(recipes_dir().glob("*.toml")):
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            desc = "(unreadable)"
        else:
            desc = str(data.get("description") or "")
        out.append((path.stem, desc))
    return out


@click.command("recipes")
@read_format_option
@click.option("--json", "as_json", is_flag=True, hidden=True, help="Same as --format json.")
@guarded
def command(fmt: str, as_json: bool) -> None:
    """List the named recipes a spec can build on with `recipe = "NAME"`."""
    rows = catalog()
    if as_json or fmt == "json":
        import json

        click.echo(json.dumps([{"name": n, "description": d} for n, d in rows], indent=2))
        return
    width = max((len(n) for n, _ in rows), default=0)
    for name, desc in rows:
        click.echo(f"{name:<{width}}  {desc}")
    click.echo(
        '\nuse one with `recipe = "NAME"` at the top of a spec; the spec\'s values layer over it'
    )
