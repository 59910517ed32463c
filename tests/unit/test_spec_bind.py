"""Binding: strict types, unknown keys with did-you-mean, aliases, env checks, all errors at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.pipeline import compile_spec

SPECS = Path(__file__).resolve().parents[1] / "specs"
HEAD = 'schema_version = 1\nname = "t"\n[model]\nsource = "builtin:tiny"\n[[data.tasks]]\ntask = "arithmetic"\n[output]\nroot = "out"\n'


def _compile(tmp_path: Path, body: str, overrides: list[str] | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "s.toml"
    path.write_text(HEAD + body)
    return compile_spec(str(path), overrides or [])


def _codes(result) -> list[tuple[str, int | None]]:  # type: ignore[no-untyped-def]
    return [(d.code, d.span.line if d.span else None) for d in result.diagnostics]


def test_many_mistakes_all_reported_each_on_its_line() -> None:
    result = compile_spec(str(SPECS / "many_mistakes.toml"))
    got = _codes(result)
    expected = [
        ("unknown-key", 6),  # fromat
        ("type-mismatch", 9),  # seed = "17"
        ("invalid-value", 12),  # task = "arithmetc"
        ("alias-conflict", 23),  # n_samples_per_prompt with samples_per_prompt
        ("type-mismatch", 24),  # temperature = true
        ("launch-env-credential", 27),
        ("launch-env-reserved", 27),
        ("unknown-key", 29),  # [asyn]
    ]
    assert got == expected
    assert not result.ok
    msgs = {d.code + str(d.span.line if d.span else ""): d for d in result.diagnostics}
    assert msgs["unknown-key6"].help == ("did you mean 'format'?",)
    assert msgs["unknown-key29"].help == ("did you mean 'async'?",)
    assert "arithmetic" in msgs["invalid-value12"].help[0]


def test_strict_types(tmp_path: Path) -> None:
    r = _compile(tmp_path, '[trainer]\ngpus = "4"\n')
    d = r.errors[0]
    assert (d.code, d.span.line, d.span.col) == ("type-mismatch", 10, 8)
    assert "must be an integer, got string" in d.message
    assert d.help == ("write 4 without quotes",)
    # an int where a float is due is fine; a bool where an int is due is not
    assert _compile(tmp_path, "[optimizer]\nlr = 1\n").ok
    assert _codes(_compile(tmp_path, "[trainer]\ngpus = true\n")) == [("type-mismatch", 10)]


def test_range_and_missing(tmp_path: Path) -> None:
    r = _compile(tmp_path, "[trainer]\ngpus = -1\n")
    assert _codes(r) == [("invalid-value", 10)]
    path = tmp_path / "m.toml"
    path.write_text('schema_version = 1\nname = "t"\n[model]\nformat = "hf"\n')
    r = compile_spec(str(path))
    codes = sorted(d.message for d in r.diagnostics)
    assert "missing required key `model.source`" in codes
    assert "missing required key `data`" in codes
    assert "missing required key `output`" in codes
    src = next(d for d in r.diagnostics if "model.source" in d.message)
    assert src.span is not None and src.span.line == 3  # the [model] header


def test_schema_version_and_name(tmp_path: Path) -> None:
    path = tmp_path / "v.toml"
    path.write_text(
        HEAD.replace("schema_version = 1", "schema_version = 2").replace('"t"', '"bad name"')
    )
    lines = sorted(d.span.line for d in compile_spec(str(path)).errors if d.span)
    assert lines == [1, 2]


def test_alias_recorded_in_provenance(tmp_path: Path) -> None:
    r = _compile(
        tmp_path, "[inference]\nn_samples_per_prompt = 4\n[training]\nsave_interval = 10\n"
    )
    assert r.ok, r.diagnostics
    assert r.resolved.config["inference"]["samples_per_prompt"] == 4
    assert r.resolved.config["checkpoint"]["interval"] == 10
    p = r.resolved.provenance["inference.samples_per_prompt"]
    assert p.kind == "spec" and p.alias_of == "inference.n_samples_per_prompt" and p.span.line == 10
    assert r.resolved.provenance["checkpoint.interval"].alias_of == "training.save_interval"


def test_unknown_key_in_nested_table(tmp_path: Path) -> None:
    r = _compile(tmp_path, "[launch.coordination]\nstartup_timout = 5\n")
    d = r.errors[0]
    assert d.code == "unknown-key" and d.span.line == 10
    assert d.help[0].startswith("did you mean 'startup_timeout'")


def test_judge_modes(tmp_path: Path) -> None:
    body = '[judges.j]\nmode = "external"\nmodel = "m"\nendpoint = "http://x"\ngpus = 2\n'
    r = _compile(tmp_path, body)
    assert _codes(r) == [("unknown-key", 13)]
    r = _compile(tmp_path, '[judges.j]\nmode = "remote"\nmodel = "m"\n')
    assert r.errors and r.errors[0].span.line == 10
    r = _compile(tmp_path, '[judges.Bad]\nmode = "external"\nmodel = "m"\nendpoint = "http://x"\n')
    assert [d.code for d in r.errors] == ["invalid-name"]


@pytest.mark.parametrize("name", ["WANDB_API_KEY", "HF_TOKEN", "DB_PASSWORD", "MY_SECRET"])
def test_credential_env_rejected(tmp_path: Path, name: str) -> None:
    r = _compile(tmp_path, f'[launch.env]\n{name} = "x"\n')
    assert _codes(r) == [("launch-env-credential", 10)]
    r = _compile(tmp_path, f'[launch.secrets]\n{name} = "my-secret-name"\n')
    assert r.ok


def test_secret_values_are_names(tmp_path: Path) -> None:
    r = _compile(tmp_path, '[launch.secrets]\nHF_TOKEN = "hf abc/def"\n')
    assert _codes(r) == [("invalid-value", 10)]


def test_override_errors_point_at_override(tmp_path: Path) -> None:
    r = _compile(tmp_path, "", ['trainer.gpus="2"', "trainer.gpuz=1"])
    sources = sorted(d.span.source for d in r.errors)
    assert sources == ["override 1", "override 2"]
    ok = _compile(tmp_path, "", ["inference.samples_per_prompt=4"])
    assert ok.ok
    prov = ok.resolved.provenance["inference.samples_per_prompt"]
    assert prov.kind == "override"


def test_unknown_recipe(tmp_path: Path) -> None:
    r = _compile(tmp_path.joinpath(), "")
    assert r.ok
    path = tmp_path / "r.toml"
    path.write_text('schema_version = 1\nname = "t"\nrecipe = "quickstrat"\n')
    r = compile_spec(str(path))
    assert [(d.code, d.span.line) for d in r.errors] == [("unknown-recipe", 3)]
    assert "quickstart" in r.errors[0].help[0]


def test_spec_json_schema_documents_every_field() -> None:
    from compiler.spec import SECTIONS

    missing = [
        f"{section}.{name}"
        for section, model in SECTIONS.items()
        for name, info in model.model_fields.items()
        if not info.description
    ]
    assert missing == []
