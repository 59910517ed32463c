"""Checks on raw TOML text before lexing: encoding, BOM, control characters, CRLF.

TOML forbids control characters (except tab, and newlines where a newline may stand) in
every context, and a bare CR anywhere, so one scan of the whole text finds them all with
exact positions; the grammar can then assume clean input. CRLF becomes LF afterwards,
exactly as tomllib does (so multi-line strings decode identically); no column moves.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from compiler.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span

BOM = "\ufeff"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")
_MAX_REPORTED = 10
# Limits far above any real spec that keep the parser's recursion and memory bounded.
# 256 KiB: the grammar parses about 130k characters a second of dense tokens, so this
# bounds a parse to about two seconds; real specs are a few kilobytes.
MAX_TEXT_CHARS = 256 * 1024
MAX_NESTING = 64
_NEST_START = re.compile(r"[\"'#\[\]{}]")
_BASIC_BODY = re.compile(r'(?:[^"\\\n]|\\.)*')


class ParseError(DiagnosticError):
    """A DiagnosticError that carries the source text, so the CLI can show the line."""

    def __init__(self, diagnostics: list[Diagnostic], sources: SourceMap):
        super().__init__(diagnostics)
        self.sources = sources


def position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def decode_bytes(data: bytes, source: str) -> str:
    """UTF-8 text of a TOML file; invalid bytes are positioned (`prepare` handles a BOM)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start].decode("utf-8", errors="replace")
        line, col = position(before, len(before))
        span = Span(source, line, col, line, col + 1)
        diag = Diagnostic(
            "error",
            "toml-encoding",
            f"invalid UTF-8 byte 0x{data[exc.start]:02x}: TOML files must be UTF-8",
            span,
            help=("re-save the file as UTF-8",),
        )
        raise ParseError([diag], SourceMap({source: before})) from None


def prepare(text: str, source: str) -> str:
    """Text ready for the lexer: BOM blanked, control characters rejected, CRLF -> LF.

    A leading BOM becomes a space, so columns still match the file as other stages see it.
    """
    if text.startswith(BOM):
        text = " " + text[1:]
    _check_limits(text, source)
    diagnostics: list[Diagnostic] = []
    last_line = 0
    for match in _CONTROL.finditer(text):
        line, col = position(text, match.start())
        if line == last_line:
            continue  # one report per line is enough (think UTF-16 text)
        last_line = line
        char = match.group()
        if char == "\r":
            message = "bare carriage return (CR without LF) is not allowed in TOML"
            help_ = "use LF or CRLF line endings"
        else:
            message = f"control character U+{ord(char):04X} is not allowed in TOML"
            help_ = f"inside a basic string write it as the escape \\u{ord(char):04X}"
        diagnostics.append(
            Diagnostic(
                "error",
                "toml-control-character",
                message,
                Span(source, line, col, line, col + 1),
                help=(help_,),
            )
        )
        if len(diagnostics) >= _MAX_REPORTED:
            break
    if diagnostics:
        raise ParseError(diagnostics, SourceMap({source: text}))
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    return text


def _limit_error(text: str, source: str, offset: int, message: str, help_: str) -> ParseError:
    line, col = position(text, offset)
    diag = Diagnostic(
        "error", "toml-limit", message, Span(source, line, col, line, col + 1), help=(help_,)
    )
    shown = text[: text.find("\n", offset) if "\n" in text[offset:] else len(text)]
    return ParseError([diag], SourceMap({source: shown}))


def _check_limits(text: str, source: str) -> None:
    """Size and nesting depth, positioned where the limit is crossed (before the parser
    would recurse that deep or hold that much)."""
    if len(text) > MAX_TEXT_CHARS:
        raise _limit_error(
            text,
            source,
            MAX_TEXT_CHARS,
            f"the text is longer than {MAX_TEXT_CHARS} characters; a spec is a few kilobytes",
            "keep data out of the spec: point at files (data.tasks paths, data.manifest)",
        )
    if text.count("[") + text.count("{") <= MAX_NESTING:
        return
    depth = 0
    for offset, tok in _brackets(text):
        if tok in "[{":
            depth += 1
            if depth > MAX_NESTING:
                raise _limit_error(
                    text,
                    source,
                    offset,
                    f"arrays and tables nest deeper than {MAX_NESTING} levels here",
                    "flatten the value; no spec field nests that deep",
                )
        else:
            depth = max(depth - 1, 0)


def _closing(text: str, quote: str, start: int) -> int:
    """Index after the closing triple quote of a multi-line string opened before ``start``."""
    k = text.find(quote, start)
    while k >= 0 and quote == '"""':
        j = k
        while j > start and text[j - 1] == "\\":  # count back: slicing the prefix was quadratic
            j -= 1
        if (k - j) % 2 == 0:
            break
        k = text.find(quote, k + 1)
    if k < 0:
        return len(text)
    k += 3
    while k < len(text) and text[k] == quote[0]:  # up to two quotes may end the content
        k += 1
    return k


def _brackets(text: str) -> Iterator[tuple[int, str]]:
    """(offset, bracket) outside strings and comments, in one linear pass."""
    i = 0
    n = len(text)
    while i < n:
        m = _NEST_START.search(text, i)
        if m is None:
            return
        j, c = m.start(), m.group()
        if c == "#":
            k = text.find("\n", j)
            i = n if k < 0 else k + 1
        elif c in "\"'":
            if text.startswith(c * 3, j):
                i = _closing(text, c * 3, j + 3)
            elif c == '"':
                body = _BASIC_BODY.match(text, j + 1)
                i = (body.end() if body else j + 1) + 1
            else:
                k = text.find("'", j + 1)
                nl = text.find("\n", j + 1)
                i = n if k < 0 else (k + 1 if nl < 0 or k < nl else nl + 1)
        else:
            yield j, c
            i = j + 1
