"""Options shared by validate / plan / compile: the spec argument and ``--set``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

spec_argument = click.argument("spec", type=click.Path(dir_okay=False))
set_option = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="PATH=VALUE",
    help="Override a spec value (TOML syntax), e.g. --set trainer.gpus=4. Repeatable.",
)


def spec_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    return spec_argument(set_option(fn))


def run_compile(spec: str, overrides: tuple[str, ...]) -> Any:
    from compiler.pipeline import compile_spec

    return compile_spec(spec, list(overrides))


def report(result: Any, fmt: str) -> None:
    """Print every diagnostic of a compile (text to stderr, json to stdout)."""
    from rlc_cli.commands._common import emit_diagnostics

    emit_diagnostics(result.diagnostics, result.sources, fmt)
