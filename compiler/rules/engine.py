"""Evaluate a `RuleSet` against a configuration view; turn findings into diagnostics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from compiler.diagnostics import Diagnostic, Span
from compiler.rules import expr as ex
from compiler.rules.functions import FUNCTIONS
from compiler.rules.loader import Rule, RuleSet


@runtime_checkable
class ConfigView(Protocol):
    """What the engine needs from a resolved configuration.

    `get` returns `UNSET` (or None) for a path the configuration does not hold; `is_set`
    says whether the user gave the value explicitly (spec, override or recipe), not whether
    it came from a default or a derivation; `span` is where to point a diagnostic.
    """

    def get(self, path: str) -> Any: ...

    def is_set(self, path: str) -> bool: ...

    def span(self, path: str) -> Span | None: ...


class MappingView:
    """A `ConfigView` over nested dicts (e.g. a manifest's resolved config, or tests).

    Path segments that are digits index lists. A table counts as set when any key below it
    is set.
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        explicit: Iterable[str] = (),
        spans: Mapping[str, Span] | None = None,
    ):
        self.data = data
        self.explicit = frozenset(explicit)
        self._explicit_prefixes = frozenset(
            ".".join(p.split(".")[:i]) for p in self.explicit for i in range(1, p.count(".") + 1)
        )
        self.spans = dict(spans or {})

    def get(self, path: str) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if isinstance(node, Mapping):
                if part not in node:
                    return ex.UNSET
                node = node[part]
            elif isinstance(node, list | tuple) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return ex.UNSET
        return node

    def is_set(self, path: str) -> bool:
        return path in self.explicit or path in self._explicit_prefixes

    def span(self, path: str) -> Span | None:
        return self.spans.get(path)


class _Memo(dict[str, Any]):
    """Field values by path for one evaluation, each fetched from the view once (rules share
    many fields); `memo[path]` is a plain dict lookup after the first fetch."""

    def __init__(self, view: ConfigView):
        super().__init__()
        self.view = view
        self.is_set = view.is_set

    def __missing__(self, path: str) -> Any:
        value = self.view.get(path)
        self[path] = value
        return value

    def get(self, path: str, default: Any = None) -> Any:  # type: ignore[override]
        return self[path]


@dataclass(frozen=True)
class Finding:
    """A rule whose condition held: its rendered message and where to point."""

    rule: Rule
    message: str
    locations: tuple[tuple[str, Span | None], ...]  # (field, span) for each `at` field
    values: tuple[tuple[str, Any], ...]  # (field, value) for each `at` field
    help: str | None = None  # rendered help (None: the rule has none)

    @property
    def severity(self) -> str:
        return self.rule.severity

    @property
    def code(self) -> str:
        return self.rule.id

    @property
    def is_error(self) -> bool:
        return self.rule.severity == "error"

    def to_diagnostic(self) -> Diagnostic:
        """Primary span: the first `at` field that has one; the others become secondary."""
        with_span = [(f, s) for f, s in self.locations if s is not None]
        primary = with_span[0][1] if with_span else None
        values = dict(self.values)
        secondary = tuple(
            (s, f"{f} = {ex.format_value(values.get(f, ex.UNSET), True)}") for f, s in with_span[1:]
        )
        notes: list[str] = []
        if self.rule.why:
            notes.append(f"why: {self.rule.why}")
        if self.rule.doc:
            notes.append(f"see {self.rule.doc}")
        return Diagnostic(
            severity=self.rule.severity,
            code=self.rule.id,
            message=self.message,
            span=primary,
            secondary=secondary,
            help=(self.help,) if self.help else (),
            notes=tuple(notes),
        )


def render_message(rule: Rule, ctx: ex.Context, parts: Any = None) -> str:
    out: list[str] = []
    for part in rule.template if parts is None else parts:
        if isinstance(part, str):
            out.append(part)
        else:
            out.append(ex.format_value(part.eval(ctx)))
    return "".join(out)


def _location_fields(rule: Rule) -> tuple[str, ...]:
    if rule.at:
        return rule.at
    return tuple(r.path for r in ex.paths_in(rule.when))


def evaluate_rule(rule: Rule, view: ConfigView) -> Finding | None:
    ctx = view if isinstance(view, _Memo) else _Memo(view)
    if not rule.check(ctx):
        return None
    return _finding(rule, ctx)


def _finding(rule: Rule, ctx: _Memo) -> Finding:
    fields = tuple(dict.fromkeys(_location_fields(rule)))
    return Finding(
        rule=rule,
        message=render_message(rule, ctx),
        help=render_message(rule, ctx, rule.help_template) if rule.help_template else rule.help,
        locations=tuple((f, ctx.view.span(f)) for f in fields),
        values=tuple((f, ctx.get(f)) for f in fields),
    )


def evaluate(ruleset: RuleSet | Iterable[Rule], view: ConfigView) -> list[Finding]:
    """Every rule whose `when` holds, in rule-file order. Never raises on odd values."""
    ctx = _Memo(view)
    out: list[Finding] = []
    for rule in ruleset:
        if rule.check(ctx):
            out.append(_finding(rule, ctx))
    return out


def rules_mentioning(ruleset: RuleSet | Iterable[Rule], field: str) -> list[Rule]:
    """Rules whose condition, `at` or message names `field`, a field below it, or a table above it."""
    out = []
    for rule in ruleset:
        for m in rule.fields_mentioned:
            if m == field or m.startswith(field + ".") or field.startswith(m + "."):
                out.append(rule)
                break
    return out


def format_rule(rule: Rule) -> str:
    """The text of `rlc explain RULE-ID`."""
    lines = [
        f"rule {rule.id}  ({rule.severity}, area: {rule.area})",
        f"  defined at {rule.span}",
        f"  when      {rule.condition}",
        f"  {rule.severity:<9} {rule.message}",
    ]
    if rule.at:
        lines.append(f"  at        {', '.join(rule.at)}")
    if rule.help:
        lines.append(f"  help      {rule.help}")
    if rule.why:
        lines.append(f"  why       {rule.why}")
    if rule.doc:
        lines.append(f"  doc       {rule.doc}")
    if rule.fields_mentioned:
        lines.append(f"  fields    {', '.join(rule.fields_mentioned)}")
    return "\n".join(lines)


def function_table() -> list[tuple[str, str, str]]:
    """(name, arity, doc) of every function, for the generated docs."""
    return [
        (f.name, f.arity_text(), f.doc) for f in sorted(FUNCTIONS.values(), key=lambda f: f.name)
    ]
