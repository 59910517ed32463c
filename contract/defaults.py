"""A contract field's default, for component settings that mirror a spec field.

A component that can also be built without a manifest (tests, benchmarks, a tool that starts
an engine client by hand) keeps a small settings type of its own; where one of its fields IS
a spec field, its default is read from the spec model with `default_of`, so the value is
defined once, in `contract.spec`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


def default_of(model: type[BaseModel], name: str) -> Any:
    """The default of ``model.name`` (a required field has none: KeyError)."""
    info = model.model_fields[name]
    if info.is_required():
        raise KeyError(f"{model.__name__}.{name} is required; it has no default")
    return info.get_default(call_default_factory=True)
