"""Where each resolved value came from: spec, override, recipe, default, or a derivation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from compiler.diagnostics import Span

Kind = Literal["spec", "override", "recipe", "default", "derived"]


@dataclass(frozen=True)
class Provenance:
    kind: Kind
    span: Span | None = None
    recipe: str | None = None
    formula: str | None = None
    inputs: tuple[str, ...] = ()
    alias_of: str | None = None  # the alias the user wrote (e.g. inference.n_samples_per_prompt)
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "span": self.span.to_json() if self.span else None,
            "recipe": self.recipe,
            "formula": self.formula,
            "inputs": list(self.inputs),
        }
        if self.alias_of:
            out["alias"] = self.alias_of
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def describe(self) -> str:
        """One line for `rlc plan` / `rlc explain`."""
        if self.kind == "derived":
            return f"derived: {self.formula} (from {', '.join(self.inputs) or 'nothing'})"
        if self.kind == "default":
            return "default"
        where = str(self.span) if self.span else "?"
        text = f"{self.kind} {where}"
        if self.recipe:
            text = f"recipe {self.recipe} ({where})"
        if self.alias_of:
            text += f" as alias `{self.alias_of}`"
        return text


def span_kind(span: Span | None) -> Kind:
    if span is not None and span.source.startswith("override"):
        return "override"
    return "spec"
