"""An on-disk cache of parsed rule files, so `rlc` does not re-run the LALR parser.

Parsing ~80 rules in pure Python takes ~80 ms; reading them back from JSON ~2 ms. Entries are
keyed by the sha256 of (grammar digest, cache format, source name, file text), are plain
JSON (never pickle), and are written atomically. Any problem reading or writing the cache
just falls back to parsing. Location: ``$RLC_CACHE_DIR/rules`` or ``~/.cache/rlc/rules``;
``RLC_CACHE_DIR=off`` disables it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from compiler.diagnostics import Span
from compiler.rules import expr as ex
from compiler.rules.functions import FUNCTIONS

FORMAT = "rlc-rules-cache-2"  # 2: rules carry a parsed help template


@cache
def _grammar_digest() -> str:
    from compiler.rules import regen

    return regen.recorded_sha256() or "unknown"


def cache_dir() -> Path | None:
    root = os.environ.get("RLC_CACHE_DIR")
    if root == "off":
        return None
    base = Path(root) if root else Path.home() / ".cache" / "rlc"
    return base / "rules"


def _key(text: str, source: str) -> str:
    h = hashlib.sha256()
    for part in (FORMAT, _grammar_digest(), source, text):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


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


def read(text: str, source: str) -> list[Any] | None:
    """The cached rule records for this file text, or None."""
    d = cache_dir()
    if d is None:
        return None
    try:
        data = json.loads((d / f"{_key(text, source)}.json").read_text(encoding="utf-8"))
        if data.get("format") != FORMAT or data.get("source") != source:
            return None
        return list(data["rules"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write(text: str, source: str, records: list[Any]) -> None:
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"format": FORMAT, "source": source, "rules": records})
        fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body)
        os.replace(tmp, d / f"{_key(text, source)}.json")
    except (OSError, TypeError, ValueError):
        return
