"""``--set PATH=VALUE`` overrides, parsed by the TOML grammar and applied to a Document.

PATH is a TOML dotted key (``trainer.gpus``, ``judges."my judge".url``); a part that is a
decimal number indexes an array (``data.eval.0.path``). VALUE is TOML value syntax, so
strings need quotes: ``--set 'name="x"'``. Spans point into the override text with source
``"override N"`` (1-based), so diagnostics and provenance name the flag that set a value.
Nothing is expanded (no environment variables); the text is taken literally.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from compiler.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span
from compiler.parse import ParseError, parse_assignment
from compiler.parse.builder import KeyPart, describe, dotted
from compiler.parse.document import Array, ArrayOfTables, Document, Entry, Node, Scalar, Table
from compiler.parse.source import MAX_NESTING

_QUOTE_HINT = "VALUE is TOML: strings need quotes, e.g. --set 'name=\"x\"'"


def override_source(index: int) -> str:
    return f"override {index}"


def _with_help(diag: Diagnostic, text: str) -> Diagnostic:
    key, _, value = text.partition("=")
    key, value = key.strip(), value.strip()
    quoted = value.replace("\\", "\\\\").replace('"', '\\"')
    suggestion = f"--set '{key}=\"{quoted}\"'"
    if diag.code == "toml-invalid-value" and diag.message.startswith("invalid value"):
        help_: tuple[str, ...] = (f"strings need quotes: {suggestion}",)
    elif diag.code == "toml-syntax" and value and value[0] not in "\"'[{":
        help_ = (f"if this is a string, quote it: {suggestion}",)
    elif diag.code == "toml-syntax":
        help_ = (_QUOTE_HINT,)
    else:
        help_ = diag.help
    code = "override-syntax" if diag.code == "toml-syntax" else diag.code
    return dataclasses.replace(diag, code=code, help=help_)


def _parse(text: str, index: int) -> tuple[list[KeyPart], Node]:
    source = override_source(index)
    if "=" not in text:
        span = Span(source, 1, 1, 1, max(len(text), 1) + 1)
        diag = Diagnostic(
            "error",
            "override-syntax",
            f"override {text!r} has no '='",
            span,
            help=("write --set PATH=VALUE, e.g. --set trainer.gpus=4", _QUOTE_HINT),
        )
        raise ParseError([diag], SourceMap({source: text}))
    try:
        parts, value = parse_assignment(text, source)
    except DiagnosticError as exc:
        diags = [_with_help(d, text) for d in exc.diagnostics]
        raise ParseError(diags, SourceMap({source: text})) from None
    if len(parts) > MAX_NESTING:  # the same bound as keys in a file: later stages recurse
        diag = Diagnostic(
            "error",
            "toml-limit",
            f"keys nest deeper than {MAX_NESTING} levels here",
            parts[MAX_NESTING][1],
            help=("flatten the key; no spec field nests that deep",),
        )
        raise ParseError([diag], SourceMap({source: text}))
    return parts, value


def parse_override(text: str, index: int) -> tuple[tuple[str, ...], Node]:
    """``a.b.c=VALUE`` -> (("a", "b", "c"), value node with ``"override N"`` spans)."""
    parts, value = _parse(text, index)
    return tuple(name for name, _ in parts), value


def _copy(node: Node) -> Node:
    """A copy of the containers (scalars and spans are never mutated, so they are shared)."""
    if isinstance(node, Table):
        entries = {k: Entry(e.key, e.key_span, _copy(e.value)) for k, e in node.entries.items()}
        return Table(entries, node.kind, node.span)
    if isinstance(node, Array):
        return Array([_copy(item) for item in node.items], node.span)
    if isinstance(node, ArrayOfTables):
        tables = [_copy(t) for t in node.tables]
        return ArrayOfTables([t for t in tables if isinstance(t, Table)], node.span)
    return node


def _index(name: str) -> int | None:
    return int(name) if name.isascii() and name.isdigit() else None


class _Apply:
    def __init__(self, doc: Document) -> None:
        self.doc = doc

    def fail(self, message: str, span: Span, at: Node | None, help_: tuple[str, ...]) -> None:
        secondary: tuple[tuple[Span, str], ...] = ()
        if at is not None and not at.span.source.startswith("override "):
            secondary = ((at.span, "the current value"),)
        raise DiagnosticError(Diagnostic("error", "override-path", message, span, secondary, help_))

    def set(self, parts: list[KeyPart], value: Node) -> None:
        names = [name for name, _ in parts]
        node: Node = self.doc.root
        for i, (name, span) in enumerate(parts):
            last = i == len(parts) - 1
            here = dotted(names[:i])
            if isinstance(node, Table):
                entry = node.entries.get(name)
                if last:
                    node.entries[name] = Entry(name, span, value)
                    return
                if entry is None:
                    child = Table({}, "dotted", span)
                    node.entries[name] = Entry(name, span, child)
                    node = child
                else:
                    node = entry.value
                continue
            if isinstance(node, (Array, ArrayOfTables)):
                items: Sequence[Node] = node.items if isinstance(node, Array) else node.tables
                idx = _index(name)
                if idx is None:
                    self.fail(
                        f"`{here}` is {describe(node)}; select an element by index",
                        span,
                        node,
                        (f"e.g. --set '{dotted(names[:i])}.0.{dotted(names[i:])}=...'",),
                    )
                    return
                if idx >= len(items):
                    self.fail(
                        f"index {idx} is out of range: `{here}` has {len(items)} element(s)",
                        span,
                        node,
                        (),
                    )
                    return
                if last:
                    if isinstance(node, Array):
                        node.items[idx] = value
                    elif isinstance(value, Table):
                        node.tables[idx] = value
                    else:
                        self.fail(
                            f"`{here}` is an array of tables; element {idx} must be a table",
                            span,
                            node,
                            (f"e.g. --set '{dotted(names)}={{key = 1}}'",),
                        )
                    return
                node = items[idx]
                continue
            assert isinstance(node, Scalar)
            self.fail(
                f"cannot set `{dotted(names)}`: `{here}` is {describe(node)}, not a table",
                span,
                node,
                (f"to replace it, set `{here}` itself: --set '{here}={{...}}'",),
            )


def apply_overrides(doc: Document, overrides: list[str]) -> Document:
    """A new Document with every override applied in order (the last one for a key wins).

    All malformed overrides are reported together; ``overrides`` is recorded on the result.
    """
    root = _copy(doc.root)
    assert isinstance(root, Table)
    new = Document(root=root, source=doc.source, text=doc.text, overrides=[*doc.overrides])
    sources = SourceMap({doc.source: doc.text})
    applier = _Apply(new)
    errors: list[Diagnostic] = []
    for index, text in enumerate(overrides, start=len(doc.overrides) + 1):
        sources.add(override_source(index), text)
        try:
            parts, value = _parse(text, index)
            applier.set(parts, value)
        except DiagnosticError as exc:
            errors.extend(exc.diagnostics)
    if errors:
        raise ParseError(errors, sources)
    new.overrides.extend(overrides)
    return new
