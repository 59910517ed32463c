"""Find templates, schemas, recipes and the runtime lock from a checkout or a wheel install.

A checkout has them at the repository root; a wheel carries them in ``compiler/_data``
(see ``[tool.hatch.build.targets.wheel.force-include]`` in pyproject.toml).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE.parent
_DATA = _PACKAGE / "_data"


@cache
def _base(name: str, checkout_rel: str) -> Path:
    packaged = _DATA / name
    if packaged.exists():
        return packaged
    return _CHECKOUT / checkout_rel


def templates_dir() -> Path:
    return _base("templates", "templates")


def schemas_dir() -> Path:
    return _base("schemas", "schemas")


def rules_dir() -> Path:
    return schemas_dir() / "rules"


def native_dir() -> Path:
    return schemas_dir() / "native"


def recipes_dir() -> Path:
    return _base("recipes", "specs/recipes")


def runtime_lock_path() -> Path:
    return _base("runtime.lock.json", "runtime.lock.json")


def checkout_root() -> Path | None:
    """The repository root when running from a checkout (docs generation writes there)."""
    return _CHECKOUT if (_CHECKOUT / "pyproject.toml").exists() else None
