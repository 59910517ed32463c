"""rlc validate SPEC: check only; exit 0 when clean, 2 on errors."""

from __future__ import annotations

import sys

import click

from rlc_cli.commands._common import EXIT_OK, EXIT_USER, format_option, guarded
from rlc_cli.commands._spec_opts import report, run_compile, spec_options


@click.command("validate")
@spec_options
@format_option
@guarded
def command(spec: str, overrides: tuple[str, ...], fmt: str) -> None:
    """Check a spec: syntax, schema, resolution and every rule. All problems at once."""
    result = run_compile(spec, overrides)
    report(result, fmt)
    if result.errors:
        sys.exit(EXIT_USER)
    if fmt == "text":
        warn = len(result.warnings)
        click.echo(f"{spec}: ok" + (f" ({warn} warning(s))" if warn else ""), err=True)
    sys.exit(EXIT_OK)
