"""The orjson fast path of `contract.canonical` gives the same verdict as the exact check.

The fast path rests on facts about orjson's output (string escaping, key order, float
spelling); these tests pin those facts, so an orjson upgrade that changes them fails here
instead of letting a non-canonical manifest pass lint.
"""

from __future__ import annotations

import json
import math
import random
import struct

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract.canonical import (
    canonical_bytes,
    digest_of,
    digest_without,
    load_if_canonical,
    loads_strict,
)


@pytest.fixture(scope="module")
def manifests() -> list[bytes]:
    from compiler.manifest.manifest import manifest_bytes
    from compiler.pipeline import compile_spec

    return [
        manifest_bytes(compile_spec(f"specs/examples/{name}.toml").manifest())
        for name in ("quickstart", "moe-async")
    ]


def exact(data: bytes) -> bool:
    """The reference verdict: decode with the stdlib, re-serialize, compare."""
    try:
        value = loads_strict(data.decode("utf-8"))
        return canonical_bytes(value).rstrip(b"\n") == data.rstrip(b"\n")
    except ValueError:  # not JSON, not UTF-8, NaN, lone surrogate (CanonicalError)
        return False


def test_orjson_escapes_every_code_point_like_canonical_json():
    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    for i in range(0, len(chars), 8192):
        chunk = "".join(chars[i : i + 8192])
        assert orjson.dumps(chunk) == canonical_bytes(chunk).rstrip(b"\n"), i


def test_orjson_sorts_keys_by_code_point():
    keys = ["", "a", "B", "é", "\u00ff", "\ud7ff", "\ue000", "\uffff", "\U00010000", "a\x00"]
    value = {k: 1 for k in keys}
    assert orjson.dumps(value, option=orjson.OPT_SORT_KEYS) == canonical_bytes(value)[:-1]


def _floats(rng: random.Random) -> list[float]:
    out = [0.0, -0.0, 5e-324, 1.7976931348623157e308, 1e16, 1e-4, 1e-5, 9.999e-5, 1e-10]
    for e in range(-324, 309):
        for _ in range(12):
            for text in (f"{rng.random() * 9 + 1}e{e}", f"{rng.randint(1, 9)}e{e}"):
                f = float(text)
                if math.isfinite(f) and f != 0:
                    out += [f, -f]
    for _ in range(20000):
        f = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if math.isfinite(f):
            out.append(f)
    return out


def test_orjson_float_spelling_differs_from_repr_only_where_respelled():
    """orjson writes `repr` except at decimal exponents -5..-9, whose spellings hold
    "0.0000" or "e-" (the patterns `_repr_floats` looks for)."""
    for f in _floats(random.Random(7)):
        spelled = orjson.dumps(f)
        if spelled != repr(f).encode():
            assert b"0.0000" in spelled or b"e-" in spelled, (f, spelled)
        assert float(spelled) == f  # shortest round trip: `float(token)` is the value


def test_example_manifests_take_the_fast_path(manifests):
    for data in manifests:
        fast = load_if_canonical(data)
        assert fast is not None
        value, compact = fast
        assert value == json.loads(data) and compact == data.rstrip(b"\n")
        assert digest_without(compact, "digest", value["digest"]) == value["digest"]


_DECLINED = (b"18446744073709551616", b"1234567890123456789012", b'":1e-8,', b'",0.00001]')


def _variants(data: bytes) -> list[bytes]:
    doc = json.loads(data)
    text = data.decode()
    out = [
        data,
        data.rstrip(b"\n"),
        data + b"\n",
        data + b" ",
        b" " + data,
        b"\xef\xbb\xbf" + data,
        json.dumps(doc, indent=1).encode(),
        json.dumps(doc, sort_keys=True, separators=(",", ":")).encode(),  # ASCII escapes
        json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(),  # unsorted
        text.replace('"adam_eps":1e-08', '"adam_eps":1e-8').encode(),
        text.replace('"adam_eps":1e-08', '"adam_eps":0.00000001').encode(),
        text.replace('"adam_eps":1e-08', '"adam_eps":1.0e-08').encode(),
        text.replace(":1.0,", ":1,", 1).encode(),
        text.replace(":1,", ":1.0,", 1).encode(),
        text.replace(":0,", ":-0,", 1).encode(),
        text.replace(":0.0,", ":-0.0,", 1).encode(),
        text.replace(":1,", ":1e0,", 1).encode(),
        text.replace(":2,", ":18446744073709551616,", 1).encode(),
        text.replace(":2,", ":123456789012345678901234567890,", 1).encode(),
        text.replace(":2,", ":NaN,", 1).encode(),
        text.replace(":2,", ":Infinity,", 1).encode(),
        text.replace('"name":"', '"name":"\\ud800', 1).encode(),
        text.replace('"name":"', '"name":"\\u0041', 1).encode(),
        text.replace('"name":"', '"name":":1e-8,', 1).encode(),
        text.replace('"name":"', '"name":",0.00001]', 1).encode(),
        text.replace('{"', '{"name":"dup","', 1).encode(),
        text.replace("}", "}}", 1).encode(),
    ]
    return out


def test_fast_path_agrees_with_the_exact_check_on_edited_files(manifests):
    for data in manifests:
        variants = _variants(data)
        assert len(set(variants)) > 20  # the edits did apply
        for variant in variants:
            fast, want = load_if_canonical(variant), exact(variant)
            # the fast path must never pass a file the exact check refuses ...
            if fast is not None:
                assert want, variant[:300]
                assert fast[0] == json.loads(variant)
            # ... and declines a canonical one only for integers beyond 64 bits, or for a
            # string that looks like a respelled float (both then take the exact path)
            elif want:
                assert any(m in variant for m in _DECLINED), variant[:300]


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(), _json, max_size=6))
def test_fast_path_on_random_documents(value):
    try:
        data = canonical_bytes(value)
    except ValueError:  # a lone surrogate from st.text()
        return
    fast = load_if_canonical(data)
    if fast is not None:
        assert fast[0] == value and fast[1] == data[:-1]
    else:  # orjson decodes integers beyond 64 bits as floats: the only expected decline
        assert not _small_ints(value), value
    for other in (
        json.dumps(value, ensure_ascii=False).encode(),
        orjson.dumps(value, option=orjson.OPT_SORT_KEYS) if _small_ints(value) else data,
        json.dumps(value, sort_keys=True, separators=(",", ":")).encode(),
    ):
        if load_if_canonical(other) is not None:
            assert exact(other), other


def _ints(value) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [i for v in value for i in _ints(v)]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ints(v)]
    return []


def _small_ints(value) -> bool:
    return all(-(2**63) <= i < 2**64 for i in _ints(value))


@pytest.mark.parametrize(
    "doc",
    [
        {"a": 1, "digest": "sha256:x", "z": 2},  # in the middle
        {"a": 1, "digest": "sha256:x"},  # last
        {"digest": "sha256:x", "z": [1]},  # first
        {"digest": "sha256:x"},  # the only member
        {"a": {"digest": "sha256:y"}, "digest": "sha256:x", "é": "ü"},  # nested, other value
    ],
)
def test_digest_without_matches_digest_of_the_body(doc):
    compact = canonical_bytes(doc)[:-1]
    body = {k: v for k, v in doc.items() if k != "digest"}
    assert digest_without(compact, "digest", doc["digest"]) == digest_of(body)


def test_digest_without_declines_when_the_member_is_ambiguous():
    doc = {"a": {"digest": "sha256:x"}, "digest": "sha256:x"}
    assert digest_without(canonical_bytes(doc)[:-1], "digest", "sha256:x") is None
    doc = {"a": 'q"digest":"sha256:x"', "digest": "sha256:x"}
    compact = canonical_bytes(doc)[:-1]
    result = digest_without(compact, "digest", "sha256:x")
    body = {k: v for k, v in doc.items() if k != "digest"}
    assert result in (None, digest_of(body))


def test_canonical_bytes_refuses_a_lone_surrogate_as_canonical_error():
    from contract.canonical import CanonicalError

    with pytest.raises(CanonicalError):
        canonical_bytes({"a": "\ud800"})
