"""The rule language: grammar, operators, missing-value semantics, positioned errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compiler.diagnostics import DiagnosticError, SourceMap, Span, render_text
from compiler.rules import (
    UNSET,
    MappingView,
    evaluate,
    format_rule,
    load_rules,
    parse_rules_text,
    rules_mentioning,
)

EXAMPLE = """\
# MoE training constraints
rule trainer-parallelism
  area "MoE training"
  when trainer.tensor_parallel > 1 or trainer.pipeline_parallel > 1 or trainer.context_parallel > 1
  error "trainer tensor, pipeline and context parallelism greater than one are not supported"
  at trainer.tensor_parallel, trainer.pipeline_parallel, trainer.context_parallel
  help "scale the trainer with expert parallelism (trainer.expert_parallel)"
  why "OLMo-core's GRPO path here shards with FSDP + EP only"      # optional
  doc "docs/support.md#moe-training"

rule gpus-divisible   # a second rule in the same file
  area "placement"
  when not divides(trainer.expert_parallel, trainer.gpus)
  warning "trainer.gpus = {trainer.gpus} is not a multiple of {trainer.expert_parallel}"
  at trainer.gpus
"""

KNOWN = {
    "trainer.tensor_parallel",
    "trainer.pipeline_parallel",
    "trainer.context_parallel",
    "trainer.expert_parallel",
    "trainer.gpus",
    "inference.engine",
    "inference.gpus",
    "data.tasks",
    "launch.weka_mounts",
    "output.root",
}


def one(expr: str, message: str = "m"):
    rules, diags = parse_rules_text(f'rule t\n  when {expr}\n  error "{message}"\n', "t.rules")
    assert not diags, [d.message for d in diags]
    return rules[0]


def holds(expr: str, data: dict, explicit: set[str] | None = None) -> bool:
    return bool(evaluate([one(expr)], MappingView(data, explicit or set())))


def test_example_parses_with_all_clauses():
    rules, diags = parse_rules_text(EXAMPLE, "moe.rules")
    assert not diags
    r = rules[0]
    assert r.id == "trainer-parallelism"
    assert r.area == "MoE training"
    assert r.severity == "error"
    assert r.at == (
        "trainer.tensor_parallel",
        "trainer.pipeline_parallel",
        "trainer.context_parallel",
    )
    assert r.why and r.why.startswith("OLMo-core")
    assert r.doc == "docs/support.md#moe-training"
    assert r.span == Span("moe.rules", 2, 6, 2, 25)
    assert r.condition == (
        "trainer.tensor_parallel > 1 or trainer.pipeline_parallel > 1 "
        "or trainer.context_parallel > 1"
    )
    assert rules[1].severity == "warning"
    assert rules[1].area == "placement"
    assert rules[1].fields_mentioned == ("trainer.expert_parallel", "trainer.gpus")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("a == 2", True),
        ("a != 2", False),
        ("a < 3", True),
        ("a <= 2", True),
        ("a > 2", False),
        ("a >= 2", True),
        ("a + 1 == 3", True),
        ("a - 3 == -1", True),
        ("a * 3 == 6", True),
        ("a / 4 == 0.5", True),
        ("7 // a == 3", True),
        ("7 % a == 1", True),
        ("1 + 2 * 3 == 7", True),
        ("(1 + 2) * 3 == 9", True),
        ("-a == -2", True),
        ("a in [1, 2, 3]", True),
        ("a not in [1, 2, 3]", False),
        ('s in ["x", "yz"]', True),
        ('"y" in s', True),
        ('s == "yz"', True),
        ("f == 1e-6", True),
        ("f < 0.001", True),
        ("b", True),
        ("not b", False),
        ("b and a == 2", True),
        ("not b or a == 2", True),
        ("b and not b", False),
        ("not (b and a == 3)", True),
        ("t.x == null", True),
        ("t.y != null", True),
        ("a == 2.0", True),
        ("[1, 2] == l", True),
        ("l + [3] == [1, 2, 3]", True),
        ('s + "!" == "yz!"', True),
        ("true == b", True),
        ("false != b", True),
        ("len(l) == 2", True),
        ("len(s) == 2", True),
        ("len(t) == 2", True),
        ("min(l) == 1 and max(l) == 2", True),
        ("min(3, a, 5) == 2 and max(3, a, 5) == 5", True),
        ("abs(-a) == 2", True),
        ("divides(2, 8) and not divides(3, 8)", True),
        ("divides(0, 8)", False),
        ('startswith(s, "y")', True),
        ('any_startswith(paths, "/tmp/")', True),
        ('all_under(paths, ["/weka/a", "/tmp"])', True),
        ('all_under(paths, ["/weka/a"])', False),
        ('all_under(["/weka/ab"], ["/weka/a"])', False),
        ("[1, 2,] == l", True),
    ],
)
def test_operators_and_functions(expr, expected):
    data = {
        "a": 2,
        "b": True,
        "s": "yz",
        "f": 1e-6,
        "l": [1, 2],
        "t": {"x": None, "y": 1},
        "paths": ["/weka/a/b", "/tmp/c"],
    }
    assert holds(expr, data) is expected


@pytest.mark.parametrize(
    "expr",
    [
        "missing > 1",
        "missing < 1",
        "missing >= 0",
        "missing == 1",
        "missing != 1",
        "nul > 1",
        "nul != 1",
        "missing + 1 > 0",
        "missing * 0 == 0",
        "len(missing) == 0",
        "divides(2, missing)",
        "missing in [1]",
        "missing not in [1]",
        "1 in missing",
        "s > 1",  # a string and a number: not comparable
        "s == 1",
        "1 / 0 == 1",  # division by zero gives null
        "len(1) == 1",  # a type error inside a function gives null
        "b == 1",  # booleans are not numbers
        "b + 1 == 2",
        "s - 1 == 0",
        "missing",
        "a in 5",
    ],
)
def test_missing_and_mistyped_values_are_false_not_crashes(expr):
    assert holds(expr, {"nul": None, "s": "x", "b": True, "a": 1}) is False


def test_missing_negations_and_null_literal():
    data = {"nul": None}
    assert holds("not (missing > 1)", data)
    assert holds("missing == null", data)
    assert holds("nul == null", data)
    assert not holds("missing != null", data)
    assert holds("s != 1", {"s": "x"})  # different kinds, both present: unequal


def test_is_set_asks_the_view_not_the_value():
    data = {"trainer": {"gpus": 8, "expert_parallel": 1}}
    assert holds("trainer.gpus is set", data, {"trainer.gpus"})
    assert not holds("trainer.expert_parallel is set", data, {"trainer.gpus"})
    assert holds("trainer.expert_parallel is not set", data, {"trainer.gpus"})
    assert holds("trainer is set", data, {"trainer.gpus"})  # a table holding a set key
    assert holds("missing is not set", data)


def test_mapping_view_indexes_lists_and_reports_unset():
    v = MappingView({"data": {"eval": [{"path": "x"}]}})
    assert v.get("data.eval.0.path") == "x"
    assert v.get("data.eval.1.path") is UNSET
    assert v.get("data.nope") is UNSET
    assert v.get("data.eval.0.path.deeper") is UNSET


def test_interpolation_and_diagnostic_spans():
    rules, _ = parse_rules_text(EXAMPLE, "moe.rules")
    sp = {
        "trainer.tensor_parallel": Span("spec.toml", 3, 19, 3, 20),
        "trainer.context_parallel": Span("spec.toml", 5, 20, 5, 21),
        "trainer.gpus": Span("spec.toml", 2, 8, 2, 9),
    }
    data = {
        "trainer": {
            "tensor_parallel": 2,
            "pipeline_parallel": 1,
            "context_parallel": 4,
            "gpus": 6,
            "expert_parallel": 4,
        }
    }
    findings = evaluate(rules, MappingView(data, set(), sp))
    assert [f.code for f in findings] == ["trainer-parallelism", "gpus-divisible"]
    d = findings[0].to_diagnostic()
    assert d.severity == "error" and d.code == "trainer-parallelism"
    assert d.span == sp["trainer.tensor_parallel"]
    # pipeline_parallel has no span (a default): skipped; context_parallel is secondary.
    assert d.secondary == ((sp["trainer.context_parallel"], "trainer.context_parallel = 4"),)
    assert d.help == ("scale the trainer with expert parallelism (trainer.expert_parallel)",)
    assert any("docs/support.md#moe-training" in n for n in d.notes)
    w = findings[1].to_diagnostic()
    assert w.severity == "warning"
    assert w.message == "trainer.gpus = 6 is not a multiple of 4"
    assert w.span == sp["trainer.gpus"]


def test_interpolation_of_expressions_values_and_escapes():
    r = one("a > 0", "got {a * 2}, {s}, {l}, {b}, {missing}, {{braces}}")
    data = {"a": 3, "s": "x", "l": ["p", 1], "b": False}
    (f,) = evaluate([r], MappingView(data))
    assert f.message == 'got 6, x, ["p", 1], false, <unset>, {braces}'


def test_primary_span_falls_back_to_condition_fields_without_at():
    r = one("a > 1")
    (f,) = evaluate([r], MappingView({"a": 2}, spans={"a": Span("s", 1, 1, 1, 2)}))
    assert f.to_diagnostic().span == Span("s", 1, 1, 1, 2)


def write(dir: Path, name: str, text: str) -> Path:
    p = dir / name
    p.write_text(text, encoding="utf-8")
    return p


def errors_of(tmp_path: Path, text: str, known=None, name="bad.rules"):
    write(tmp_path, name, text)
    with pytest.raises(DiagnosticError) as exc:
        load_rules(tmp_path, known)
    return exc.value


def test_unknown_keyword_is_positioned_with_did_you_mean(tmp_path):
    err = errors_of(tmp_path, 'rule x\n  area "a"\n  when a > 1\n  eror "m"\n')
    (d,) = err.diagnostics
    assert d.code == "rules-unknown-keyword"
    assert d.span == Span(str(tmp_path / "bad.rules"), 4, 3, 4, 7)
    assert "did you mean 'error'" in d.help[0]
    # The error carries the rules text so the CLI can show the line.
    text = render_text(d, err.sources)  # type: ignore[attr-defined]
    assert '4 |   eror "m"' in text and "^^^^" in text


def test_missing_when_and_severity(tmp_path):
    err = errors_of(tmp_path, 'rule x\n  area "a"\n  help "h"\n')
    codes = [d.code for d in err.diagnostics]
    assert codes == ["rules-missing-clause", "rules-missing-clause"]
    assert "`when`" in err.diagnostics[0].message
    assert err.diagnostics[0].span.line == 1 and err.diagnostics[0].span.col == 6


def test_duplicate_clause(tmp_path):
    err = errors_of(tmp_path, 'rule x\n when a\n when b\n error "m"\n')
    (d,) = err.diagnostics
    assert d.code == "rules-duplicate-clause" and d.span.line == 3
    assert d.secondary[0][0].line == 2


def test_duplicate_id_across_files(tmp_path):
    write(tmp_path, "a.rules", 'rule same when a error "m"\n')
    err = errors_of(tmp_path, '\n\nrule same when b error "n"\n', name="b.rules")
    (d,) = err.diagnostics
    assert d.code == "rules-duplicate-id"
    assert d.span.source.endswith("b.rules") and d.span.line == 3
    assert d.secondary[0][0].source.endswith("a.rules")


def test_syntax_errors_are_positioned(tmp_path):
    err = errors_of(tmp_path, "rule x\n  when a >\n")
    (d,) = err.diagnostics
    assert d.code == "rules-syntax" and "end of file" in d.message
    err = errors_of(tmp_path, "rule x when a == 'q' error \"m\"\n")
    (d,) = err.diagnostics
    assert d.code == "rules-syntax" and d.span.col == 18
    err = errors_of(tmp_path, 'rule Bad-Id when a error "m"\n')
    assert err.diagnostics[0].span.col == 6


def test_unknown_function_and_arity(tmp_path):
    err = errors_of(tmp_path, 'rule x when lenn(a) > 1 or divides(a) error "m"\n')
    codes = [d.code for d in err.diagnostics]
    assert codes == ["rules-unknown-function", "rules-arity"]
    assert "did you mean 'len'" in err.diagnostics[0].help[0]
    assert err.diagnostics[0].span.col == 13


def test_bad_message_interpolation(tmp_path):
    err = errors_of(tmp_path, 'rule x when a error "bad {a +}"\n')
    assert err.diagnostics[0].code == "rules-bad-message"
    err = errors_of(tmp_path, 'rule x when a error "bad {a"\n')
    assert err.diagnostics[0].code == "rules-bad-message"


def test_unknown_fields_checked_against_known_with_did_you_mean(tmp_path):
    write(tmp_path, "ok.rules", EXAMPLE)
    assert len(load_rules(tmp_path, KNOWN)) == 2
    err = errors_of(
        tmp_path,
        'rule x\n  when trainer.expert_paralel > 1\n  error "{inference.gpu}"\n  at trainer.gpu\n',
        KNOWN,
    )
    ds = err.diagnostics
    assert [d.code for d in ds] == ["rules-unknown-field"] * 3
    assert ds[0].span == Span(str(tmp_path / "bad.rules"), 2, 8, 2, 30)
    assert "trainer.expert_parallel" in ds[0].help[0]
    assert ds[1].span.line == 4 and "trainer.gpus" in ds[1].help[0]
    assert ds[2].span.line == 3 and "inference.gpus" in ds[2].help[0]
    # A table prefix of known fields is a valid path (e.g. `len(judges)`).
    (tmp_path / "bad.rules").write_text('rule y when len(trainer) > 0 error "m"\n')
    load_rules(tmp_path, KNOWN)


def test_all_errors_reported_at_once(tmp_path):
    write(tmp_path, "a.rules", 'rule a when lenn(x) error "m"\n')
    err = errors_of(tmp_path, 'rule b\n  area "x"\n')
    assert len(err.diagnostics) == 3


def test_digest_is_stable_and_content_addressed(tmp_path):
    d1, d2 = tmp_path / "one", tmp_path / "two"
    d1.mkdir()
    d2.mkdir()
    for d in (d1, d2):
        write(d, "b.rules", 'rule b when x error "m"\n')
        write(d, "a.rules", EXAMPLE)
    r1, r2 = load_rules(d1), load_rules(d2)
    assert r1.digest == r2.digest and len(r1.digest) == 64
    assert r1.ids == ("trainer-parallelism", "gpus-divisible", "b")  # files sorted by name
    write(d2, "b.rules", 'rule b when x error "n"\n')
    assert load_rules(d2).digest != r1.digest
    (d2 / "b.rules").rename(d2 / "c.rules")
    write(d2, "c.rules", 'rule b when x error "m"\n')
    assert load_rules(d2).digest != r1.digest  # names are part of the digest
    assert load_rules(d1 / "a.rules").digest != r1.digest


def test_missing_path_is_a_diagnostic(tmp_path):
    with pytest.raises(DiagnosticError) as exc:
        load_rules(tmp_path / "nope")
    assert exc.value.diagnostics[0].code == "rules-io"


def test_rules_mentioning_and_format_rule():
    rules, _ = parse_rules_text(EXAMPLE, "moe.rules")
    assert [r.id for r in rules_mentioning(rules, "trainer.gpus")] == ["gpus-divisible"]
    assert len(rules_mentioning(rules, "trainer")) == 2
    assert rules_mentioning(rules, "inference.gpus") == []
    text = format_rule(rules[0])
    assert text.splitlines()[0] == "rule trainer-parallelism  (error, area: MoE training)"
    assert "defined at moe.rules:2:6" in text
    assert "when      trainer.tensor_parallel > 1 or" in text
    assert "why       OLMo-core's GRPO path" in text


def test_condition_text_is_canonical():
    r = one('not (a.b  in [1,2,"x"])\n   and c is not set or -d // 2 >= len(e)')
    assert r.condition == 'not (a.b in [1, 2, "x"]) and c is not set or -d // 2 >= len(e)'
    # Re-parsing the canonical text gives the same text.
    assert one(r.condition).condition == r.condition


def test_cached_parser_matches_a_fresh_lark_build():
    import lark

    from compiler.rules.loader import GRAMMAR, START, _parser

    fresh = lark.Lark(GRAMMAR.read_text(), parser="lalr", lexer="contextual", start=START)
    for sample in (EXAMPLE, 'rule x when a.b is not set and -c // 2 in [1, "s"] warning "w"'):
        assert (
            fresh.parse(sample, start="start").pretty()
            == _parser().parse(sample, start="start").pretty()
        )
    assert _parser().parse("a + 1 > 2", start="expr").data == "compare"


def test_a_fresh_process_loads_80_rules_from_the_disk_cache_without_parsing(tmp_path, monkeypatch):
    """The disk cache is what keeps a cold compile fast (timed in benchmarks/, not here)."""
    text = "\n".join(
        f'rule r{i}\n  area "x"\n  when trainer.gpus > {i} and (inference.engine in ["sglang", "embedded"]'
        f' or not divides(2, trainer.gpus))\n  warning "g {{trainer.gpus}}"\n  at trainer.gpus\n'
        for i in range(80)
    )
    from compiler.rules import loader

    write(tmp_path, "many.rules", text)
    first = load_rules(tmp_path, KNOWN)  # parses and fills the on-disk cache
    loader._PARSE_CACHE.clear()  # a fresh process: only the disk cache is warm

    def no_parsing(*args, **kwargs):
        raise AssertionError("a warm disk cache must not parse the rules text again")

    monkeypatch.setattr(loader, "parse_rules_text", no_parsing)
    monkeypatch.setattr(loader, "_sa", no_parsing)
    rs = load_rules(tmp_path, KNOWN)
    view = MappingView({"trainer": {"gpus": 40}, "inference": {"engine": "sglang"}})
    assert rs.digest == first.digest
    assert len(evaluate(rs, view)) == len(evaluate(first, view)) == 40


def test_source_map_rendering_smoke(tmp_path):
    # SourceMap from the DiagnosticError is keyed by the file path used in spans.
    err = errors_of(tmp_path, "rule x when a error\n")
    sources: SourceMap = err.sources  # type: ignore[attr-defined]
    assert str(tmp_path / "bad.rules") in sources.texts


@pytest.fixture(autouse=True)
def _private_rules_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("RLC_CACHE_DIR", str(tmp_path_factory.mktemp("rlc-cache")))


def test_disk_cache_round_trips_rules(tmp_path):
    from compiler.rules import loader

    write(
        tmp_path,
        "a.rules",
        EXAMPLE + '\nrule c when -x // 2 in [1, "s"] and y is not set error "{x}"\n',
    )
    fresh = load_rules(tmp_path)
    loader._PARSE_CACHE.clear()
    cached = load_rules(tmp_path)  # from the JSON cache written by the first load
    assert [loader.rule_to_record(r) for r in cached] == [loader.rule_to_record(r) for r in fresh]
    view = MappingView({"trainer": {"gpus": 3, "expert_parallel": 2}, "x": -2})
    assert [f.message for f in evaluate(cached, view)] == [f.message for f in evaluate(fresh, view)]
    entries = list((Path(os.environ["RLC_CACHE_DIR"]) / "derived" / "rules").glob("*.bin"))
    assert len(entries) >= 1
    # A corrupt cache entry falls back to parsing.
    for f in entries:
        f.write_bytes(f.read_bytes()[:-3] + b"!!!")
    loader._PARSE_CACHE.clear()
    assert load_rules(tmp_path).ids == fresh.ids


def test_language_reference_lists_every_function():
    from compiler.rules import FUNCTIONS, language_reference

    text = language_reference()
    assert all(f"| `{name}` |" in text for name in FUNCTIONS)
    assert "is not set" in text
