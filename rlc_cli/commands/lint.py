"""`rlc lint PATHS...`: digest, schema, rules, paths and command lines re-checked (and the
signature, when $RLC_SIGNING_KEY is set); exit 1 on findings."""

from __future__ import annotations

import contextlib
import json
import sys

import click

from rlc_cli.commands._common import EXIT_FINDINGS, EXIT_USER, guarded


@click.command("lint")
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option(
    "--rederive",
    is_flag=True,
    help="Also re-derive every derived field (config values, plan, facts) from the "
    "user-written config, as the runtime does; ~3 ms per manifest. Paths and command lines "
    "are always recomputed.",
)
@guarded
def command(paths: tuple[str, ...], fmt: str, rederive: bool) -> None:
    """Lint manifests (files, directories or globs such as 'build/**/manifest.json')."""
    from compiler.diagnostics import render_text
    from compiler.manifest.lint import expand, lint_manifest

    files = expand(paths)
    if not files:
        click.echo(f"rlc: no manifests match {' '.join(paths)}", err=True)
        sys.exit(EXIT_USER)
    reports = [lint_manifest(p) for p in files]
    from compiler.manifest.trust import signature_findings, signing_key
    from contract.safe_read import MANIFEST_LIMIT, read_regular

    key = signing_key()
    if key is not None:  # with a key in the environment every manifest must be signed by it
        for r, p in zip(reports, files, strict=True):
            with contextlib.suppress(OSError):  # an unreadable file is already reported
                r.findings.extend(signature_findings(p, read_regular(p, MANIFEST_LIMIT), key))
    if rederive:
        from compiler.manifest.trust import derivation_findings

        for r, p in zip(reports, files, strict=True):
            if r.ok:  # a manifest with findings is already refused
                data = json.loads(read_regular(p, MANIFEST_LIMIT))
                r.findings.extend(derivation_findings(data, str(p)))
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
