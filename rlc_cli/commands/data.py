"""``rlc data prepare SPEC`` / ``rlc data verify MANIFEST``: immutable data manifests.

Thin wrappers: the spec is compiled by the pipeline, the work is done by
`runtime.data.manifest` (pure Python, no torch), imported only when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from compiler.diagnostics import Diagnostic, DiagnosticError
from rlc_cli.commands._common import guarded

if TYPE_CHECKING:
    from contract.spec.root import Spec


def _error(message: str, help: str | None = None) -> DiagnosticError:
    return DiagnosticError(
        Diagnostic(severity="error", code="data", message=message, help=(help,) if help else ())
    )


def _config_of(spec: Path, overrides: tuple[str, ...]) -> Spec:
    """The resolved spec (the contract's type) of a spec file (compiled) or of an already
    compiled manifest."""
    from contract.spec.root import Spec

    if spec.suffix == ".json":
        from compiler.manifest.manifest import load_manifest

        return Spec.model_validate(load_manifest(spec)["config"])
    from compiler.pipeline import compile_spec

    result = compile_spec(spec, list(overrides))
    manifest: dict[str, Any] = result.manifest()  # raises the compile's diagnostics
    return Spec.model_validate(manifest["config"])


@click.group("data")
def command() -> None:
    """Prepare and inspect data manifests."""


@command.command("prepare")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--set", "overrides", multiple=True, metavar="PATH=VALUE", help="Override a spec value."
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the prepared data (default: <output.root>/prepared/data).",
)
@guarded
def prepare(spec: Path, overrides: tuple[str, ...], out_dir: Path | None) -> None:
    """Load the spec's tasks and write train/eval JSONL plus an immutable data manifest."""
    config = _config_of(spec, overrides)
    from runtime.data.manifest import DataManifestError, prepare_data
    from runtime.data.tasks import DataError
    from runtime.data.wrappers import UnknownWrapper

    try:
        result = prepare_data(config, out_dir)
    except (DataManifestError, DataError, UnknownWrapper) as exc:
        raise _error(str(exc)) from None
    click.echo(f"wrote {result.manifest_path}")
    click.echo(f"  train prompts: {result.train_count}   eval prompts: {result.eval_count}")
    click.echo(f"  digest: {result.manifest['digest']}")


@command.command("verify")
@click.argument("manifest", type=click.Path(exists=True, path_type=Path))
@guarded
def verify(manifest: Path) -> None:
    """Re-check every sha256 and record count of a data manifest (exit 2 on mismatch)."""
    from runtime.data.manifest import DataManifestError, verify_data_manifest

    try:
        m = verify_data_manifest(manifest)
    except DataManifestError as exc:
        raise _error(str(exc), "prepare the data again with `rlc data prepare SPEC`") from None
    files = m.body["files"]
    click.echo(f"ok {m.path} ({m.body['digest']})")
    for name in sorted(files):
        click.echo(
            f"  {name}: {files[name]['records']} records, sha256 {files[name]['sha256'][:16]}..."
        )
