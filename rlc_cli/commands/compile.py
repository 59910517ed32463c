"""rlc compile SPEC [-o DIR]: write DIR/<name>/manifest.json (immutable) and the launch
artifacts next to it. Unchanged inputs replay from `compiler.derive.compile_cache`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rlc_cli.commands._common import EXIT_USER, format_option, guarded


@click.command("compile")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="PATH=VALUE",
    help="Override a spec value (TOML syntax), e.g. --set trainer.gpus=4. Repeatable.",
)
@click.option(
    "-o",
    "--output",
    "out_dir",
    default="build",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Build directory; the manifest goes to DIR/<name>/manifest.json.",
)
@click.option("--no-cache", is_flag=True, help="Always compile (ignore the compile cache).")
@click.option(
    "--sign",
    is_flag=True,
    help="Also write manifest.json.sig, an HMAC-SHA256 under the key in $RLC_SIGNING_KEY.",
)
@format_option
@guarded
def command(
    spec: str, overrides: tuple[str, ...], out_dir: str, no_cache: bool, sign: bool, fmt: str
) -> None:
    """Compile a spec into a checked, content-hashed manifest."""
    if sign:
        _sign_compile(spec, overrides, out_dir, fmt)
        return
    cache_key = None
    if not no_cache:
        from compiler.derive import compile_cache

        if compile_cache.enabled():
            cache_key = compile_cache.key(
                spec, overrides, f"{out_dir}\0{fmt}", callers=(Path(__file__).resolve().parent,)
            )
        hit = compile_cache.replay(cache_key) if cache_key else None
        if hit is not None:
            if hit["stderr"]:
                click.echo(hit["stderr"], err=True, nl=False)
            click.echo(hit["stdout"], nl=False)
            return
    _compile(spec, overrides, out_dir, fmt, cache_key)


def _compile(
    spec: str, overrides: tuple[str, ...], out_dir: str, fmt: str, cache_key: str | None
) -> Path:
    from compiler.diagnostics import render_all
    from compiler.manifest.manifest import write_manifest
    from compiler.pipeline import compile_spec

    result = compile_spec(spec, list(overrides))
    stderr = ""
    if result.diagnostics:
        if fmt == "json" and result.errors:
            click.echo(render_all(result.diagnostics, result.sources, "json"))
        else:
            stderr = render_all(result.diagnostics, result.sources, "text") + "\n"
            click.echo(stderr, err=True, nl=False)
    if result.errors:
        sys.exit(EXIT_USER)
    manifest = result.manifest()
    directory = Path(out_dir) / manifest["name"]
    fresh = not directory.exists()
    path = write_manifest(manifest, directory / "manifest.json")
    _emit_extras(manifest, path)
    if fmt == "json":
        import json

        stdout = json.dumps({"manifest": str(path), "digest": manifest["digest"]}) + "\n"
    else:
        stdout = f"{path}  {manifest['digest']}\n"
    click.echo(stdout, nl=False)
    if cache_key and fresh:
        from compiler.derive import compile_cache

        compile_cache.store(cache_key, directory, stdout, stderr)
    return path


def _sign_compile(spec: str, overrides: tuple[str, ...], out_dir: str, fmt: str) -> None:
    """Compile (never from the cache: the signature is written afresh) and sign."""
    from compiler.diagnostics import Diagnostic, DiagnosticError
    from compiler.manifest.trust import SIGNING_KEY_ENV, signing_key, write_signature

    key = signing_key()
    if key is None:
        raise DiagnosticError(
            Diagnostic(
                "error",
                "sign-key",
                f"--sign needs a key in the environment variable {SIGNING_KEY_ENV}",
                help=("export the team's signing key, or compile without --sign",),
            )
        )
    path = _compile(spec, overrides, out_dir, fmt, None)
    sig = write_signature(path, key)
    # the Beaker specs carry the signature into the jobs, beside the manifest
    from compiler.emit import emit_artifacts

    manifest = json.loads(path.read_text(encoding="utf-8"))
    emit_artifacts(manifest, path.parent, sig.read_text(encoding="utf-8").strip())


def _emit_extras(manifest: dict[str, object], path: Path) -> None:
    """Beaker specs and other artifacts, when the emit package provides them."""
    try:
        from compiler.emit import emit_artifacts
    except ImportError:
        return
    emit_artifacts(manifest, path.parent)
