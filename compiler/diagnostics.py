"""One diagnostic type for every user-facing problem, rendered like a compiler's.

Every stage (parse, bind, resolve, rules, lint) reports `Diagnostic`s; the CLI renders them
as text (``path:line:col: error[code]: message`` + source line + caret + help) or as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "note"]


@dataclass(frozen=True, slots=True)
class Span:
    """A source region. Lines and columns are 1-based; ``end_col`` is exclusive.

    ``source`` names where the text came from: a file path, ``"override 2"`` for the second
    ``--set``, ``"recipe gsm8k-dense"``, or ``"<default>"``.
    """

    source: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.col}"

    def to_json(self) -> dict[str, object]:
        return {
            "file": self.source,
            "line": self.line,
            "column": self.col,
            "end_line": self.end_line,
            "end_column": self.end_col,
        }


@dataclass(frozen=True, slots=True)
class Diagnostic:
    severity: Severity
    code: str
    message: str
    span: Span | None = None
    secondary: tuple[tuple[Span, str], ...] = ()
    help: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "severity": self.severity,
            "code": self.code,
            "message": clip_text(self.message),
            "help": [clip_text(h) for h in self.help],
            "notes": [clip_text(n) for n in self.notes],
            "secondary": [{**s.to_json(), "label": label} for s, label in self.secondary],
        }
        if self.span is not None:
            out.update(self.span.to_json())
        else:
            out.update({"file": None, "line": None, "column": None})
        return out


class DiagnosticError(Exception):
    """Raised to abort a stage with one or more user-facing diagnostics (exit code 2)."""

    def __init__(self, diagnostics: Diagnostic | Sequence[Diagnostic]):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        super().__init__("; ".join(d.message for d in self.diagnostics))


@dataclass
class SourceMap:
    """Source texts by name, so renderers can show the offending line."""

    texts: dict[str, str] = field(default_factory=dict)
    _lines: dict[str, tuple[str, list[str]]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def add(self, source: str, text: str) -> None:
        self.texts[source] = text

    def line(self, source: str, line: int) -> str | None:
        text = self.texts.get(source)
        if text is None:
            return None
        cached = self._lines.get(source)
        if cached is None or cached[0] is not text:  # split once per text, not per diagnostic
            # Not splitlines(): it also splits on \f, \x1c-\x1e, \x85, \u2028 and \u2029,
            # which TOML (and most formats) do not count as line breaks.
            cached = (text, text.split("\n"))
            self._lines[source] = cached
        lines = cached[1]
        if 1 <= line <= len(lines):
            return lines[line - 1].removesuffix("\r")
        return "" if line == len(lines) + 1 else None


def suggest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """Did-you-mean candidates for an unknown name."""
    import difflib  # lazily: ~15 ms of start-up that only error paths need

    pool = [c for c in candidates if c != name]  # never suggest what was written
    found = difflib.get_close_matches(name, pool, n=n, cutoff=0.6)
    if not found:
        low = name.lower()
        found = [c for c in pool if low and (low in c.lower() or c.lower() in low)][:n]
    return found


def did_you_mean(name: str, candidates: Iterable[str]) -> tuple[str, ...]:
    found = suggest(name, candidates)
    if not found:
        return ()
    return (f"did you mean {' or '.join(repr(f) for f in found)}?",)


MAX_MESSAGE_CHARS = 400  # a message quoting a 100 kB key or value shows its ends


def clip_text(text: str) -> str:
    """``text`` with its middle elided past `MAX_MESSAGE_CHARS` (applied when rendering,
    after secret values were masked, so a clip never reveals part of one)."""
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    keep = MAX_MESSAGE_CHARS // 2
    return f"{text[:keep]} ... [{len(text) - 2 * keep} characters] ... {text[-keep:]}"


_SNIPPET_WIDTH = 120  # characters of a source line shown around the span


def _clip(line: str, start: int, width: int) -> tuple[str, int, int]:
    """A window of a long source line around the span: (shown text, start, width).

    A spec line can be a megabyte long; echoing it whole would bury the message."""
    if len(line) <= _SNIPPET_WIDTH:
        return line, start, width
    lo = max(0, min(start - _SNIPPET_WIDTH // 3, len(line) - _SNIPPET_WIDTH))
    hi = lo + _SNIPPET_WIDTH
    shown = ("..." if lo else "") + line[lo:hi] + ("..." if hi < len(line) else "")
    new_start = start - lo + (3 if lo else 0)
    return shown, new_start, max(1, min(width, hi - start))


def _render_snippet(span: Span, sources: SourceMap, label: str = "") -> list[str]:
    text = sources.line(span.source, span.line)
    if text is None:
        return []
    gutter = str(span.line)
    pad = " " * len(gutter)
    expanded = text.replace("\t", " ")
    start = max(span.col - 1, 0)
    if span.end_line == span.line:
        width = max(span.end_col - span.col, 1)
    else:
        width = max(len(expanded) - start, 1)
    expanded, start, width = _clip(expanded, start, width)
    underline = " " * start + "^" * width
    out = [f"{pad} |", f"{gutter} | {expanded}", f"{pad} | {underline}"]
    if label:
        out[-1] += f" {label}"
    return out


def render_text(diagnostic: Diagnostic, sources: SourceMap | None = None) -> str:
    sources = sources or SourceMap()
    where = f"{diagnostic.span}: " if diagnostic.span else "rlc: "
    lines = [f"{where}{diagnostic.severity}[{diagnostic.code}]: {clip_text(diagnostic.message)}"]
    if diagnostic.span is not None:
        lines.extend(_render_snippet(diagnostic.span, sources))
    for span, label in diagnostic.secondary:
        lines.append(f"  --> {span}")
        lines.extend(_render_snippet(span, sources, label))
    for note in diagnostic.notes:
        lines.append(f"  = note: {clip_text(note)}")
    for h in diagnostic.help:
        lines.append(f"  = help: {clip_text(h)}")
    return "\n".join(lines)


MAX_RENDERED = 100  # diagnostics shown as text; a terminal full of them helps nobody


def render_all(
    diagnostics: Sequence[Diagnostic], sources: SourceMap | None = None, fmt: str = "text"
) -> str:
    if fmt == "json":
        return json.dumps([d.to_json() for d in diagnostics], indent=2)
    parts = [render_text(d, sources) for d in diagnostics[:MAX_RENDERED]]
    if len(diagnostics) > MAX_RENDERED:
        parts.append(
            f"... {len(diagnostics) - MAX_RENDERED} more not shown (`--format json` lists all)"
        )
    errors = sum(d.is_error for d in diagnostics)
    warnings = sum(d.severity == "warning" for d in diagnostics)
    if errors or warnings:
        parts.append(f"{errors} error(s), {warnings} warning(s)")
    return "\n\n".join(parts)
