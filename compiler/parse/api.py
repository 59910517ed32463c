"""Entry points: TOML text -> `Document`, a single value, or an ``a.b = value`` assignment."""

from __future__ import annotations

from compiler.diagnostics import DiagnosticError, SourceMap, Span
from compiler.document import Document, Node, Table
from compiler.parse.builder import Builder, KeyPart
from compiler.parse.source import ParseError, position, prepare
from compiler.parse.syntax import parse_tree


def _fail(builder_errors: list, source: str, text: str) -> DiagnosticError:
    return ParseError(builder_errors, SourceMap({source: text}))


def parse_document(text: str, source: str) -> Document:
    """Parse a TOML 1.0 document; raises `DiagnosticError` with every problem found."""
    clean = prepare(text, source)
    tree, syntax_error = parse_tree(clean, "document", source)
    if syntax_error is not None:
        raise _fail([syntax_error], source, clean)
    end_line, end_col = position(clean, len(clean))
    builder = Builder(source)
    root = builder.document(tree, Span(source, 1, 1, end_line, end_col))
    if builder.errors:
        raise _fail(builder.errors, source, clean)
    return Document(root=root, source=source, text=clean)


def parse_value(text: str, source: str) -> Node:
    """Parse one TOML value (``42``, ``"x"``, ``[1, 2]``, ``{a = 1}``...)."""
    clean = prepare(text, source)
    tree, syntax_error = parse_tree(clean, "value_only", source)
    if syntax_error is not None:
        raise _fail([syntax_error], source, clean)
    builder = Builder(source)
    value = builder.value(tree.children[0])
    if builder.errors:
        raise _fail(builder.errors, source, clean)
    return value


def parse_assignment(text: str, source: str) -> tuple[list[KeyPart], Node]:
    """Parse ``a."b".c = VALUE`` (TOML key/value syntax): the key parts and the value.

    The value is also checked as it would be inside a document (an inline table's own
    duplicate keys, escapes, number ranges).
    """
    clean = prepare(text, source)
    tree, syntax_error = parse_tree(clean, "override", source)
    if syntax_error is not None:
        raise _fail([syntax_error], source, clean)
    builder = Builder(source)
    key_tree, value_tree = tree.children
    parts = builder.key(key_tree)
    value = builder.value(value_tree)
    if builder.errors:
        raise _fail(builder.errors, source, clean)
    return parts, value


__all__ = ["Document", "Table", "parse_assignment", "parse_document", "parse_value"]
