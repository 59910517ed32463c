"""Lark tree -> `Document`, with the semantic rules of TOML 1.0 that a grammar can't state.

Table kinds carry the state the rules need (mirroring tomllib's flags):
- ``header``: defined by ``[a]``; can't be defined again, nor extended with dotted keys
  from another section.
- ``implicit``: created as a prefix of a header (``[a.b]`` creates ``a``); may be defined
  once later by its own header, or extended with dotted keys.
- ``dotted``: created by a dotted key (``a.b = 1``); dotted keys may extend it, headers
  may add sub-tables below it, but ``[a]`` may not define it.
- ``inline``: ``{...}``; closed after its braces, like static arrays.
Errors are collected (one per offending statement) so a user sees all of them at once.
"""

from __future__ import annotations

from typing import Any

from compiler.diagnostics import Diagnostic, Span
from compiler.parse.document import Array, ArrayOfTables, Entry, Node, Scalar, Table
from compiler.parse.scalars import ScalarIssue, atom_value, decode_basic
from compiler.parse.source import MAX_NESTING

KeyPart = tuple[str, Span]

_KIND_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "float": "a float",
    "bool": "a boolean",
    "datetime": "a date-time",
    "datetime-local": "a local date-time",
    "date": "a local date",
    "time": "a local time",
}


def describe(node: Node) -> str:
    """'an integer', 'an inline table', ... for messages."""
    if isinstance(node, Scalar):
        return _KIND_NAMES[node.kind]
    if isinstance(node, Array):
        return "an array"
    if isinstance(node, ArrayOfTables):
        return "an array of tables"
    if node.kind == "inline":
        return "an inline table"
    return "a table"


def dotted(parts: list[KeyPart] | list[str]) -> str:
    """A key path as the user would write it (quoted where needed)."""
    out = []
    for part in parts:
        name = part if isinstance(part, str) else part[0]
        if name and all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
            out.append(name)
        else:
            out.append('"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return ".".join(out)


class Builder:
    """Builds a `Document` root table from parser trees, collecting diagnostics."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[Diagnostic] = []

    # -- positions -------------------------------------------------------------------
    def span(self, tok: Any) -> Span:
        return Span(self.source, tok.line, tok.column, tok.end_line, tok.end_column)

    def span_between(self, first: Any, last: Any) -> Span:
        return Span(self.source, first.line, first.column, last.end_line, last.end_column)

    def sub_span(self, tok: Any, offset: int, length: int) -> Span:
        """The span of ``tok[offset:offset+length]`` (tokens may span lines)."""
        text = str(tok)
        start = self._pos(tok, text, offset)
        end = self._pos(tok, text, offset + max(length, 1))
        return Span(self.source, start[0], start[1], end[0], end[1])

    @staticmethod
    def _pos(tok: Any, text: str, offset: int) -> tuple[int, int]:
        newlines = text.count("\n", 0, offset)
        if not newlines:
            return tok.line, tok.column + offset
        return tok.line + newlines, offset - text.rfind("\n", 0, offset)

    def error(
        self,
        code: str,
        message: str,
        span: Span,
        *,
        first: Span | None = None,
        first_label: str = "first defined here",
        help: tuple[str, ...] = (),
    ) -> None:
        secondary = ((first, first_label),) if first is not None else ()
        self.errors.append(Diagnostic("error", code, message, span, secondary, help))

    # -- document --------------------------------------------------------------------
    def document(self, tree: Any, root_span: Span) -> Table:
        root = Table({}, "root", root_span)
        current = root
        prefix: tuple[str, ...] = ()
        for stmt in tree.children:
            kind = stmt.data
            if kind == "keyval":
                self.keyval(current, stmt, prefix)
            else:
                current, prefix = self.open_table(root, stmt, aot=kind == "array_table")
        return root

    def key(self, tree: Any) -> list[KeyPart]:
        if getattr(tree, "type", None) == "KEY_EQ":
            name = str(tree).split("=", 1)[0].rstrip(" \t")
            span = Span(self.source, tree.line, tree.column, tree.line, tree.column + len(name))
            return [(name, span)]
        parts: list[KeyPart] = []
        for tok in tree.children:
            ttype = tok.type
            if ttype == "BARE_KEY":
                parts.append((str(tok), self.span(tok)))
            elif ttype == "LITERAL_STRING":
                parts.append((str(tok)[1:-1], self.span(tok)))
            else:
                parts.append(
                    (self.basic_string(tok, str(tok)[1:-1], 1, multiline=False), self.span(tok))
                )
        return parts

    def open_table(self, root: Table, stmt: Any, aot: bool) -> tuple[Table, tuple[str, ...]]:
        """Handle ``[a.b]`` / ``[[a.b]]``: the table that following keys go into, its path."""
        open_tok, key_tree, close_tok = stmt.children
        header_span = self.span_between(open_tok, close_tok)
        parts = self.key(key_tree)
        if self._too_deep((), parts):
            return Table({}, "header", header_span), ()  # a detached table: keys go nowhere
        table = self._open_table(root, parts, header_span, aot)
        return table, tuple(name for name, _ in parts)

    def _too_deep(self, prefix: tuple[str, ...], parts: list[KeyPart]) -> bool:
        """A key path deeper than the nesting limit is an error at the part that crosses it:
        every later stage walks tables recursively, so depth must be bounded here."""
        over = len(prefix) + len(parts) - MAX_NESTING
        if over <= 0:
            return False
        span = parts[max(len(parts) - over, 0)][1]
        self.error(
            "toml-limit",
            f"keys nest deeper than {MAX_NESTING} levels here",
            span,
            help=("flatten the key; no spec field nests that deep",),
        )
        return True

    def _open_table(self, root: Table, parts: list[KeyPart], header_span: Span, aot: bool) -> Table:
        detached = Table({}, "header", header_span)
        table = root
        for i, (name, span) in enumerate(parts[:-1]):
            entry = table.entries.get(name)
            if entry is None:
                child = Table({}, "implicit", span)
                table.entries[name] = Entry(name, span, child)
                table = child
                continue
            value = entry.value
            if isinstance(value, Table) and value.kind != "inline":
                table = value
            elif isinstance(value, ArrayOfTables):
                table = value.tables[-1]
            else:
                self._not_extensible(parts[: i + 1], span, entry, header=True)
                return detached
        name, span = parts[-1]
        entry = table.entries.get(name)
        if aot:
            new = Table({}, "array-element", header_span)
            if entry is None:
                table.entries[name] = Entry(name, span, ArrayOfTables([new], header_span))
                return new
            if isinstance(entry.value, ArrayOfTables):
                entry.value.tables.append(new)
                return new
            if isinstance(entry.value, Array):
                self._not_extensible(parts, span, entry, header=True)
                return detached
            path = dotted(parts)
            self.error(
                "toml-redefine-table",
                f"[[{path}]] appends to an array of tables, but `{path}` is already {describe(entry.value)}",
                span,
                first=entry.key_span,
            )
            return detached
        if entry is None:
            new = Table({}, "header", header_span)
            table.entries[name] = Entry(name, span, new)
            return new
        value = entry.value
        if isinstance(value, Table) and value.kind == "implicit":
            value.kind = "header"
            value.span = header_span
            entry.key_span = span
            return value
        path = dotted(parts)
        if isinstance(value, Table) and value.kind == "header":
            self.error(
                "toml-redefine-table",
                f"table [{path}] is defined twice",
                span,
                first=value.span,
                help=("merge the two sections into one",),
            )
        elif isinstance(value, Table) and value.kind == "dotted":
            self.error(
                "toml-redefine-table",
                f"table [{path}] was already created by dotted keys",
                span,
                first=entry.key_span,
                first_label="created here",
                help=(f"write its keys under one [{path}] section, or keep the dotted keys",),
            )
        elif isinstance(value, ArrayOfTables):
            self.error(
                "toml-redefine-table",
                f"[{path}] is an array of tables; use [[{path}]] to add an element",
                span,
                first=value.span,
            )
        elif isinstance(value, (Array, Table)):
            self._not_extensible(parts, span, entry, header=True)
        else:
            self.error(
                "toml-redefine-table",
                f"[{path}] would redefine `{path}`, which is already {describe(value)}",
                span,
                first=entry.key_span,
            )
        return detached

    def _not_extensible(
        self, parts: list[KeyPart] | list[str], span: Span, entry: Entry, header: bool
    ) -> None:
        path = dotted(parts)
        value = entry.value
        if isinstance(value, (Array, Table)):
            what = "static arrays" if isinstance(value, Array) else "inline tables"
            self.error(
                "toml-immutable",
                f"`{path}` is {describe(value)}, which can't be extended",
                span,
                first=entry.key_span,
                help=(f"{what} are complete where they are written; add the values there",),
            )
        else:
            code = "toml-redefine-table" if header else "toml-duplicate-key"
            self.error(
                code,
                f"`{path}` is already {describe(value)}, not a table",
                span,
                first=entry.key_span,
            )

    def keyval(self, table: Table, stmt: Any, prefix: tuple[str, ...]) -> None:
        key_tree, value_tree = stmt.children
        parts = self.key(key_tree)
        if self._too_deep(prefix, parts):
            return
        if hasattr(value_tree, "data"):
            value = self.value(value_tree, prefix + tuple(name for name, _ in parts))
        else:
            value = self.scalar(value_tree)
        self.insert(table, parts, value, prefix)

    def insert(
        self, table: Table, parts: list[KeyPart], value: Node, prefix: tuple[str, ...] = ()
    ) -> None:
        """Add ``a.b.c = value`` to ``table`` (at ``prefix``), creating dotted tables."""

        def names(upto: int = len(parts)) -> list[str]:
            return [*prefix, *(name for name, _ in parts[:upto])]

        for i, (name, span) in enumerate(parts[:-1]):
            entry = table.entries.get(name)
            if entry is None:
                child = Table({}, "dotted", span)
                table.entries[name] = Entry(name, span, child)
                table = child
                continue
            existing = entry.value
            if isinstance(existing, Table) and existing.kind in ("dotted", "implicit"):
                existing.kind = "dotted"
                table = existing
                continue
            if isinstance(existing, Table) and existing.kind in ("header", "array-element"):
                path = dotted(names(i + 1))
                self.error(
                    "toml-redefine-table",
                    f"dotted key extends table [{path}], which is defined by its own header",
                    span,
                    first=existing.span,
                    help=(f"put the key under the [{path}] section instead",),
                )
                return
            if isinstance(existing, ArrayOfTables):
                path = dotted(names(i + 1))
                self.error(
                    "toml-redefine-table",
                    f"dotted key goes through `{path}`, which is an array of tables",
                    span,
                    first=existing.span,
                    help=(f"add keys under a [[{path}]] section instead",),
                )
                return
            self._not_extensible(names(i + 1), span, entry, header=False)
            return
        name, span = parts[-1]
        entry = table.entries.get(name)
        if entry is not None:
            self.error(
                "toml-duplicate-key",
                f"duplicate key `{dotted(names())}`",
                span,
                first=entry.key_span,
                help=("each key may be assigned only once",),
            )
            return
        table.entries[name] = Entry(name, span, value)

    # -- values ----------------------------------------------------------------------
    def value(self, node: Any, path: tuple[str, ...] = ()) -> Node:
        if not hasattr(node, "data"):
            return self.scalar(node)
        if node.data == "array":
            children = node.children
            items = [self.value(c, path) for c in children[1:-1]]
            return Array(items, self.span_between(children[0], children[-1]))
        children = node.children
        table = Table({}, "inline", self.span_between(children[0], children[-1]))
        for kv in children[1:-1]:
            key_tree, value_tree = kv.children
            parts = self.key(key_tree)
            if self._too_deep(path, parts):
                continue
            value = self.value(value_tree, path + tuple(name for name, _ in parts))
            self.insert(table, parts, value, path)
        return table

    def scalar(self, tok: Any) -> Scalar:
        ttype = tok.type
        text = str(tok)
        span = self.span(tok)
        if ttype == "ATOM":
            try:
                value, kind = atom_value(text)
            except ScalarIssue as issue:
                self.error("toml-invalid-value", issue.message, span, help=issue.help)
                return Scalar(text, "string", span)
            return Scalar(value, kind, span)
        if ttype == "BASIC_STRING":
            return Scalar(self.basic_string(tok, text[1:-1], 1, multiline=False), "string", span)
        if ttype == "LITERAL_STRING":
            return Scalar(text[1:-1], "string", span)
        body = text[3:-3]
        skip = 3
        if body.startswith("\n"):
            body = body[1:]
            skip += 1
        if ttype == "ML_BASIC_STRING":
            body = self.basic_string(tok, body, skip, multiline=True)
        return Scalar(body, "string", span)

    def basic_string(self, tok: Any, body: str, skip: int, multiline: bool) -> str:
        try:
            return decode_basic(body, multiline)
        except ScalarIssue as issue:
            span = self.sub_span(tok, skip + issue.offset, issue.length)
            self.error("toml-invalid-escape", issue.message, span, help=issue.help)
            return body
