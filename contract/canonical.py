"""Canonical JSON: sorted keys, compact separators, UTF-8, newline at end.

Ints stay ints; floats must round-trip (``repr`` is shortest round-trip in Python) and NaN
or infinity are refused, so the same value always gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
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
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (json.loads accepts "\ud800")
        raise CanonicalError(f"a string holds a lone surrogate: {exc.reason}") from exc


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest_of(value: Any, *, check: bool = True) -> str:
    return "sha256:" + sha256_hex(canonical_bytes(value, check=check))


def _refuse_constant(name: str) -> Any:
    raise CanonicalError(f"{name} is not representable in canonical JSON")


def loads_strict(data: bytes | str) -> Any:
    """json.loads that refuses NaN/Infinity, so its result needs no canonical type walk."""
    return json.loads(data, parse_constant=_refuse_constant)


# orjson spells a float as `repr` does except at decimal exponents -5 to -9, where it
# writes "0.0000x" and "xe-6".."xe-9" (`repr`: "xe-05".."xe-09"); a unit test checks that
# rule across every exponent. Those spellings hold one of these (each pattern starts with a
# literal, which `re` searches for quickly; an alternation would not):
_SUSPECT_FLOATS = (re.compile(rb"e-[0-9]"), re.compile(rb"0\.0000"))
_NUMBER = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_NUMBER_CHARS = frozenset(b"0123456789.-")


def _repr_floats(out: bytes) -> bytes:
    """orjson's compact output with each float in orjson's own spelling respelled by `repr`.

    A candidate is a number token: preceded by `:`, `,` or `[`, followed by `,`, `]` or `}`.
    The same bytes inside a string are respelled too; see `load_if_canonical` for why that
    is harmless.
    """
    edits: dict[int, tuple[int, bytes]] = {}
    hits = [m.start() for pattern in _SUSPECT_FLOATS for m in pattern.finditer(out)]
    for at in hits:
        start = at
        while start > 0 and out[start - 1] in _NUMBER_CHARS:
            start -= 1
        m = _NUMBER.match(out, start)
        if (
            m is not None
            and start > 0
            and out[start - 1 : start] in (b":", b",", b"[")
            and m.end() > at
            and out[m.end() : m.end() + 1] in (b",", b"]", b"}")
        ):
            token = m.group()
            spelled = repr(float(token)).encode()
            if spelled != token:
                edits[start] = (m.end(), spelled)
    if not edits:
        return out
    parts: list[bytes] = []
    at = 0
    for start in sorted(edits):
        stop, spelled = edits[start]
        parts += (out[at:start], spelled)
        at = stop
    parts.append(out[at:])
    return b"".join(parts)


def load_if_canonical(data: bytes) -> tuple[Any, bytes] | None:
    """Fast path for reading canonical JSON: ``(value, data without trailing newlines)``
    when ``data`` is canonical (as `canonical_bytes` writes it, newlines at the end aside),
    None when it is not or when this path cannot tell (the caller then decodes and
    re-serializes with the stdlib: the exact check).

    orjson decodes and re-encodes with sorted keys several times faster than ``json``. Its
    output is the canonical encoding except for the spelling of some floats, so those are
    respelled by ``repr`` (orjson writes shortest round-trip digits, so ``float(token)`` is
    the value) and the result must equal ``data`` byte for byte. Keys sort by code point in
    both, separators are compact in both, and strings are escaped as
    ``json.dumps(ensure_ascii=False)`` does (a unit test checks every code point).
    Respelling can also hit digits inside a string that look like a number token; that
    changes the string, so the result then decodes to another value than ``data`` does and
    cannot equal it: a false hit only sends a canonical file to the slow path, it never
    passes a non-canonical one. Integers beyond 64 bits decode to floats in orjson and never
    reproduce; NaN, infinity, lone surrogates, duplicate keys and a BOM never reproduce.
    """
    try:
        import orjson
    except ImportError:  # pragma: no cover - a declared dependency; the slow path still works
        return None
    try:
        value = orjson.loads(data)
        again = _repr_floats(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, TypeError, ValueError):
        return None
    if again != data.rstrip(b"\n"):
        return None
    return value, again


def digest_without(compact: bytes, key: str, value: str) -> str | None:
    """The digest of an object without its top-level member ``key: value``, from
    ``compact``, the object's canonical bytes without the newline (the caller knows the
    object has that member), without re-serializing.

    Removing one member from sorted compact JSON leaves the sorted compact JSON of the rest.
    The member is found by its bytes; when they occur more than once (a nested member, or a
    string holding them) the top-level one is ambiguous and None is returned.
    """
    member = b'"' + key.encode() + b'":' + json.dumps(value, ensure_ascii=False).encode()
    if compact.count(member) != 1 or not compact.startswith(b"{"):
        return None
    i = compact.index(member)
    j = i + len(member)
    if compact[j : j + 1] == b",":
        j += 1
    elif compact[i - 1 : i] == b",":
        i -= 1
    h = hashlib.sha256(compact[:i])
    h.update(compact[j:])
    h.update(b"\n")
    return "sha256:" + h.hexdigest()
