"""`rlc explain`: a field, a rule, a native option, or a manifest value's provenance chain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compiler.diagnostics import Diagnostic, DiagnosticError, suggest
from compiler.emit.reference import FieldDoc, alias_targets, catalog, lookup
from contract.safe_read import SPEC_LIMIT, read_regular


def _rules() -> Any:
    from compiler.resources import rules_dir
    from compiler.rules import load_rules

    return load_rules(rules_dir())


def explain_field(doc: FieldDoc, via_alias: str | None = None) -> str:
    from compiler.rules import rules_mentioning

    lines = [f"{doc.path}  ({doc.type})"]
    if via_alias:
        lines.append(f"  `{via_alias}` is an alias of this field")
    lines.append(f"  {doc.description}")
    if doc.required:
        lines.append("  default:     required")
    elif doc.derived:
        lines.append(f"  default:     derived: {doc.derived}")
    else:
        lines.append(f"  default:     {json.dumps(doc.default, sort_keys=True)}")
    if doc.choices:
        lines.append("  choices:     " + ", ".join(json.dumps(c) for c in doc.choices))
    if doc.constraints:
        lines.append("  constraints: " + "; ".join(doc.constraints))
    if doc.aliases:
        lines.append("  aliases:     " + ", ".join(doc.aliases))
    if doc.note:
        lines.append(f"  note:        {doc.note}")
    lines.extend(_variant_lines(doc.path))
    lines.extend(_consumer_lines(doc.path))
    rules = rules_mentioning(_rules(), doc.path.replace("[]", ".0"))
    if rules:
        lines.append("  rules:")
        for rule in rules:
            lines.append(f"    {rule.id:<34} {rule.severity:<8} {rule.message}")
        lines.append("  (`rlc explain RULE-ID` shows a rule in full)")
    return "\n".join(lines)


def _consumer_lines(path: str) -> list[str]:
    """What makes the field take effect (the consumption registry, compiler/spec/consumers.py)."""
    from compiler.spec.consumers import CONSUMERS

    key = path.replace("[]", ".[]")
    for placeholder in (".NAME.", ".VERIFIER.", ".KEY."):
        key = key.replace(placeholder, ".*.")
    uses = CONSUMERS.get(key, ())
    words = {
        "runtime": "read by",
        "cli": "read by the command line in",
        "argv": "engine command line from",
        "beaker": "Beaker spec from",
        "template": "Beaker spec template",
        "compile": "compile-time only:",
        "rule": "unsupported values rejected by rule",
        "owner": "pending:",
    }
    out = []
    for use in uses:
        kind, _, rest = use.partition(":")
        out.append(f"  effect:      {words.get(kind, kind)} {rest}")
    return out


def _variant_lines(path: str) -> list[str]:
    """Every variant of a discriminated section (``judges``: managed / external), with the
    keys each one takes; nothing for other fields."""
    import typing

    from pydantic import BaseModel

    from compiler.emit.reference import _list_models, _map_value_models, _submodels
    from compiler.spec import Spec

    model: Any = Spec
    info = None
    parts = [p for p in path.replace("[]", "").split(".") if p not in ("NAME", "VERIFIER", "KEY")]
    for i, part in enumerate(parts):
        fields = model.model_fields
        match = next((f for n, f in fields.items() if (f.alias or n) == part), None)
        if match is None:
            return []
        info = match
        subs = (
            _submodels(info.annotation)
            or _map_value_models(info.annotation)
            or _list_models(info.annotation)
        )
        if len(subs) != 1:
            if i != len(parts) - 1:
                return []  # a key inside one variant: its own doc says enough
            break
        model = subs[0]
    if info is None:
        return []
    variants = (
        _submodels(info.annotation)
        or _map_value_models(info.annotation)
        or _list_models(info.annotation)
    )
    if len(variants) < 2:
        return []
    lines = ["  variants:"]
    for v in variants:
        assert issubclass(v, BaseModel)
        tags = [
            f"{n} = {json.dumps(typing.get_args(f.annotation)[0])}"
            for n, f in v.model_fields.items()
            if typing.get_origin(f.annotation) is typing.Literal
            and len(typing.get_args(f.annotation)) == 1
            and f.is_required()
        ]
        keys = ", ".join(f.alias or n for n, f in v.model_fields.items())
        lines.append(f"    {' '.join(tags) or v.__name__}: {keys}")
    return lines


def explain_name(name: str) -> str:
    """A field path, a rule id or a native option; unknown names get suggestions."""
    from compiler.rules import format_rule

    if name.startswith(("native.sglang.", "native.olmo_core.")):
        from compiler.spec.native_options import explain_native

        _, tool, key = name.split(".", 2)
        return explain_native(tool, key)
    ruleset = _rules()
    rule = ruleset.get(name)
    if rule is not None:
        return format_rule(rule)
    doc = lookup(name)
    if doc is not None:
        return explain_field(doc)
    target = alias_targets().get(name)
    if target is not None:
        found = lookup(target)
        if found is not None:
            return explain_field(found, via_alias=name)
    candidates = [*catalog(), *ruleset.ids, *alias_targets()]
    hints = suggest(name, candidates, n=4)
    raise DiagnosticError(
        Diagnostic(
            "error",
            "explain-unknown",
            f"{name!r} is neither a spec field nor a rule id",
            help=(f"did you mean {' or '.join(repr(h) for h in hints)}?",)
            if hints
            else ("`rlc docs` lists every field in docs/configuration.md",),
        )
    )


def _span_text(span: dict[str, Any] | None) -> str:
    if not span:
        return "?"
    return f"{span.get('file')}:{span.get('line')}:{span.get('column')}"


def _source_line(manifest_path: Path, source: dict[str, Any], span: dict[str, Any]) -> str | None:
    """The spec line a span points at, read only from a file the manifest names.

    A span may name the compiled spec (``source.path``, looked up relative to the working
    directory and to the manifest) or a catalog recipe; the file is read only when its
    sha256 is the one recorded at compile time, so a manifest cannot make `explain` print
    another file (``/proc/self/environ``, a key) by naming it in a span.
    """
    import hashlib

    file = span.get("file")
    line = span.get("line")
    if not isinstance(file, str) or not isinstance(line, int):
        return None
    candidates: list[Path] = []
    expected = None
    if file == source.get("path"):
        expected = source.get("sha256")
        p = Path(file)
        candidates = [p] if p.is_absolute() else [Path.cwd() / p, manifest_path.parent / p]
    elif file.startswith("recipe ") and file[7:] == source.get("recipe"):
        from compiler.resources import recipes_dir

        rdir = recipes_dir()
        if file[7:] in {r.stem for r in rdir.glob("*.toml")}:
            expected = source.get("recipe_sha256")
            candidates = [rdir / f"{file[7:]}.toml"]
    for candidate in candidates:
        try:
            data = read_regular(candidate, SPEC_LIMIT)
        except OSError:
            continue
        if not isinstance(expected, str) or hashlib.sha256(data).hexdigest() != expected:
            continue
        lines = data.decode("utf-8", errors="replace").splitlines()
        if 1 <= line <= len(lines):
            return lines[line - 1].strip()
    return None


def _value_at(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(path)
    return node


def explain_manifest_field(manifest_path: Path, field: str) -> str:
    from compiler.manifest.manifest import load_manifest

    manifest = load_manifest(manifest_path)
    config, provenance = manifest["config"], manifest["provenance"]
    try:
        value = _value_at(config, field)
    except KeyError:
        hints = suggest(field, [*provenance, *catalog()], n=4)
        raise DiagnosticError(
            Diagnostic(
                "error",
                "explain-unknown",
                f"{manifest_path}: no field {field!r} in this manifest",
                help=(f"did you mean {' or '.join(repr(h) for h in hints)}?",) if hints else (),
            )
        ) from None
    overrides = manifest["source"].get("overrides", [])
    lines = [f"{field} = {json.dumps(value, sort_keys=True)}"]
    seen: set[str] = set()

    def chain(path: str, depth: int) -> None:
        pad = "  " * depth
        if path in seen:
            lines.append(f"{pad}{path}: (see above)")
            return
        seen.add(path)
        prov = provenance.get(path)
        try:
            shown = json.dumps(_value_at(config, path), sort_keys=True)
        except KeyError:
            shown = "?"
        if prov is None:
            lines.append(f"{pad}{path} = {shown}: no provenance recorded")
            return
        kind = prov.get("kind")
        span = prov.get("span")
        if kind == "derived":
            lines.append(f"{pad}{path} = {shown}: derived by `{prov.get('formula')}`")
            for inp in prov.get("inputs", []):
                chain(inp, depth + 1)
        elif kind == "default":
            lines.append(f"{pad}{path} = {shown}: default of the schema")
        elif kind == "override":
            text = ""
            if span and str(span.get("file", "")).startswith("override "):
                idx = int(str(span["file"]).split()[1]) - 1
                if 0 <= idx < len(overrides):
                    text = f" `--set {overrides[idx]}`"
            lines.append(f"{pad}{path} = {shown}: {_span_text(span)}{text}")
        else:
            where = f"recipe {prov.get('recipe')} at " if kind == "recipe" else "spec at "
            lines.append(f"{pad}{path} = {shown}: {where}{_span_text(span)}")
            if span:
                src = _source_line(manifest_path, manifest["source"], span)
                if src:
                    lines.append(f"{pad}    | {src}")
        if prov.get("alias"):
            lines.append(f"{pad}    written as alias `{prov['alias']}`")
        for note in prov.get("notes", []):
            lines.append(f"{pad}    note: {note}")

    chain(field, 1)
    return "\n".join(lines)
