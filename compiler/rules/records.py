"""Parsed rules as plain JSON data and back (the payload of the derived-artifact cache).

Parsing ~80 rules in pure Python takes ~80 ms; reading them back from JSON ~2 ms. The
records are plain JSON (never pickle); `compiler.rules.loader` stores them through
`compiler.derive.derived`, keyed by the file's text, its name, the grammar and this code.
"""

from __future__ import annotations

from typing import Any

from compiler.diagnostics import Span
from compiler.rules import expr as ex
from compiler.rules.functions import FUNCTIONS


def _span_out(s: Span) -> list[Any]:
    return [s.line, s.col, s.end_line, s.end_col]


def node_to_data(n: ex.Node) -> list[Any]:
    if isinstance(n, ex.PathRef):
        return ["p", n.path, _span_out(n.span)]
    if isinstance(n, ex.Literal):
        return ["l", n.value]
    if isinstance(n, ex.ListExpr):
        return ["L", [node_to_data(i) for i in n.items]]
    if isinstance(n, ex.Group):
        return ["g", node_to_data(n.inner)]
    if isinstance(n, ex.Call):
        return ["c", n.func.name, [node_to_data(a) for a in n.args], _span_out(n.span)]
    if isinstance(n, ex.Arith):
        return ["a", n.op, node_to_data(n.left), node_to_data(n.right)]
    if isinstance(n, ex.Neg):
        return ["n", node_to_data(n.operand)]
    if isinstance(n, ex.Compare):
        return ["=", n.op, node_to_data(n.left), node_to_data(n.right)]
    if isinstance(n, ex.In):
        return ["i", n.negate, node_to_data(n.left), node_to_data(n.right)]
    if isinstance(n, ex.IsSet):
        return ["s", n.negate, node_to_data(n.target)]
    if isinstance(n, ex.Not):
        return ["!", node_to_data(n.operand)]
    if isinstance(n, ex.BoolOp):
        return ["b", n.op, node_to_data(n.left), node_to_data(n.right)]
    raise TypeError(f"cannot serialise {type(n).__name__}")


def node_from_data(d: list[Any], source: str) -> ex.Node:
    tag = d[0]
    if tag == "p":
        return ex.PathRef(d[1], Span(source, *d[2]))
    if tag == "l":
        return ex.Literal(d[1])
    if tag == "L":
        return ex.ListExpr([node_from_data(i, source) for i in d[1]])
    if tag == "g":
        return ex.Group(node_from_data(d[1], source))
    if tag == "c":
        return ex.Call(
            FUNCTIONS[d[1]], [node_from_data(a, source) for a in d[2]], Span(source, *d[3])
        )
    if tag == "a":
        return ex.Arith(d[1], node_from_data(d[2], source), node_from_data(d[3], source))
    if tag == "n":
        return ex.Neg(node_from_data(d[1], source))
    if tag == "=":
        return ex.Compare(d[1], node_from_data(d[2], source), node_from_data(d[3], source))
    if tag == "i":
        return ex.In(node_from_data(d[2], source), node_from_data(d[3], source), d[1])
    if tag == "s":
        target = node_from_data(d[2], source)
        assert isinstance(target, ex.PathRef)
        return ex.IsSet(target, d[1])
    if tag == "!":
        return ex.Not(node_from_data(d[1], source))
    if tag == "b":
        return ex.BoolOp(d[1], node_from_data(d[2], source), node_from_data(d[3], source))
    raise ValueError(f"unknown node tag {tag!r}")
