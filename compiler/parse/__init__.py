"""rlc's TOML 1.0 front end: our own lark grammar (LALR, contextual lexer) with spans.

``parse_document(text, source)`` gives a `compiler.document.Document` whose
``to_python()`` equals ``tomllib.loads(text)`` for every valid document, and raises
`compiler.diagnostics.DiagnosticError` (positioned, all problems at once) otherwise.
The LALR tables are built from the grammar once and then loaded from the derived-artifact
cache (``compiler.lalr``) on the first parse, so importing this package is cheap.
"""

from compiler.parse.api import parse_assignment, parse_document, parse_value
from compiler.parse.source import ParseError, decode_bytes

__all__ = ["ParseError", "decode_bytes", "parse_assignment", "parse_document", "parse_value"]
