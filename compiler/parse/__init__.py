"""Stage 1, text -> document: rlc's TOML 1.0 front end (our own lark grammar, LALR,
contextual lexer) with spans, and ``--set`` overrides applied to the document.

``parse_document(text, source)`` gives a `compiler.parse.document.Document` whose
``to_python()`` equals ``tomllib.loads(text)`` for every valid document, and raises
`compiler.diagnostics.DiagnosticError` (positioned, all problems at once) otherwise.
`compiler.parse.overrides` parses ``--set PATH=VALUE`` with the same grammar and edits a
document. The LALR tables are built from the grammar once and then loaded from the
derived-artifact cache (``compiler.derive.lalr``) on the first parse.

The parser's names load on first use, so importing `compiler.parse.document` (what binding,
resolution and the runtime's manifest check read) does not load the parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compiler.parse.api import parse_assignment, parse_document, parse_value
    from compiler.parse.source import ParseError, decode_bytes

__all__ = ["ParseError", "decode_bytes", "parse_assignment", "parse_document", "parse_value"]
_FROM = {
    "parse_assignment": "api",
    "parse_document": "api",
    "parse_value": "api",
    "ParseError": "source",
    "decode_bytes": "source",
}


def __getattr__(name: str) -> Any:
    if name in _FROM:
        import importlib

        return getattr(importlib.import_module(f"compiler.parse.{_FROM[name]}"), name)
    raise AttributeError(f"module 'compiler.parse' has no attribute {name!r}")
