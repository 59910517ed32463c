"""LALR parsers for our grammars, made from lark and cached by `compiler.derive.derived`.

Two derived artifacts, both built by lark itself on a cache miss (the slow, always-right
path: ``lark.Lark(grammar, parser="lalr")``):

* the parser **runtime**: lark's own standalone runtime (``lark.tools.standalone``, the
  lexer and LALR parser without the grammar compiler), one copy for every grammar, keyed
  by the lark version and this module. Importing it costs ~25 ms less than importing
  lark, which loads its grammar compiler and table builder too.
* each grammar's **tables**: lark's ``memo_serialize`` form (plain dicts, lists and
  strings, marshalled), keyed by the grammar's bytes, the start rules, the lark version
  and this module; loaded into the runtime with ``Lark._load_from_dict``, as lark's
  standalone parsers load theirs.

The runtime module also provides lark's exception and tree classes (``LarkError``,
``UnexpectedToken``, ``Token``, ...) for the callers' error handling.
"""

from __future__ import annotations

import io
import marshal
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from compiler.derive.derived import derived, generated_module

HERE = Path(__file__)
# lark's runtime imports the optional `regex` module (~15 ms) only for Unicode-category
# grammars, which ours are not; and asserts a table invariant on every token (~10% of parse
# time) that holds for every table lark builds.
_PATCHES = (
    (
        "try:\n    import regex\n    _has_regex = True\nexcept ImportError:\n    _has_regex = False",
        "_has_regex = False",
    ),
    ("            assert arg != end_state\n", ""),
)


def _import_lark() -> Any:
    """lark itself (the build path), without the optional ``regex`` module (see above)."""
    if "lark" not in sys.modules and "regex" not in sys.modules:
        sys.modules["regex"] = None  # type: ignore[assignment]
        try:
            import lark
        finally:
            del sys.modules["regex"]
        return lark
    import lark

    return lark


def _generate_runtime() -> str:
    lark = _import_lark()
    from lark.tools.standalone import gen_standalone

    # gen_standalone writes the runtime followed by one grammar's tables; a one-rule
    # grammar keeps that part small (our grammars' tables are separate artifacts).
    out = io.StringIO()
    gen_standalone(lark.Lark('start: "x"', parser="lalr", lexer="contextual"), out=out)
    text = out.getvalue()
    for old, new in _PATCHES:
        if text.count(old) != 1:
            raise RuntimeError(f"lark {lark.__version__}'s standalone runtime changed: {old!r}")
        text = text.replace(old, new)
    return text


@cache
def runtime() -> ModuleType:
    """lark's standalone runtime (its ``Lark``, errors, ``Token`` and ``Tree``)."""
    return generated_module("lark-runtime", [HERE], _generate_runtime, libs=("lark",))


def parser(grammar: Path, start: list[str]) -> Any:
    """A LALR parser (contextual lexer) for ``grammar`` from the rules ``start``."""
    rt = runtime()
    text = grammar.read_bytes()

    def build() -> bytes:
        lark = _import_lark()
        from lark.grammar import Rule
        from lark.lexer import TerminalDef

        built = lark.Lark(text.decode("utf-8"), parser="lalr", lexer="contextual", start=start)
        return marshal.dumps(built.memo_serialize([TerminalDef, Rule]))

    def load(payload: bytes) -> Any:
        data, memo = marshal.loads(payload)  # noqa: S302 - our own entry, its digest checked
        return rt.Lark._load_from_dict(data, memo)

    return derived(
        f"lalr-{grammar.parent.name}-{grammar.stem}",
        [grammar, repr(start), HERE],
        build,
        load,
        libs=("lark",),
    )
