"""Optional extras: which command needs which, and the one line that says how to install it.

The core install compiles and checks specs; running (`[runtime]`) and submitting to Beaker
(`[launch]`) need extras. A command that needs a missing one says so in one line and exits
2 instead of failing later with an import traceback (in a child process, for `rlc run`).
"""

from __future__ import annotations

import importlib.util
import sys

import click

# extra -> the import names whose absence means the extra is not installed
EXTRAS: dict[str, tuple[str, ...]] = {
    "runtime": ("torch", "olmo_core", "transformers", "sglang_router", "safetensors"),
    "launch": ("beaker",),
}

EXIT_USER = 2


def install_hint(extra: str) -> str:
    return f"pip install -e '.[{extra}]' (in the rlc checkout)"


def missing_modules(extra: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    """The extra's modules that cannot be imported here (found without importing them),
    leaving out ``skip``."""
    return [name for name in EXTRAS[extra] if name not in skip and not installed(name)]


def installed(name: str) -> bool:
    """Whether module ``name`` can be imported here (found without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: sys.modules[name] is None
        return False


def require_extra(extra: str, command: str, *, skip: tuple[str, ...] = ()) -> None:
    """Exit 2 with one line naming the install command when ``extra`` is not installed
    (``skip``: modules the caller checks later, once it knows whether it needs them)."""
    missing = missing_modules(extra, skip=skip)
    if missing:
        click.echo(
            f"rlc: error: `rlc {command}` needs the {extra} extra ({', '.join(missing)} not "
            f"installed): {install_hint(extra)}",
            err=True,
        )
        sys.exit(EXIT_USER)
