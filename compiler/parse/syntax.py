"""Running the LALR parser of ``toml.lark`` and turning lark's errors into positioned
diagnostics.

LALR merges states, so lark's "expected" sets mix contexts (a key in ``[a`` may be
"followed by ']' or '='"). The open brackets left on the parser's value stack tell the
real context, and the expected set is narrowed to it before it is shown to a user.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from compiler.diagnostics import Diagnostic, Span

_FRIENDLY: dict[str, str] = {
    "BARE_KEY": "a key",
    "KEY_EQ": "a key",
    "BASIC_STRING": "a string",
    "LITERAL_STRING": "a string",
    "ML_BASIC_STRING": "a string",
    "ML_LITERAL_STRING": "a string",
    "ATOM": "a value",
    "LSQB": "'['",
    "RSQB": "']'",
    "LDSQB": "'[['",
    "RDSQB": "']]'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "_EQ": "'='",
    "_DOT": "'.'",
    "_COMMA": "','",
    "_NL": "a newline",
    "$END": "the end of the input",
}
_KEY_STARTS = {"BARE_KEY", "KEY_EQ", "BASIC_STRING", "LITERAL_STRING"}
_VALUE_STARTS = {"ATOM", "BASIC_STRING", "ML_BASIC_STRING", "LITERAL_STRING", "ML_LITERAL_STRING"}
_CLOSERS = {"RSQB", "RDSQB", "RBRACE"}
_STATEMENTS = {"keyval", "table", "array_table", "_line", "_NL"}
# Terminals that make sense in each context (others come from merged LALR states).
_NOT_IN: dict[str, set[str]] = {
    "keyval": _CLOSERS | {"_COMMA"},
    "header": {"RDSQB", "RBRACE", "_COMMA", "_EQ", "_NL", "$END"},
    "aot-header": {"RSQB", "RBRACE", "_COMMA", "_EQ", "_NL", "$END"},
    "array": {"RDSQB", "RBRACE", "$END"},
    "inline": {"RSQB", "RDSQB", "_NL", "$END"},
}
_LINE_CONTEXTS = ("keyval", "header", "aot-header")
_END_OF_LINE = ("each key = value pair and [table] header must end its line",)


_GRAMMAR = Path(__file__).resolve().parent / "toml.lark"
_STARTS = ["document", "override", "value_only"]


@lru_cache(maxsize=1)
def _parser() -> Any:
    """lark's parser, its tables loaded from the derived-artifact cache (`compiler.derive.lalr`)."""
    from compiler.derive.lalr import parser

    return parser(_GRAMMAR, _STARTS)


def parse_tree(text: str, start: str, source: str) -> tuple[Any, Diagnostic | None]:
    """The lark tree for ``text`` from rule ``start``, or the syntax diagnostic."""
    tree, diag, _ = parse_tree_ex(text, start, source)
    return tree, diag


def parse_tree_ex(text: str, start: str, source: str) -> tuple[Any, Diagnostic | None, bool]:
    """Like `parse_tree`, plus whether parsing may resume on the next line after the error.

    That is so when the error sits in a one-line statement (not inside an array, an inline
    table or an unterminated string), so blanking its line cannot shift what follows.
    """
    parser = _parser()
    from compiler.derive.lalr import runtime

    lark = runtime()
    try:
        return parser.parse(text, start=start), None, False
    except lark.UnexpectedCharacters as exc:
        diag = _unexpected_char(exc, source)
        resumable = exc.char not in "\"'\n" and _context(exc) in _LINE_CONTEXTS
        return None, diag, resumable
    except lark.UnexpectedToken as exc:
        diag = _unexpected_token(exc, text, source)
        token = exc.token
        resumable = (
            token.type != "$END"
            and (token.line == token.end_line or token.type == "_NL")
            and _context(exc) in _LINE_CONTEXTS
        )
        return None, diag, resumable
    except lark.UnexpectedEOF:  # pragma: no cover - LALR reports the end as a $END token
        line, col = _end_position(text)
        span = Span(source, line, col, line, col)
        return None, _diag(span, "unexpected end of input", ()), False


def _end_position(text: str) -> tuple[int, int]:
    line = text.count("\n") + 1
    col = len(text) - (text.rfind("\n") + 1) + 1
    return line, col


def _context(exc: Any) -> str:
    """Where the parser was: keyval, header, aot-header, array or inline."""
    parser = getattr(exc, "interactive_parser", None)
    if parser is None:
        return "keyval"
    stack = parser.parser_state.value_stack
    names = [str(getattr(v, "type", None) or getattr(v, "data", "")) for v in stack]
    closed = 0
    for i in range(len(names) - 1, -1, -1):
        name = names[i]
        if name in _CLOSERS:
            closed += 1
        elif name in ("LSQB", "LDSQB", "LBRACE"):
            if closed:
                closed -= 1
                continue
            if name == "LBRACE":
                return "inline"
            if name == "LDSQB":
                return "aot-header"
            # (lark's helper for `(_NL _line)*` holds finished statements)
            if all(b in _STATEMENTS or b.startswith("__document") for b in names[:i]):
                return "header"
            return "array"
    return "keyval"


def _expected(names: set[str], context: str) -> tuple[set[str], str]:
    names = names - _NOT_IN[context]
    has_value = "ATOM" in names
    has_key = "BARE_KEY" in names
    labels: list[str] = []
    for name in sorted(names, key=lambda n: (n not in _VALUE_STARTS | _KEY_STARTS, n)):
        if has_value and name in _VALUE_STARTS | {"LSQB", "LBRACE"}:
            label = "a value"
        elif has_key and name in _KEY_STARTS:
            label = "a key"
        else:
            label = _FRIENDLY.get(name, name)
        if label not in labels:
            labels.append(label)
    if len(labels) <= 1:
        return names, "".join(labels)
    return names, ", ".join(labels[:-1]) + " or " + labels[-1]


def _diag(span: Span, message: str, help_: tuple[str, ...]) -> Diagnostic:
    return Diagnostic("error", "toml-syntax", message, span, help=help_)


def _newline_message(context: str, names: set[str], span: Span) -> Diagnostic:
    if context == "inline":
        return _diag(
            span,
            "newline inside an inline table",
            ("TOML 1.0 inline tables must be on one line; use a [table] section for longer ones",),
        )
    if context in ("header", "aot-header"):
        close = "]" if context == "header" else "]]"
        return _diag(span, f"table header is not closed; expected '{close}'", ())
    if "ATOM" in names:
        return _diag(span, "missing value", ("write a value on the same line as its key",))
    if "_EQ" in names:
        return _diag(span, "a key must be followed by '=' and a value", ())
    _, expected = _expected(names, context)
    return _diag(span, f"unexpected end of line; expected {expected}", ())


def _unexpected_char(exc: Any, source: str) -> Diagnostic:
    line, col = exc.line, exc.column
    char: str = exc.char
    context = _context(exc)
    names, expected = _expected(set(exc.allowed or ()), context)
    span = Span(source, line, col, line, col + 1)
    if char == "\n":
        return _newline_message(context, names, span)
    if char in "\"'":
        triple = '"""..."""' if char == '"' else "'''...'''"
        return _diag(
            span,
            "unterminated string",
            (f"a string must close on the line it starts on; use {triple} for multi-line text",),
        )
    shown = repr(char) if not char.isprintable() or char in " \t" else f"'{char}'"
    if names and names <= {"_NL", "$END"}:
        return _diag(span, f"unexpected character {shown} after the value", _END_OF_LINE)
    message = f"unexpected character {shown}"
    if expected:
        message += f"; expected {expected}"
    help_: tuple[str, ...] = ()
    if names & (_KEY_STARTS | {"_DOT", "_EQ"}) and "ATOM" not in names:
        help_ = ("bare keys may contain only A-Z a-z 0-9 _ and -; quote any other key",)
    return _diag(span, message, help_)


def _token_span(token: Any, source: str) -> Span:
    """The span of what the user wrote: without the blanks and comments that _EQ, _COMMA and
    _NL tokens absorb (a newline token points at the end of its first line)."""
    text = str(token)
    if token.type == "_NL":
        col = token.column + text.index("\n")
        return Span(source, token.line, col, token.line, col + 1)
    if token.type in ("_EQ", "_COMMA"):
        lead = len(text) - len(text.lstrip(" \t"))
        col = token.column + lead
        return Span(source, token.line, col, token.line, col + len(text.strip(" \t")))
    return Span(source, token.line, token.column, token.end_line, token.end_column)


def _unexpected_token(exc: Any, text: str, source: str) -> Diagnostic:
    token = exc.token
    context = _context(exc)
    names, expected = _expected(set(exc.expected or ()), context)
    if token.type == "$END":
        line, col = _end_position(text)
        span = Span(source, line, col, line, col)
        if context in ("array", "inline"):
            what = "array" if context == "array" else "inline table"
            return _diag(span, f"unexpected end of input: the {what} is not closed", ())
        return _diag(span, f"unexpected end of input; expected {expected}", ())
    span = _token_span(token, source)
    if token.type == "_NL":
        return _newline_message(context, names, span)
    shown = f"{str(token).strip()!r}"
    if token.type == "RBRACE" and names and names <= _KEY_STARTS:
        return _diag(span, "trailing comma in an inline table", ("TOML 1.0 does not allow it",))
    if names and names <= {"_NL", "$END"}:
        return _diag(span, f"unexpected {shown} after the value", _END_OF_LINE)
    return _diag(span, f"unexpected {shown}; expected {expected}", ())
