"""``rlc toml decode``: the toml-test decoder interface over our own TOML parser.

TOML on stdin, toml-test tagged JSON on stdout (exit 0); an invalid document prints
positioned diagnostics on stderr and exits 1, as toml-test expects of a decoder.
"""

from __future__ import annotations

import json
import sys

import click

from rlc_cli.commands._common import EXIT_FINDINGS, format_option, guarded


@click.group("toml")
def command() -> None:
    """TOML tools (toml-test decoder interface)."""


@command.command("decode")
@format_option
@guarded
def decode(fmt: str) -> None:
    """TOML on stdin -> tagged JSON on stdout; exit 1 if invalid."""
    from compiler.diagnostics import DiagnosticError, SourceMap, render_all
    from compiler.parse import decode_bytes, parse_document
    from compiler.parse.tagged import document_tagged

    data = sys.stdin.buffer.read()
    try:
        doc = parse_document(decode_bytes(data, "<stdin>"), "<stdin>")
    except DiagnosticError as exc:
        sources = getattr(exc, "sources", None) or SourceMap()
        click.echo(render_all(exc.diagnostics, sources, fmt), err=True)
        sys.exit(EXIT_FINDINGS)
    click.echo(json.dumps(document_tagged(doc), ensure_ascii=False))
