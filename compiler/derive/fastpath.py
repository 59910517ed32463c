"""The fast validators (``compiler.derive.fastgen``'s output), made and cached by `compiler.derive.derived`.

Each is generated from the pydantic models on first use and then loaded from the user
cache, keyed by the bytes of every module the generator reads (the models and the
generator) and the pydantic version. So a model edit is
picked up by the next run, and no generated code is committed. When the generator cannot
handle a model (``ValueError``), callers take the pydantic path, which is always right.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

# The compiler package: every source path below (and every ``reads`` name) is relative to it.
HERE = Path(__file__).resolve().parents[1]
# The typed contract: the spec models live there (the runtime reads the same models).
CONTRACT = HERE.parent / "contract"
_DERIVE = ("derive/__init__.py", "derive/fastpath.py")
_GENERATOR = ("__init__.py", *_DERIVE, "derive/fastgen.py", "derive/fast_runtime.py")


def model_sources() -> list[Path]:
    """The spec models' sources: what every table derived from them is keyed by (with the
    module that derives it; tests/unit/test_derived.py checks these lists are complete)."""
    return [
        HERE / "__init__.py",
        *(HERE / n for n in _DERIVE),
        *sorted((HERE / "spec").glob("*.py")),
        *sorted(CONTRACT.rglob("*.py")),
    ]


def spec_sources() -> list[Path]:
    return [*model_sources(), HERE / "derive" / "fastgen.py", HERE / "derive" / "fast_runtime.py"]


def beaker_sources() -> list[Path]:
    return [
        HERE / "emit" / "__init__.py",
        HERE / "emit" / "beaker_model.py",
        HERE / "emit" / "beaker_checks.py",
        HERE / "diagnostics.py",
        *(HERE / n for n in _GENERATOR),
    ]


def spec_table(kind: str, reads: tuple[str, ...], build: Callable[[], Any]) -> Any:
    """A plain-data table computed from the spec models by ``build``, through
    `compiler.derive.derived` (marshalled: dicts, lists, tuples, strings). ``reads`` names the
    compiler modules (paths relative to the compiler package, e.g. ``"spec/bind.py"``) that
    ``build`` runs besides the models."""
    import marshal

    from compiler.derive import derived

    return derived.derived(
        kind,
        [*model_sources(), *(HERE / n for n in reads)],
        lambda: marshal.dumps(build()),
        marshal.loads,
        libs=("pydantic",),
    )


def _module(kind: str, sources: list[Path], generate_name: str) -> ModuleType | None:
    from compiler.derive import derived

    def generate() -> str:
        from compiler.derive import fastgen

        text: str = getattr(fastgen, generate_name)()
        return text

    try:
        return derived.generated_module(kind, sources, generate, libs=("pydantic",))
    except ValueError:
        return None


@cache
def spec_module() -> ModuleType | None:
    """The spec validator (``dump``), or None."""
    return _module("fast-spec", spec_sources(), "generate_spec")


@cache
def beaker_module() -> ModuleType | None:
    """The Beaker spec acceptance check (accepts), or None."""
    return _module("fast-beaker", beaker_sources(), "generate_beaker")
