"""Plain-value codec between the judge and the program under test (stdlib only).

Function tests never compare the program's objects: the program's harness turns a return
value into tagged JSON here and the judge rebuilds fresh built-in values from it, so an
object whose ``__eq__`` always answers True arrives as an error, not as a pass. Subclasses
of built-in types are read through the base type's own methods (an overridden ``__iter__``
or ``__str__`` cannot change what is sent). This file is also prepended to the harness and
judge sources, so it must stay importable with ``python -I -S``.
"""

import base64
import json
import math

MAX_DEPTH = 64


class ValueCodecError(ValueError):
    """A value that is not a plain built-in value (or nests too deeply)."""


def encode_value(value, depth=0):
    """A JSON-ready form of ``value``; raises `ValueCodecError` for anything else."""
    if depth > MAX_DEPTH:
        raise ValueCodecError(f"value nested deeper than {MAX_DEPTH} levels")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if isinstance(value, int):
        return {"i": int.__repr__(int.__index__(value))}
    if isinstance(value, float):
        number = float.__float__(value)
        if math.isfinite(number):
            return number
        return {"f": repr(number)}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes | bytearray):
        return {"b": base64.b64encode(bytes(memoryview(value))).decode("ascii")}
    if isinstance(value, complex):
        re = complex.real.__get__(value)
        im = complex.imag.__get__(value)
        return {"c": [encode_value(re, depth + 1), encode_value(im, depth + 1)]}
    if isinstance(value, list):
        return [encode_value(v, depth + 1) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"t": [encode_value(v, depth + 1) for v in tuple.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"z": [encode_value(v, depth + 1) for v in frozenset.__iter__(value)]}
    if isinstance(value, set):
        return {"s": [encode_value(v, depth + 1) for v in set.__iter__(value)]}
    if isinstance(value, dict):
        items = dict.items(value)
        return {"d": [[encode_value(k, depth + 1), encode_value(v, depth + 1)] for k, v in items]}
    raise ValueCodecError(f"a {kind.__name__} object is not a plain value")


def decode_value(data, depth=0):
    """Rebuild built-in values from `encode_value` output; raises `ValueCodecError`."""
    if depth > MAX_DEPTH + 1:
        raise ValueCodecError(f"value nested deeper than {MAX_DEPTH} levels")
    if data is None or type(data) in (bool, float, str):
        return data
    if type(data) is int:
        return data
    if type(data) is list:
        return [decode_value(v, depth + 1) for v in data]
    if type(data) is dict and len(data) == 1:
        ((tag, body),) = data.items()
        try:
            if tag == "i":
                return int(body)
            if tag == "f" and body in ("inf", "-inf", "nan"):
                return float(body)
            if tag == "b":
                return base64.b64decode(body, validate=True)
            if tag == "c":
                re, im = (decode_value(v, depth + 1) for v in body)
                return complex(re, im)
            if tag in ("t", "z", "s"):
                items = [decode_value(v, depth + 1) for v in body]
                return {"t": tuple, "z": frozenset, "s": set}[tag](items)
            if tag == "d":
                return {decode_value(k, depth + 1): decode_value(v, depth + 1) for k, v in body}
        except ValueCodecError:
            raise
        except (TypeError, ValueError) as exc:
            raise ValueCodecError(f"malformed {tag!r} value: {exc}") from None
    raise ValueCodecError("malformed value")


def dumps(obj):
    """Compact JSON (no NaN literals: non-finite floats are tagged by `encode_value`)."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)
