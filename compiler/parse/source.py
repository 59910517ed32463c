"""Checks on raw TOML text before lexing: encoding, BOM, control characters, CRLF.

TOML forbids control characters (except tab, and newlines where a newline may stand) in
every context, and a bare CR anywhere, so one scan of the whole text finds them all with
exact positions; the grammar can then assume clean input. CRLF becomes LF afterwards,
exactly as tomllib does (so multi-line strings decode identically); no column moves.
"""

from __future__ import annotations

import re

from compiler.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span

BOM = "\ufeff"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)")
_MAX_REPORTED = 10


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
