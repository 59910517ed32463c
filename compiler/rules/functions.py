"""The function table of the rule language: name -> python callable with its arity.

Extend it with `register_function`. Every function is total: the engine turns a missing
argument (null / unset) into a null result before calling, and any exception raised by the
callable (a type error, say) into null as well, so a rule never crashes evaluation.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    fn: Callable[..., Any]
    min_args: int
    max_args: int | None  # None: variadic
    doc: str
    null_ok: bool = False  # True: receives null arguments instead of short-circuiting

    def arity_text(self) -> str:
        if self.max_args is None:
            return f"at least {self.min_args}"
        if self.min_args == self.max_args:
            return str(self.min_args)
        return f"{self.min_args} to {self.max_args}"


def _min(*args: Any) -> Any:
    return min(args[0]) if len(args) == 1 else min(args)


def _max(*args: Any) -> Any:
    return max(args[0]) if len(args) == 1 else max(args)


def _divides(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        raise TypeError("divides() takes numbers")
    if a == 0:
        return False
    return b % a == 0


def _startswith(s: Any, prefix: Any) -> bool:
    if not isinstance(s, str) or not isinstance(prefix, str):
        raise TypeError("startswith() takes strings")
    return s.startswith(prefix)


def _any_startswith(items: Any, prefix: Any) -> bool:
    if not isinstance(items, list | tuple):
        raise TypeError("any_startswith() takes a list")
    return any(isinstance(s, str) and s.startswith(prefix) for s in items)


@lru_cache(maxsize=4096)
def _is_under(path: str, root: str) -> bool:
    """Cached: `rlc lint` asks about the same few paths for every manifest."""
    # normalised: "/weka/x/../../etc" is not under /weka/x
    p, r = PurePosixPath(posixpath.normpath(path)), PurePosixPath(posixpath.normpath(root))
    return p == r or r in p.parents


def _all_under(paths: Any, roots: Any) -> bool:
    if isinstance(paths, str):
        paths = [paths]
    if isinstance(roots, str):
        roots = [roots]
    if not isinstance(paths, list | tuple) or not isinstance(roots, list | tuple):
        raise TypeError("all_under() takes lists of paths")
    return all(
        isinstance(p, str) and any(isinstance(r, str) and _is_under(p, r) for r in roots)
        for p in paths
    )


def _regex_error(pattern: Any) -> str:
    """Why ``pattern`` is not a Python regular expression ("" when it is one)."""
    if not isinstance(pattern, str):
        raise TypeError("regex_error() takes a string")
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    return ""


def _len(x: Any) -> int:
    if isinstance(x, bool | int | float):
        raise TypeError("len() of a number")
    return len(x)


FUNCTIONS: dict[str, Function] = {}


def register_function(
    name: str,
    fn: Callable[..., Any],
    min_args: int,
    max_args: int | None,
    doc: str = "",
    null_ok: bool = False,
) -> None:
    """Add (or replace) a function available to rule expressions."""
    FUNCTIONS[name] = Function(name, fn, min_args, max_args, doc, null_ok)


register_function("len", _len, 1, 1, "number of items of a list, table or string")
register_function("min", _min, 1, None, "smallest argument, or smallest item of one list")
register_function("max", _max, 1, None, "largest argument, or largest item of one list")
register_function("abs", abs, 1, 1, "absolute value")
register_function("divides", _divides, 2, 2, "divides(a, b): a divides b exactly (b % a == 0)")
register_function("startswith", _startswith, 2, 2, "startswith(s, prefix)")
register_function(
    "any_startswith", _any_startswith, 2, 2, "any_startswith(list, prefix): some item starts so"
)
register_function(
    "regex_error",
    _regex_error,
    1,
    1,
    'regex_error(s): why s is not a Python regular expression ("" when it is one)',
)
register_function(
    "all_under",
    _all_under,
    2,
    2,
    "all_under(paths, roots): every path equals or lies below one of the root directories",
)
