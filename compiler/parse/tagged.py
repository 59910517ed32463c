"""The toml-test "tagged JSON" form of a Document (every scalar as {type, value})."""

from __future__ import annotations

from typing import Any

from compiler.parse.document import Array, ArrayOfTables, Document, Node, Scalar, Table

_TYPES = {
    "string": "string",
    "integer": "integer",
    "float": "float",
    "bool": "bool",
    "datetime": "datetime",
    "datetime-local": "datetime-local",
    "date": "date-local",
    "time": "time-local",
}


def _scalar_text(node: Scalar) -> str:
    value = node.value
    if node.kind == "bool":
        return "true" if value else "false"
    if node.kind == "string":
        return str(value)
    if node.kind == "float":
        return repr(value)
    if node.kind in ("datetime", "datetime-local", "date", "time"):
        return str(value.isoformat())
    return str(value)


def tagged(node: Node) -> Any:
    if isinstance(node, Scalar):
        return {"type": _TYPES[node.kind], "value": _scalar_text(node)}
    if isinstance(node, Array):
        return [tagged(item) for item in node.items]
    if isinstance(node, ArrayOfTables):
        return [tagged(t) for t in node.tables]
    assert isinstance(node, Table)
    return {key: tagged(entry.value) for key, entry in node.entries.items()}


def document_tagged(doc: Document) -> Any:
    return tagged(doc.root)
