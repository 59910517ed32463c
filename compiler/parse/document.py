"""The parsed TOML document: python values plus a source span for every key and value.

The parser (`compiler.parse`) builds it; overrides (`compiler.parse.overrides`) edit it; binding
(`compiler.spec`) reads values with `to_python()` and positions with `key_span` /
`value_span`. Paths are tuples of table keys and array indices, e.g.
``("judges", "rubric", "gpus")`` or ``("data", "eval", 0, "path")``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from compiler.diagnostics import Span

PathPart = str | int
Path = tuple[PathPart, ...]

ScalarKind = Literal[
    "string", "integer", "float", "bool", "datetime", "datetime-local", "date", "time"
]
TableKind = Literal["root", "header", "implicit", "dotted", "inline", "array-element"]


@dataclass
class Scalar:
    """A leaf value; ``value`` is exactly what tomllib would produce for it."""

    value: Any
    kind: ScalarKind
    span: Span

    def to_python(self) -> Any:
        return self.value


@dataclass
class Array:
    items: list[Node]
    span: Span

    def to_python(self) -> list[Any]:
        return [item.to_python() for item in self.items]


@dataclass
class Table:
    """A table. ``span`` covers its header (or inline braces); entries keep insertion order."""

    entries: dict[str, Entry]
    kind: TableKind
    span: Span

    def to_python(self) -> dict[str, Any]:
        return {k: e.value.to_python() for k, e in self.entries.items()}


@dataclass
class ArrayOfTables:
    """``[[name]]`` tables; ``span`` is the first header."""

    tables: list[Table]
    span: Span

    def to_python(self) -> list[dict[str, Any]]:
        return [t.to_python() for t in self.tables]


Node = Scalar | Array | Table | ArrayOfTables


@dataclass
class Entry:
    """A key and its value. ``key_span`` points at the key as written (last dotted part)."""

    key: str
    key_span: Span
    value: Node


@dataclass
class Document:
    root: Table
    source: str
    text: str = ""
    overrides: list[str] = field(default_factory=list)

    def to_python(self) -> dict[str, Any]:
        return self.root.to_python()

    def entry(self, path: Path) -> Entry | None:
        """The entry at ``path`` (keys and array indices), or None."""
        node: Node = self.root
        found: Entry | None = None
        for part in path:
            if isinstance(part, int):
                if isinstance(node, Array) and 0 <= part < len(node.items):
                    child = node.items[part]
                    found = Entry(str(part), child.span, child)
                    node = child
                    continue
                if isinstance(node, ArrayOfTables) and 0 <= part < len(node.tables):
                    child_t = node.tables[part]
                    found = Entry(str(part), child_t.span, child_t)
                    node = child_t
                    continue
                return None
            if not isinstance(node, Table) or part not in node.entries:
                return None
            found = node.entries[part]
            node = found.value
        return found

    def key_span(self, path: Path) -> Span | None:
        e = self.entry(path)
        return e.key_span if e else None

    def value_span(self, path: Path) -> Span | None:
        e = self.entry(path)
        return e.value.span if e else None

    def best_span(self, path: Path) -> Span | None:
        """The span of the deepest existing prefix of ``path`` (for errors on missing keys)."""
        for cut in range(len(path), 0, -1):
            span = self.value_span(path[:cut])
            if span is not None:
                return span
        return None

    def leaves(self) -> Iterator[tuple[Path, Entry]]:
        """Every (path, entry) whose value is a scalar or array, depth first."""
        yield from _walk(self.root, ())


def _walk(table: Table, prefix: Path) -> Iterator[tuple[Path, Entry]]:
    for key, entry in table.entries.items():
        path = (*prefix, key)
        value = entry.value
        if isinstance(value, Table):
            yield from _walk(value, path)
        elif isinstance(value, ArrayOfTables):
            for i, t in enumerate(value.tables):
                yield from _walk(t, (*path, i))
        else:
            yield path, entry
