"""Entry points: TOML text -> `Document`, a single value, or an ``a.b = value`` assignment."""

from __future__ import annotations

from compiler.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span
from compiler.parse.builder import Builder, KeyPart
from compiler.parse.document import Document, Node
from compiler.parse.source import ParseError, position, prepare
from compiler.parse.syntax import parse_tree, parse_tree_ex

_MAX_SYNTAX_ERRORS = 10
_LOCAL_CODES = ("toml-invalid-value", "toml-invalid-escape")


def _fail(builder_errors: list[Diagnostic], source: str, text: str) -> DiagnosticError:
    return ParseError(builder_errors, SourceMap({source: text}))


def parse_document(text: str, source: str) -> Document:
    """Parse a TOML 1.0 document; raises `DiagnosticError` with every problem found."""
    clean = prepare(text, source)
    tree, syntax_error, resumable = parse_tree_ex(clean, "document", source)
    if syntax_error is not None:
        raise _fail(_more_syntax_errors(clean, source, syntax_error, resumable), source, clean)
    end_line, end_col = position(clean, len(clean))
    builder = Builder(source)
    root = builder.document(tree, Span(source, 1, 1, end_line, end_col))
    if builder.errors:
        raise _fail(builder.errors, source, clean)
    return Document(root=root, source=source, text=clean)


def _more_syntax_errors(
    text: str, source: str, first: Diagnostic, resumable: bool
) -> list[Diagnostic]:
    """Errors on later lines too: blank each bad one-line statement and parse again.

    Once the rest parses, only the value errors (bad numbers, escapes) of that text are
    added: table and duplicate-key checks would be misled by the blanked lines.
    """
    found = [first]
    lines = text.split("\n")
    tree = None
    while resumable and len(found) < _MAX_SYNTAX_ERRORS:
        last = found[-1]
        assert last.span is not None
        lines[last.span.line - 1] = ""
        tree, diag, resumable = parse_tree_ex("\n".join(lines), "document", source)
        if diag is None:
            break
        if diag.span is None or diag.span.line <= last.span.line:
            tree = None
            break
        found.append(diag)
    if tree is not None:
        builder = Builder(source)
        builder.document(tree, Span(source, 1, 1, 1, 1))
        found.extend(d for d in builder.errors if d.code in _LOCAL_CODES)
        found.sort(key=lambda d: (d.span.line, d.span.col) if d.span else (0, 0))
    return found


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


__all__ = ["parse_assignment", "parse_document", "parse_value"]
