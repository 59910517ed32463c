"""rlc compile SPEC [-o DIR]: write DIR/<name>/manifest.json (immutable)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from compiler.commands._common import EXIT_USER, format_option, guarded
from compiler.commands._spec_opts import report, run_compile, spec_options


@click.command("compile")
@spec_options
@click.option(
    "-o",
    "--output",
    "out_dir",
    default="build",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Build directory; the manifest goes to DIR/<name>/manifest.json.",
)
@format_option
@guarded
def command(spec: str, overrides: tuple[str, ...], out_dir: str, fmt: str) -> None:
    """Compile a spec into a checked, content-hashed manifest."""
    result = run_compile(spec, overrides)
    report(result, fmt)
    if result.errors:
        sys.exit(EXIT_USER)
    from compiler.manifest import write_manifest

    manifest = result.manifest()
    path = write_manifest(manifest, Path(out_dir) / manifest["name"] / "manifest.json")
    _emit_extras(manifest, path)
    if fmt == "json":
        import json

        click.echo(json.dumps({"manifest": str(path), "digest": manifest["digest"]}))
    else:
        click.echo(f"{path}  {manifest['digest']}")


def _emit_extras(manifest: dict[str, object], path: Path) -> None:
    """Beaker specs and other artifacts, when the emit package provides them."""
    try:
        from compiler.emit import emit_artifacts  # type: ignore[attr-defined]
    except ImportError:
        return
    emit_artifacts(manifest, path.parent)
