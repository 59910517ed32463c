"""The plain-value codec between the judge and the program: round trips and refusals."""

from __future__ import annotations

import json
import math

import pytest

from runtime.executor.values import ValueCodecError, decode_value, dumps, encode_value


def roundtrip(value):
    return decode_value(json.loads(dumps(encode_value(value))))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(10**40),
        1.5,
        float("inf"),
        "text\n\u00e9",
        b"\x00\xff",
        3 + 4j,
        [1, [2, (3, "x")]],
        (1,),
        {1, 2},
        frozenset({"a"}),
        {(1, 2): {"k": [None]}, 3: 4.0},
    ],
)
def test_roundtrip_keeps_value_and_type(value):
    back = roundtrip(value)
    assert back == value and type(back) is type(value)


def test_nan_and_int_float_distinction():
    assert math.isnan(roundtrip(float("nan")))
    assert type(roundtrip(1)) is int and type(roundtrip(1.0)) is float
    assert type(roundtrip(True)) is bool


def test_objects_are_refused():
    class Always:
        def __eq__(self, other):
            return True

    for bad in (Always(), [Always()], {1: Always()}, iter([1]), object):
        with pytest.raises(ValueCodecError):
            encode_value(bad)


def test_builtin_subclasses_are_read_through_the_base_type():
    class Liar(int):
        def __eq__(self, other):
            return True

        def __repr__(self):
            return "999"

    class Items(list):
        def __iter__(self):
            return iter([42])

    assert roundtrip(Liar(7)) == 7 and type(roundtrip(Liar(7))) is int
    assert roundtrip(Items([1, 2])) == [1, 2]


def test_depth_and_malformed_input():
    deep: list = []
    for _ in range(100):
        deep = [deep]
    with pytest.raises(ValueCodecError):
        encode_value(deep)
    for bad in ({"x": 1}, {"i": "one"}, {"f": "1.0"}, {"s": [[1]]}, {"a": 1, "b": 2}):
        with pytest.raises(ValueCodecError):
            decode_value(bad)
