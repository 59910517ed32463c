"""`rlc lint` in-process: every failure kind through the fast paths, and the fast JSON
Schema predicate never more lenient than fastjsonschema."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import fastjsonschema
import pytest

from compiler.manifest import schema_check
from compiler.manifest.lint import lint_manifest
from compiler.manifest.lint_schema import fast_check, schema_errors, validator
from contract.canonical import canonical_bytes, digest_of


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    from compiler.pipeline import compile_spec

    return [
        compile_spec(f"specs/examples/{name}.toml").manifest()
        for name in ("quickstart", "moe-async", "multinode")
    ]


def sealed(doc: dict[str, Any]) -> bytes:
    """Canonical bytes with a recomputed digest: what a careful forger would write."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    return canonical_bytes({**body, "digest": digest_of(body)})


def codes(data: bytes) -> set[str]:
    return {d.code for d in lint_manifest("m.json", data).findings}


def test_clean_manifests_pass(docs):
    for doc in docs:
        assert lint_manifest("m.json", canonical_bytes(doc)).ok


def test_tampered_stale_and_schema_invalid_are_each_reported(docs):
    doc = docs[0]
    tampered = copy.deepcopy(doc)
    tampered["config"]["optimizer"]["lr"] = 0.5
    report = lint_manifest("m.json", canonical_bytes(tampered))
    assert [d.code for d in report.findings] == ["manifest-digest"]
    assert "modified after compilation" in report.findings[0].message

    stale = copy.deepcopy(doc)
    stale["compiler"]["rules_digest"] = "sha256:" + "0" * 64
    report = lint_manifest("m.json", sealed(stale))
    assert [d.code for d in report.findings] == ["manifest-stale"]
    assert "recompile" in report.findings[0].help[0]

    bad = copy.deepcopy(doc)
    bad["plan"]["batch"] = "not an object"
    report = lint_manifest("m.json", sealed(bad))
    assert [d.code for d in report.findings] == ["manifest-schema"]
    assert "plan.batch must be object" in report.findings[0].message

    broken = copy.deepcopy(doc)
    broken["config"]["trainer"]["tensor_parallel"] = 2
    assert "trainer-parallelism" in codes(sealed(broken))


def test_a_resealed_file_is_still_schema_checked(docs):
    """The digest proves nothing about a forger who recomputes it: the schema check runs on
    every manifest, whatever the digest says."""
    forged = copy.deepcopy(docs[1])
    forged["config"]["async"]["buffer_factor"] = -1.0  # exclusiveMinimum 0
    assert codes(sealed(forged)) == {"manifest-schema"}


def test_non_canonical_and_unreadable_files(docs):
    doc = docs[0]
    pretty = json.dumps(doc, indent=2).encode()
    assert codes(pretty) == {"manifest-not-canonical"}  # digest still matches the content
    escaped = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert "manifest-digest" not in codes(escaped)
    text = canonical_bytes(doc).decode()
    assert codes(text.replace('"adam_eps":1e-08', '"adam_eps":1e-8').encode()) >= {
        "manifest-not-canonical"
    }
    assert codes(text.replace('"adam_eps":1e-08', '"adam_eps":NaN').encode()) == {
        "manifest-not-canonical"
    }
    surrogate = text.replace('"name":"', '"name":"\\ud800', 1).encode()
    found = lint_manifest("m.json", surrogate).findings
    assert found and "Traceback" not in str(found)
    assert codes(b"{not json") == {"manifest-invalid"}
    assert codes(b"\xff\xfe") == {"manifest-invalid"}
    assert codes(b"[" * 100000) == {"manifest-invalid"}  # too deep: a finding, not a crash
    assert codes(b"[1]\n") == {"manifest-invalid"}


def test_an_unreadable_path_is_a_finding(tmp_path):
    report = lint_manifest(tmp_path / "missing.json")
    assert [d.code for d in report.findings] == ["manifest-io"]


def _mutations(doc: dict[str, Any], rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Random single edits: delete a key, change a value's type or value, add a key."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(doc, ())
    replacements: list[Any] = [
        None,
        True,
        False,
        0,
        1,
        -1,
        1.5,
        -0.5,
        1.0,
        "",
        "x",
        "sha256:" + "a" * 64,
        "spec",
        "abc\n",
        [],
        [1],
        ["x"],
        {},
        {"kind": "spec"},
        {"kind": "nope"},
        2**40,
    ]
    out = []
    for _ in range(n):
        mutated = copy.deepcopy(doc)
        path = rng.choice(paths[1:])
        parent = mutated
        for step in path[:-1]:
            parent = parent[step]
        action = rng.random()
        if action < 0.25 and isinstance(parent, dict):
            del parent[path[-1]]
        elif action < 0.35 and isinstance(parent, dict):
            parent[rng.choice(["zz_extra", "kind", "digits", "mode"])] = rng.choice(replacements)
        else:
            parent[path[-1]] = rng.choice(replacements)
        out.append(mutated)
    return out


def _fjs_valid(doc: dict[str, Any]) -> bool:
    try:
        validator()(doc)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


def test_fast_predicate_is_never_more_lenient_than_fastjsonschema(docs):
    check = fast_check()
    assert check is not None  # the shipped schema compiles
    rng = random.Random(2026)
    agreed = 0
    total = 0
    for doc in docs:
        assert check(doc) and _fjs_valid(copy.deepcopy(doc))
        for mutated in _mutations(doc, rng, 700):
            total += 1
            before = copy.deepcopy(mutated)
            fast = check(mutated)
            assert mutated == before  # the predicate never writes
            full = _fjs_valid(mutated)
            if fast:
                assert full, "fast check passed a document fastjsonschema refuses"
                assert mutated == before, "fastjsonschema filled defaults the predicate skipped"
            agreed += fast == full
    assert agreed / total > 0.9  # and it is not uselessly strict


def test_missing_defaulted_field_goes_to_fastjsonschema(docs):
    doc = copy.deepcopy(docs[0])
    section = doc["config"]["checkpoint"]
    key = next(iter(section))
    del section[key]
    check = fast_check()
    assert check is not None and not check(doc)
    assert schema_errors(doc) == []  # fastjsonschema accepts it ...
    assert key in doc["config"]["checkpoint"]  # ... and filled the default, as before


def test_schema_check_refuses_what_it_does_not_compile():
    for schema in (
        {"type": "string", "format": "email"},
        {"type": "string", "pattern": "a$|b$"},
        {"type": ["string", "null"]},
        {"enum": [[1]]},
        {"$ref": "https://elsewhere/schema.json"},
        {"items": [{"type": "string"}]},
        {"oneOf": [{"type": "integer"}, {"minimum": 0}]},  # no sure refutation of a branch
    ):
        with pytest.raises(schema_check.Unsupported):
            schema_check.build(schema)


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "integer", "minimum": 1}, [1, 5], [0, 1.0, True, "1", None]),
        ({"type": "number", "exclusiveMaximum": 2}, [1, 1.5], [2, 2.5, False]),
        ({"minimum": 0}, [0, "x", None, [1]], [-1, True]),
        ({"enum": ["a", 1]}, ["a", 1], ["b", 1.0, True]),
        ({"const": 1}, [1], [True, 1.0, 2]),
        ({"type": "string", "pattern": "^a+$"}, ["aa"], ["aa\n", "b"]),
        ({"type": "string", "minLength": 2, "maxLength": 3}, ["ab", "abc"], ["a", "abcd"]),
        ({"anyOf": [{"type": "null"}, {"type": "integer"}]}, [None, 3], ["3"]),
        (
            {
                "oneOf": [
                    {"type": "object", "required": ["a"], "properties": {"a": {"const": 1}}},
                    {"type": "object", "required": ["b"], "properties": {"b": {"type": "integer"}}},
                ]
            },
            [{"a": 1}, {"b": 2}],
            # {"b": 1.0}: refused here, though fastjsonschema takes 1.0 as an integer; the
            # other branch is refuted (no "a"), so that is only strict, never lenient
            [{"a": 2}, {"a": 1, "b": 2}, {"b": 1.0}, {}, 3],
        ),
        (
            {
                "type": "object",
                "required": ["a"],
                "properties": {"a": {"type": "string"}},
                "patternProperties": {"^x": {"type": "integer"}},
                "additionalProperties": False,
            },
            [{"a": "s"}, {"a": "s", "x1": 2}],
            [{}, {"a": 1}, {"a": "s", "y": 1}, {"a": "s", "x1": "no"}],
        ),
        ({"type": "array", "items": {"type": "string"}, "maxItems": 1}, [[], ["a"]], [[1], 3]),
        (
            {"$defs": {"N": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/N"}}},
            [{"n": 1}, {}],
            [{"n": "1"}],
        ),
    ],
)
def test_schema_check_keywords(schema, good, bad):
    check = schema_check.build(schema)
    for value in good:
        assert check(value) is True, value
    for value in bad:
        assert check(value) is False, value


def test_manifest_view_is_set_matches_the_set_definition(docs):
    """`is set`: the path, or a table above a path, given by spec, override or recipe."""
    from compiler.manifest.lint import ManifestView

    for doc in docs:
        prov = doc["provenance"]
        explicit = {p for p, v in prov.items() if v["kind"] in ("spec", "override", "recipe")}
        tables = {".".join(p.split(".")[:i]) for p in explicit for i in range(1, p.count(".") + 1)}
        view = ManifestView(doc)
        probes = set(prov) | {p.rsplit(".", 1)[0] for p in prov} | {"nope", "model.sourc", ""}
        for path in sorted(probes):
            assert view.is_set(path) is (path in explicit or path in tables), path


def test_generated_validators_honour_cache_off(tmp_path, monkeypatch):
    from compiler.manifest import lint_schema

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLC_CACHE_DIR", "off")
    namespace = lint_schema._generated(
        "probe", [b"key"], lambda: "def valid(v):\n    return 1\n", ()
    )
    assert namespace["valid"](None) == 1
    assert list(tmp_path.iterdir()) == []  # nothing written, not even ./off/
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path / "cache"))
    lint_schema._generated("probe", [b"key"], lambda: "def valid(v):\n    return 2\n", ())
    assert [p.name for p in (tmp_path / "cache" / "derived" / "probe").glob("*.bin")]
