"""The generated fast paths (compiler/derive/fastgen.py, made and cached by compiler/derive/derived.py)
agree with the pydantic models they come from.

Spec: on every example, recipe, test spec and rule trigger/pass spec, and on thousands of
single-field mutations of them, the fast validator either rejects (pydantic then decides)
or returns exactly pydantic's ``model_dump(by_alias=True, mode="json")``; and it accepts
every spec pydantic accepts in the corpus. Beaker: every emitted spec (all examples, all
golden snapshots) is accepted by both; every broken variant pydantic rejects is rejected.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_beaker_model
import test_rules_content
import yaml
from pydantic import ValidationError

from compiler.derive import fastgen
from compiler.derive.fastpath import beaker_module, spec_module
from compiler.emit.beaker_model import ExperimentSpec
from compiler.parse import parse_document
from compiler.pipeline import compile_spec
from compiler.resources import recipes_dir
from compiler.spec import Spec
from compiler.spec.bind import Layer, _normalize, merge

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.toml"))
RECIPES = sorted(recipes_dir().glob("*.toml"))
TEST_SPECS = sorted((ROOT / "tests" / "specs").glob("*.toml"))
ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**60,
    1.5,
    math.inf,
    math.nan,
    "",
    "x",
    "ünï",
    "a\nb",
    "a\x1cb",
    [],
    ["x"],
    {},
    {"mode": "managed"},
]


def test_generated_modules_come_from_the_cache_and_match_the_generator(
    tmp_path, monkeypatch
) -> None:
    """Both validators are made (the generator handles every model) and what a later
    process loads from the cache is exactly what the generator writes now."""
    from compiler.derive import derived, fastpath

    assert spec_module() is not None and beaker_module() is not None
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path))
    for kind, sources, generate in (
        ("fast-spec", fastpath.spec_sources(), fastgen.generate_spec),
        ("fast-beaker", fastpath.beaker_sources(), fastgen.generate_beaker),
    ):
        fresh = derived.generated_module(kind, sources, generate, libs=("pydantic",))
        loaded = derived.generated_module(
            kind, sources, lambda: pytest.fail("rebuilt"), libs=("pydantic",)
        )
        names = [n for n in vars(fresh) if n.isupper() and not n.startswith("_")]
        assert [getattr(loaded, n) for n in names] == [getattr(fresh, n) for n in names]


def _merged(path: Path) -> dict[str, Any]:
    """What bind validates for ``path``: its recipe layer (if any) merged with it."""
    doc = parse_document(path.read_text(encoding="utf-8"), str(path))
    layers = []
    name = doc.to_python().get("recipe")
    if isinstance(name, str) and (recipes_dir() / f"{name}.toml").is_file():
        rpath = recipes_dir() / f"{name}.toml"
        layers.append(Layer("recipe", parse_document(rpath.read_text(), f"recipe {name}")))
    layers.append(Layer("spec", doc))
    merged: dict[str, Any] = {}
    for layer in layers:
        _normalize(layer, [])
        data = {
            k: v for k, v in layer.data.items() if not (layer.kind == "recipe" and k == "recipe")
        }
        merged = merge(merged, data)
    return merged


def _pydantic(data: Any) -> dict[str, Any] | None:
    try:
        return Spec.model_validate(data).model_dump(by_alias=True, mode="json")
    except ValidationError:
        return None


def _agree(data: Any, *, complete: bool) -> bool:
    """The fast dump equals pydantic's (types and key order included) whenever it answers;
    with ``complete`` it must answer whenever pydantic accepts. Returns pydantic's verdict."""
    fast = spec_module()
    assert fast is not None
    got = fast.dump(data)  # neither path changes its input
    want = _pydantic(data)
    if got is not None:
        assert want is not None, f"fast path accepted what pydantic rejects: {data!r}"
        assert repr(got) == repr(want)
    elif complete:
        assert want is None, "fast path rejected a valid corpus spec"
    return want is not None


def _corpus(tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for path in [*EXAMPLES, *RECIPES, *TEST_SPECS]:
        yield path.name, _merged(path)
    for code, bad, good in test_rules_content.CASES:
        for tag, body in (("bad", bad), ("good", good)):
            path, _ = test_rules_content.write_spec(tmp_path, body, f"{code}-{tag}.toml")
            yield f"{code}-{tag}", _merged(path)


def test_spec_fast_path_matches_pydantic_on_the_corpus(tmp_path: Path) -> None:
    valid = 0
    for _name, data in _corpus(tmp_path):
        valid += _agree(data, complete=True)
    assert valid > 100  # the rule cases bind cleanly; recipes alone are partial specs


def _leaves(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
        if path:
            yield path
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _leaves(v, (*path, i))
        yield path
    else:
        yield path


def _put(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(data)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _shape(path: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """A path with list indices and map keys (judges.NAME, env.NAME...) made generic."""
    out: list[Any] = []
    node = data
    for part in path:
        maps = ("judges", "rubrics", "bindings", "env", "secrets", "sglang", "olmo_core")
        out.append("#" if isinstance(part, int) or (out and out[-1] in maps) else part)
        node = node[part]
    return tuple(out)


def test_spec_fast_path_is_sound_under_mutation() -> None:
    """Every field of fully spelled-out example specs, set to odd values, dropped, or given
    an unknown sibling: the fast path never accepts what pydantic rejects, nor differs."""
    seen: set[tuple[Any, ...]] = set()
    for example in EXAMPLES:
        base = _pydantic(_merged(example))
        assert base is not None
        assert _agree(base, complete=True)  # pydantic's own dump validates back to itself
        for path in _leaves(base):
            if _shape(path, base) not in seen:
                seen.add(_shape(path, base))
                _mutate(base, path)
    assert len(seen) > 200


def _mutate(base: dict[str, Any], path: tuple[Any, ...]) -> None:
    for value in ODD_VALUES:
        _agree(_put(base, path, value), complete=False)
    parent = _put(base, path, None)
    node = parent
    for part in path[:-1]:
        node = node[part]
    if isinstance(node, dict):
        del node[path[-1]]
        _agree(parent, complete=False)
        node["not_a_field"] = 1
        _agree(parent, complete=False)


def _emitted_beaker_specs(tmp_path: Path) -> Iterator[tuple[str, str]]:
    from compiler.emit.beaker import render_beaker
    from compiler.manifest.manifest import manifest_bytes

    for path in EXAMPLES:
        result = compile_spec(str(path))
        manifest = result.manifest()
        files = render_beaker(manifest, manifest_bytes(manifest).decode("utf-8")).files
        for name, text in files.items():
            yield f"{path.stem}/{name}", text
    for snap in sorted((ROOT / "tests" / "golden" / "snapshots").glob("*/beaker-*.yaml")):
        yield str(snap.relative_to(ROOT)), snap.read_text()
    yield "anchors multinode", test_beaker_model.MULTINODE


def _beaker_pydantic(data: Any) -> bool:
    try:
        ExperimentSpec.model_validate(data)
    except ValidationError:
        return False
    return True


def test_beaker_fast_check_accepts_every_emitted_spec(tmp_path: Path) -> None:
    fast = beaker_module()
    assert fast is not None
    seen = 0
    for name, text in _emitted_beaker_specs(tmp_path):
        data = yaml.safe_load(text)
        # compile validates what libyaml's parser reads: the same data as PyYAML's own
        assert yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) == data
        assert _beaker_pydantic(data), name
        assert fast.accepts(copy.deepcopy(data)), name
        seen += 1
    assert seen >= len(EXAMPLES)


def _cross_field_edits() -> list[Any]:
    marks = [
        m for m in test_beaker_model.test_cross_field_checks.pytestmark if m.name == "parametrize"
    ]
    return [edit for edit, _needle in marks[0].args[1]]


def test_beaker_fast_check_rejects_the_broken_specs() -> None:
    fast = beaker_module()
    assert fast is not None
    edits = _cross_field_edits()
    assert len(edits) > 20
    for edit in edits:
        d = test_beaker_model.data()
        edit(d)
        assert not _beaker_pydantic(d)
        assert not fast.accepts(d)


def test_beaker_fast_check_is_sound_under_mutation(tmp_path: Path) -> None:
    fast = beaker_module()
    assert fast is not None
    for _name, text in list(_emitted_beaker_specs(tmp_path))[:6]:
        data = yaml.safe_load(text)
        for path in _leaves(data):
            for value in ODD_VALUES:
                mutated = _put(data, path, value)
                if fast.accepts(copy.deepcopy(mutated)):
                    assert _beaker_pydantic(mutated), (path, value)


def test_without_the_fast_paths_compiles_are_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the generated validators (the generator failing) pydantic alone, and
    templates compiled on the spot, give the same manifests and Beaker files."""
    import compiler.derive.fastpath
    from compiler.emit import emit_artifacts

    def outputs(out: Path) -> dict[str, Any]:
        got: dict[str, Any] = {}
        for path in EXAMPLES:
            manifest = compile_spec(str(path)).manifest()
            files = emit_artifacts(manifest, out / path.stem)
            got[path.stem] = (manifest["digest"], [f.read_text() for f in files])
        return got

    fast = outputs(tmp_path / "fast")
    monkeypatch.setattr(compiler.derive.fastpath, "spec_module", lambda: None)
    monkeypatch.setattr(compiler.derive.fastpath, "beaker_module", lambda: None)
    import compiler.emit.beaker as beaker

    monkeypatch.setattr(beaker, "_template", lambda name: beaker._env().get_template(name))
    assert outputs(tmp_path / "slow") == fast


def test_compiling_the_examples_never_imports_pydantic(tmp_path: Path) -> None:
    """What keeps a cold `rlc compile` fast: once an install's first run has filled the
    derived-artifact cache, valid specs never load pydantic nor lark itself (the parser
    runtime, its tables, the validators and the parsed rules come from the cache)."""
    import subprocess
    import sys

    code = (
        "import sys; from pathlib import Path;"
        "from compiler.pipeline import compile_spec;"
        "from compiler.emit import emit_artifacts;"
        "from compiler.manifest.manifest import write_manifest\n"
        "for spec in sys.argv[2:]:\n"
        "    m = compile_spec(spec).manifest()\n"
        "    p = write_manifest(m, Path(sys.argv[1]) / m['name'] / 'manifest.json')\n"
        "    emit_artifacts(m, p.parent)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core', 'lark')]\n"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    specs = [str(p.relative_to(ROOT)) for p in EXAMPLES]
    env = {**os.environ, "RLC_CACHE_DIR": str(tmp_path / "cache")}
    for run in ("first", "later"):  # the first run of an install builds the validators
        proc = subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / run), *specs],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
