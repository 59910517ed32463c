"""lark LALR parsers whose tables come from the derived-artifact cache (`compiler.derived`).

Why: building the tables from a grammar takes ~0.1-0.2 s; loading lark's own serialized
form of them takes a few ms. The cache entry is lark's ``memo_serialize`` data (plain
dicts, lists and strings, marshalled), keyed by the grammar's bytes, the start rules, the
lark version and this module.
"""

from __future__ import annotations

import marshal
import sys
from pathlib import Path
from typing import Any

from compiler.derived import derived


def _import_lark() -> Any:
    """``lark`` without the optional ``regex`` module it would import (~15 ms) when that is
    installed: our grammars use no Unicode categories, so the stdlib ``re`` serves."""
    if "lark" not in sys.modules and "regex" not in sys.modules:
        sys.modules["regex"] = None  # type: ignore[assignment]
        try:
            import lark
        finally:
            del sys.modules["regex"]
        return lark
    import lark

    return lark


def parser(grammar: Path, start: list[str]) -> Any:
    """A ``lark.Lark`` LALR parser (contextual lexer) for ``grammar`` from rules ``start``."""
    lark = _import_lark()
    text = grammar.read_bytes()

    def build() -> bytes:
        from lark.grammar import Rule
        from lark.lexer import TerminalDef

        built = lark.Lark(text.decode("utf-8"), parser="lalr", lexer="contextual", start=start)
        data, memo = built.memo_serialize([TerminalDef, Rule])
        return marshal.dumps((data, memo))

    def load(payload: bytes) -> Any:
        data, memo = marshal.loads(payload)  # noqa: S302 - our own entry, its digest checked
        return lark.Lark._load_from_dict(data, memo)

    return derived(
        f"lalr-{grammar.parent.name}-{grammar.stem}",
        [grammar, repr(start), Path(__file__)],
        build,
        load,
        libs=("lark",),
    )
