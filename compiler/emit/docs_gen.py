"""Generated reference files: docs/configuration.md, the rule table in docs/support.md,
schemas/spec.schema.json and schemas/manifest.schema.json.

`generate()` returns path -> text; `rlc docs` writes them, `rlc docs --check` compares.
Everything here is a pure function of the spec models and the rule files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jinja2

from compiler.emit.reference import FieldDoc, catalog

SUPPORT_BEGIN = "<!-- BEGIN GENERATED RULE TABLE (rlc docs) -->"
SUPPORT_END = "<!-- END GENERATED RULE TABLE -->"
SECTION_ORDER = (
    "",
    "model",
    "data",
    "output",
    "launch",
    "training",
    "trainer",
    "inference",
    "optimizer",
    "async",
    "checkpoint",
    "rewards",
    "environment",
    "teacher",
    "distillation",
    "judges",
    "rubrics",
    "judging",
    "evaluation",
    "tracking",
    "compiler_cache",
    "runtime",
    "native",
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _fmt_default(doc: FieldDoc) -> str:
    if doc.required:
        return "**required**"
    if doc.derived:
        return "*derived*"
    if doc.default is None:
        return "unset"
    if doc.default in ({}, []):
        return "empty"
    return _cell(f"`{json.dumps(doc.default, sort_keys=True)}`")


def _extra(doc: FieldDoc, rules_by_field: dict[str, list[str]]) -> str:
    parts = []
    if doc.choices:
        parts.append("one of " + ", ".join(f"`{json.dumps(c)}`" for c in doc.choices))
    if doc.constraints:
        parts.append("; ".join(doc.constraints))
    if doc.derived:
        parts.append(f"derived: {doc.derived}")
    if doc.aliases:
        parts.append("aliases: " + ", ".join(f"`{a}`" for a in doc.aliases))
    rules = rules_by_field.get(doc.path)
    if rules:
        parts.append("rules: " + ", ".join(f"`{r}`" for r in rules))
    if doc.note:
        parts.append(doc.note)
    return "".join(f"<br>{_cell(p)}" for p in parts)


def _rules_by_field() -> tuple[dict[str, list[str]], Any]:
    from compiler.resources import rules_dir
    from compiler.rules import load_rules, rules_mentioning

    ruleset = load_rules(rules_dir())
    out: dict[str, list[str]] = {}
    for path in catalog():
        concrete = path.replace("[]", ".0")
        names = [r.id for r in rules_mentioning(ruleset, concrete)]
        # a table row lists only the rules that name it directly
        if names:
            out[path] = [n for n in names if _names_directly(ruleset, n, concrete)]
    return out, ruleset


def _names_directly(ruleset: Any, rule_id: str, path: str) -> bool:
    for rule in ruleset:
        if rule.id == rule_id:
            return any(m == path or m.startswith(path + ".") for m in rule.fields_mentioned)
    return False


def configuration_md() -> str:
    rules_by_field, ruleset = _rules_by_field()
    cat = catalog()
    sections = []
    from compiler.spec import Spec

    top = Spec.model_fields
    for name in SECTION_ORDER:
        if name == "":
            fields = [
                d for d in cat.values() if "." not in d.path and d.path not in _section_names()
            ]
            title, description = "top level", "Keys at the top of the file."
        else:
            fields = [d for d in cat.values() if d.path.startswith(name + ".")]
            info = top.get("async_" if name == "async" else name)
            title = f"[{name}]" if name not in ("judges", "rubrics") else f"[{name}.NAME]"
            description = (info.description or "") if info else ""
        rows = [
            {
                "path": d.path,
                "type": _cell(d.type),
                "default": _fmt_default(d),
                "description": _cell(d.description),
                "extra": _extra(d, rules_by_field),
            }
            for d in fields
        ]
        anchor = title.strip("[]").replace(".", "").replace(" ", "-").lower()
        sections.append(
            {"title": title, "anchor": anchor, "description": description, "fields": rows}
        )
    env = _jinja()
    text = env.get_template("configuration.md.j2").render(
        sections=sections, rules_digest="sha256:" + ruleset.digest, rule_count=len(ruleset.rules)
    )
    return text.rstrip() + "\n"


def _section_names() -> set[str]:
    return {n for n in SECTION_ORDER if n}


def _jinja() -> jinja2.Environment:
    from compiler.resources import templates_dir

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "docs")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def rule_table_md() -> str:
    from compiler.resources import rules_dir
    from compiler.rules import load_rules

    ruleset = load_rules(rules_dir())
    lines = [
        SUPPORT_BEGIN,
        "",
        f"Rule set digest `sha256:{ruleset.digest}`. `rlc explain RULE-ID` shows one in full.",
        "",
        "| rule | area | severity | when | message |",
        "|---|---|---|---|---|",
    ]
    for rule in sorted(ruleset.rules, key=lambda r: (r.area, r.id)):
        lines.append(
            f"| `{rule.id}` | {_cell(rule.area)} | {rule.severity} | "
            f"`{_cell(rule.condition)}` | {_cell(rule.message)} |"
        )
    lines += ["", SUPPORT_END]
    return "\n".join(lines)


def support_md(current: str) -> str:
    """docs/support.md with its generated rule table replaced (hand-written text kept)."""
    table = rule_table_md()
    if SUPPORT_BEGIN in current and SUPPORT_END in current:
        head, rest = current.split(SUPPORT_BEGIN, 1)
        _, tail = rest.split(SUPPORT_END, 1)
        return head + table + tail
    sep = "" if current.endswith("\n\n") or not current else "\n"
    return current + sep + "\n## Rules\n\n" + table + "\n"


def spec_schema() -> dict[str, Any]:
    from compiler.manifest.manifest import spec_json_schema

    schema = dict(spec_json_schema())
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://rlc.dev/schemas/spec.schema.json"
    schema["title"] = "rlc run spec (schema_version = 1)"
    return schema


def manifest_schema() -> dict[str, Any]:
    """The manifest's shape; ``config`` is checked against the spec schema's definitions."""
    spec = spec_schema()
    defs = dict(spec.get("$defs", {}))
    spec_root = {k: v for k, v in spec.items() if k not in ("$defs", "$schema", "$id", "title")}
    # resolved configs carry every field, so the spec's "required" is only a floor
    defs["Spec"] = spec_root
    digest = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}
    obj = {"type": "object"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://rlc.dev/schemas/manifest.schema.json",
        "title": "rlc manifest (manifest_version = 1)",
        "type": "object",
        "required": [
            "manifest_version",
            "schema_version",
            "name",
            "digest",
            "compiler",
            "source",
            "config",
            "provenance",
            "plan",
            "commands",
            "runtime_lock",
            "paths",
        ],
        "properties": {
            "manifest_version": {"const": 1},
            "schema_version": {"const": 1},
            "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]*$"},
            "digest": digest,
            "compiler": {
                "type": "object",
                "required": ["version", "schema_digest", "rules_digest"],
                "properties": {
                    "version": {"type": "string"},
                    "schema_digest": digest,
                    "rules_digest": digest,
                },
            },
            "source": {
                "type": "object",
                "required": ["path", "sha256", "overrides"],
                "properties": {
                    "path": {"type": "string"},
                    "sha256": {"type": "string"},
                    "overrides": {"type": "array", "items": {"type": "string"}},
                },
            },
            "config": {"$ref": "#/$defs/Spec"},
            "provenance": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "required": ["kind"],
                    "properties": {
                        "kind": {
                            "enum": ["spec", "override", "recipe", "default", "derived", "alias"]
                        }
                    },
                },
            },
            "plan": {
                "type": "object",
                "required": ["placement", "batch", "lengths"],
                "properties": {"placement": obj, "batch": obj, "lengths": obj},
            },
            "commands": {
                "type": "object",
                "required": ["engine_argv", "trainer_argv"],
                "properties": {
                    "engine_argv": {"type": "array"},
                    "trainer_argv": {"type": "array"},
                    "router_argv": {"type": "array"},
                    "teacher_argv": {"type": "array"},  # on-policy distillation only
                    "engine_env": {"type": "array"},
                    "teacher_env": obj,
                    "evaluator_argv": {"type": "array"},  # background evaluation only
                    "judges": obj,  # managed judges: name -> {argv, env}
                    "trainer_rank": obj,  # several trainer ranks only
                },
            },
            "runtime_lock": obj,
            "paths": obj,
            "facts": obj,
            "warnings": {"type": "array"},
        },
        "additionalProperties": False,
        "$defs": defs,
    }


def _json_text(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def generate(root: Path) -> dict[Path, str]:
    """Every generated file under ``root`` (a checkout) with its up-to-date text."""
    support_path = root / "docs" / "support.md"
    current = support_path.read_text(encoding="utf-8") if support_path.exists() else ""
    return {
        root / "docs" / "configuration.md": configuration_md(),
        support_path: support_md(current),
        root / "schemas" / "spec.schema.json": _json_text(spec_schema()),
        root / "schemas" / "manifest.schema.json": _json_text(manifest_schema()),
    }


def stale(root: Path) -> list[Path]:
    out = []
    for path, text in generate(root).items():
        try:
            if path.read_text(encoding="utf-8") != text:
                out.append(path)
        except OSError:
            out.append(path)
    return out
