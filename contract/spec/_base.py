"""Shared base for every spec section: closed, strict, documented.

Each field carries a description; optional extras in ``json_schema_extra``:
``note`` (longer explanation), ``aliases`` (full dotted paths users may write instead),
``derived`` (the formula resolve uses when the field is left unset).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Section(BaseModel):
    """A closed spec section: unknown keys are errors, TOML types are taken literally."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        allow_inf_nan=False,
        frozen=True,
        defer_build=True,
    )


def fld(
    default: Any = ...,
    description: str = "",
    *,
    note: str | None = None,
    aliases: tuple[str, ...] = (),
    derived: str | None = None,
    **constraints: Any,
) -> Any:
    """A documented field. ``default=...`` means required."""
    extra: dict[str, Any] = {}
    if note:
        extra["note"] = note
    if aliases:
        extra["aliases"] = list(aliases)
    if derived:
        extra["derived"] = derived
    return Field(default, description=description, json_schema_extra=extra or None, **constraints)
