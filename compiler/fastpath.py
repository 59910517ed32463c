"""Load the generated fast validators (``compiler.fastgen``) when they match their sources.

Each generated module records the sha256 of the model sources it was generated from. When
a model file changed since (a checkout where someone forgot `python -m compiler.fastgen`),
or pydantic is another version than the one it was generated with, the module is not used
and every caller takes the pydantic path, which is always right;
``tests/unit/test_fastgen.py`` fails on the stale file.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
# Bumped when the generated code's shape changes, so old files count as stale.
GEN_VERSION = "1"


def sources_digest(files: Iterable[Path]) -> str:
    """sha256 over the named source files (name + bytes): the key a generated file records."""
    h = hashlib.sha256(f"fastgen {GEN_VERSION}\0".encode())
    for f in sorted(files, key=lambda p: p.name):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0\0")
    return h.hexdigest()


def spec_sources() -> list[Path]:
    return [p for p in (HERE / "spec").glob("*.py") if p.name != "_fast.py"]


def beaker_sources() -> list[Path]:
    return [HERE / "emit" / "beaker_model.py", HERE / "emit" / "beaker_checks.py"]


@cache
def pydantic_version() -> str | None:
    """The installed pydantic's version, read from its source (importing pydantic would
    cost the ~40 ms this module exists to save)."""
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("pydantic")
        if spec is None or spec.origin is None:
            return None
        text = (Path(spec.origin).parent / "version.py").read_text(encoding="utf-8")
    except (ImportError, OSError, ValueError):
        return None
    found = re.search(r"^VERSION = ['\"]([^'\"]+)['\"]", text, re.M)
    return found.group(1) if found else None


def _load(name: str, sources: list[Path]) -> ModuleType | None:
    try:
        module = importlib.import_module(name)
        fresh = getattr(module, "SOURCES", None) == sources_digest(sources)
    except (ImportError, OSError):
        return None
    if not fresh or getattr(module, "PYDANTIC", None) != pydantic_version():
        return None
    return module


@cache
def spec_module() -> ModuleType | None:
    """``compiler.spec._fast`` (dump, ALIASES, FIELD_TREE, SCHEMA_DIGEST), or None if stale."""
    return _load("compiler.spec._fast", spec_sources())


@cache
def beaker_module() -> ModuleType | None:
    """``compiler.emit._beaker_fast`` (accepts), or None if stale."""
    return _load("compiler.emit._beaker_fast", beaker_sources())
