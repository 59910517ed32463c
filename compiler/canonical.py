"""Canonical JSON: sorted keys, compact separators, UTF-8, newline at end.

Ints stay ints; floats must round-trip (``repr`` is shortest round-trip in Python) and NaN
or infinity are refused, so the same value always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class CanonicalError(ValueError):
    pass


def _refuse(value: Any) -> Any:
    raise CanonicalError(f"{type(value).__name__} is not a JSON type")


def canonical_bytes(value: Any, *, check: bool = True) -> bytes:
    """The canonical encoding. Non-JSON types and NaN/infinity raise `CanonicalError`.

    ``check=False`` is accepted for data that came from ``loads_strict`` (already JSON);
    the encoder refuses bad values either way, so it costs nothing extra.
    """
    try:
        text = json.dumps(
            value,
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
            default=_refuse,
        )
    except CanonicalError:
        raise
    except (ValueError, TypeError) as exc:  # NaN / infinity; mixed key types
        raise CanonicalError(str(exc)) from exc
    return (text + "\n").encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any, *, check: bool = True) -> str:
    return "sha256:" + sha256_hex(canonical_bytes(value, check=check))


def _refuse_constant(name: str) -> Any:
    raise CanonicalError(f"{name} is not representable in canonical JSON")


def loads_strict(data: bytes | str) -> Any:
    """json.loads that refuses NaN/Infinity, so its result needs no canonical type walk."""
    return json.loads(data, parse_constant=_refuse_constant)
