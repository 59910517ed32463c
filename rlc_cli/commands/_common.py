"""Shared CLI plumbing: exit codes, diagnostic rendering, the --debug guard."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from compiler.diagnostics import Diagnostic, DiagnosticError, SourceMap, render_all

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USER = 2
EXIT_RUNTIME = 3

F = TypeVar("F", bound=Callable[..., Any])


def _format_option(help_text: str) -> Callable[[F], F]:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help=help_text,
    )


format_option = _format_option("How to print diagnostics.")
# The one spelling of machine-readable output on the commands that read and report.
read_format_option = _format_option("text for people, json for scripts.")


def debug_enabled() -> bool:
    ctx = click.get_current_context(silent=True)
    while ctx is not None:
        if ctx.obj and isinstance(ctx.obj, dict) and ctx.obj.get("debug"):
            return True
        ctx = ctx.parent
    return False


def emit_diagnostics(
    diagnostics: Sequence[Diagnostic], sources: SourceMap | None = None, fmt: str = "text"
) -> None:
    if not diagnostics:
        if fmt == "json":
            click.echo("[]")
        return
    text = render_all(diagnostics, sources, fmt)
    click.echo(text, err=fmt != "json")


def guarded(fn: F) -> F:
    """Turn DiagnosticError into rendered diagnostics + exit 2; other errors into exit 3.

    With ``rlc --debug`` the traceback is shown as well.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except DiagnosticError as exc:
            if debug_enabled():
                traceback.print_exc()
            fmt = kwargs.get("fmt", "text")
            sources = getattr(exc, "sources", None)
            emit_diagnostics(exc.diagnostics, sources, fmt)
            sys.exit(EXIT_USER)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the last line of defence for users
            if debug_enabled():
                traceback.print_exc()
            click.echo(f"rlc: internal error: {type(exc).__name__}: {exc}", err=True)
            click.echo("rlc: run again with `rlc --debug ...` to see the traceback", err=True)
            sys.exit(EXIT_RUNTIME)

    return wrapper  # type: ignore[return-value]
