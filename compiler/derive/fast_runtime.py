"""Helpers shared by the generated fast validators (``compiler.derive.fastgen``'s spec and Beaker
modules), kept here once instead of copied into each generated module.

The names keep their leading underscore because generated code refers to them as module
privates; nothing else should import them.
"""

from __future__ import annotations

import re as _re
from math import isfinite as _isfinite
from types import SimpleNamespace as _NS
from typing import Any

__all__ = [
    "_EXACT",
    "_MISSING",
    "_NS",
    "_Reject",
    "_hashable",
    "_isfinite",
    "_plain",
    "_printable",
    "_re",
    "_str_key",
]


class _Reject(Exception):
    """The fast path does not accept the input; the caller asks pydantic."""


_MISSING = object()
_EXACT = 2**53


def _printable(s: str) -> bool:
    return s.isascii() and s.isprintable()


def _hashable(x: object) -> bool:
    return type(x) in (str, int, bool)


def _str_key(k: object) -> str:
    if type(k) is not str:
        raise _Reject
    return k


def _plain(x: Any) -> Any:
    """An untyped value as JSON data (pydantic's mode="json" dump of plain TOML values)."""
    t = type(x)
    if t is str or t is int or t is bool or x is None:
        return x
    if t is float:
        if not _isfinite(x):
            raise _Reject
        return x
    if t is list:
        return [_plain(i) for i in x]
    if t is dict:
        return {_str_key(k): _plain(v) for k, v in x.items()}
    raise _Reject
