"""Canonical JSON: sorted keys, compact separators, UTF-8, newline at end.

Ints stay ints; floats must round-trip (``repr`` is shortest round-trip in Python) and NaN
or infinity are refused, so the same value always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any


class CanonicalError(ValueError):
    pass


def _check(value: Any, where: str) -> None:
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalError(f"{where}: {value!r} is not representable in canonical JSON")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise CanonicalError(f"{where}: key {k!r} is not a string")
            _check(v, f"{where}.{k}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check(v, f"{where}[{i}]")
        return
    raise CanonicalError(f"{where}: {type(value).__name__} is not a JSON type")


def canonical_bytes(value: Any) -> bytes:
    _check(value, "$")
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any) -> str:
    return "sha256:" + sha256_hex(canonical_bytes(value))
