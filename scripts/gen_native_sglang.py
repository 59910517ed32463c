#!/usr/bin/env python3
"""Write schemas/native/sglang.json: the pinned SGLang release's server options, read statically.

    pip download --no-deps sglang==0.5.23 -d /tmp/sgl
    python scripts/gen_native_sglang.py /tmp/sgl/sglang-0.5.23-*.whl

The argument is the wheel, an unpacked tree holding ``sglang/``, or the path of
``sglang/srt/server_args.py`` inside one. Nothing from SGLang is imported: the files are
parsed with ``ast``. In 0.5.x ``ServerArgs`` is assembled from namespace classes listed in
``server_args._INPUT_NAMESPACES`` (``arg_groups/fields/*.py``), whose fields are annotated
``A[T, "help"]`` or ``A[T, Arg(help=..., choices=..., cli_name=..., aliases=...)]``; a few
options are registered by hand with ``parser.add_argument`` in ``ServerArgs.add_cli_args``.
Both are read here, mirroring ``arg_groups/arg_utils.add_cli_args_from_dataclass``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path
from typing import Any

PIN = "0.5.23"
PKG = "sglang/srt"
OUT = Path(__file__).resolve().parents[1] / "schemas" / "native" / "sglang.json"


class Source:
    """Read files of the sglang package from a wheel or a directory."""

    def __init__(self, arg: str):
        p = Path(arg)
        self.zip: zipfile.ZipFile | None = None
        self.root: Path | None = None
        if p.is_file() and p.suffix == ".whl":
            self.zip = zipfile.ZipFile(p)
        elif p.is_file() and p.name == "server_args.py":
            self.root = p.parents[2]  # .../sglang/srt/server_args.py -> parent of sglang/
        elif (p / "sglang").is_dir():
            self.root = p
        else:
            raise SystemExit(f"{arg}: not a wheel, a tree holding sglang/, or server_args.py")
        self.digests: dict[str, str] = {}

    def read(self, rel: str) -> str:
        if self.zip is not None:
            data = self.zip.read(rel)
        else:
            assert self.root is not None
            data = (self.root / rel).read_bytes()
        self.digests[rel] = hashlib.sha256(data).hexdigest()
        return data.decode("utf-8")

    def version(self) -> str | None:
        if self.zip is not None:
            for name in self.zip.namelist():
                m = re.match(r"sglang-([^/]+)\.dist-info/METADATA$", name)
                if m:
                    return m.group(1)
        return None


def module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def literal(node: ast.AST | None, consts: dict[str, Any]) -> tuple[bool, Any]:
    """(ok, value) for a literal, a named module constant, list concatenation or arithmetic."""
    if node is None:
        return True, None
    try:
        value = ast.literal_eval(node)
        return True, sorted(value) if isinstance(value, set | frozenset) else value
    except (ValueError, SyntaxError, TypeError):
        pass
    if isinstance(node, ast.Name) and node.id in consts:
        return True, consts[node.id]
    if isinstance(node, ast.BinOp):
        ok_l, left = literal(node.left, consts)
        ok_r, right = literal(node.right, consts)
        if ok_l and ok_r:
            try:
                if isinstance(node.op, ast.Add):
                    return True, left + right
                if isinstance(node.op, ast.Mult):
                    return True, left * right
            except TypeError:
                return False, None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("list", "set", "frozenset", "sorted", "tuple")
        and len(node.args) == 1
    ):
        ok, v = literal(node.args[0], consts)
        if ok and isinstance(v, list | tuple | set | frozenset):
            if isinstance(v, set | frozenset) or node.func.id == "sorted":
                return True, sorted(v)
            return True, list(v)
    # msgspec.field(default_factory=list) / dataclasses.field(default_factory=dict)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "field"
    ):
        for kw in node.keywords:
            factory = kw.value if kw.arg == "default_factory" else None
            if isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
                return True, [] if factory.id == "list" else {}
            if kw.arg == "default":
                return literal(kw.value, consts)
    return False, None


def text_of(node: ast.AST | None, consts: dict[str, Any]) -> str:
    """Help text: a string, an f-string (placeholders kept as {expr}), or a concatenation."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                out.append("{" + ast.unparse(v.value) + "}")
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return text_of(node.left, consts) + text_of(node.right, consts)
    if isinstance(node, ast.Name) and isinstance(consts.get(node.id), str):
        return str(consts[node.id])
    return ""


def module_constants(tree: ast.Module, imported: dict[str, Any]) -> dict[str, Any]:
    consts = dict(imported)
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                ok, v = literal(stmt.value, consts)
                if ok:
                    consts[target.id] = v
    return consts


def split_optional(t: ast.AST) -> tuple[ast.AST, bool]:
    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "Optional":
        return t.slice, True
    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "Union":
        elts = list(t.slice.elts) if isinstance(t.slice, ast.Tuple) else [t.slice]
        rest = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is None)]
        if len(rest) == 1:
            return rest[0], len(rest) != len(elts)
    if isinstance(t, ast.BinOp) and isinstance(t.op, ast.BitOr):
        parts = [t.left, t.right]
        rest = [p for p in parts if not (isinstance(p, ast.Constant) and p.value is None)]
        if len(rest) == 1:
            return rest[0], True
    return t, False


SCALARS = {"bool": "bool", "int": "int", "float": "float", "str": "str"}


def kind_of(t: ast.AST, type_parser: str | None) -> dict[str, Any]:
    """Our option kind: bool | int | float | str | list (items) | json, plus Literal choices."""
    inner, nullable = split_optional(t)
    out: dict[str, Any] = {"python_type": ast.unparse(t), "nullable": nullable}
    if type_parser == "human_readable_int":
        out["type"] = "int"
        return out
    if type_parser in ("json.loads",):
        out["type"] = "json"
        return out
    if type_parser == "json_list_type":
        out["type"] = "list"
        out["items"] = "json"
        out["json_list"] = True
        return out
    if isinstance(inner, ast.Name) and inner.id in SCALARS:
        out["type"] = SCALARS[inner.id]
        return out
    if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name):
        head = inner.value.id
        if head == "Literal":
            vals = ast.literal_eval(inner.slice)
            vals = list(vals) if isinstance(vals, tuple) else [vals]
            if None in vals:
                out["nullable"] = True
            vals = [v for v in vals if v is not None]
            out["type"] = "int" if vals and all(isinstance(v, int) for v in vals) else "str"
            out["literal_choices"] = vals
            return out
        if head in ("List", "list"):
            item = inner.slice
            out["type"] = "list"
            out["items"] = SCALARS.get(item.id, "str") if isinstance(item, ast.Name) else "str"
            return out
    out["type"] = "str" if type_parser in (None, "nullable_str") else "json"
    if not (isinstance(inner, ast.Name) and inner.id == "str"):
        out["type"] = "json" if type_parser != "nullable_str" else "str"
    return out


def arg_meta(meta: ast.AST, consts: dict[str, Any]) -> dict[str, Any]:
    if isinstance(meta, ast.Constant) and isinstance(meta.value, str):
        return {"help": meta.value}
    if isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
        out: dict[str, Any] = {}
        for kw in meta.keywords:
            if kw.arg == "help":
                out["help"] = text_of(kw.value, consts)
            elif kw.arg == "choices":
                ok, v = literal(kw.value, consts)
                out["choices"] = list(v) if ok and v is not None else None
                out["choices_dynamic"] = not ok
            elif kw.arg in ("cli_name", "nargs", "no_cli"):
                out[kw.arg] = ast.literal_eval(kw.value)
            elif kw.arg == "aliases":
                out["aliases"] = list(ast.literal_eval(kw.value))
            elif kw.arg == "type_parser":
                out["type_parser"] = ast.unparse(kw.value)
            elif kw.arg == "action":
                out["action"] = ast.unparse(kw.value)
        return out
    return {}


def field_options(src: Source, module: str, cls_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cli options, all field defaults/kinds) for one namespace class."""
    rel = module_file(module)
    tree = ast.parse(src.read(rel))
    imported: dict[str, Any] = {}
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.ImportFrom)
            and stmt.module
            and stmt.module.endswith("arg_groups.choices")
        ):
            ctree = ast.parse(src.read(module_file(stmt.module)))
            cconsts = module_constants(ctree, {})
            for alias in stmt.names:
                if alias.name in cconsts:
                    imported[alias.asname or alias.name] = cconsts[alias.name]
    consts = module_constants(tree, imported)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name)
    namespace = cls_name
    options: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign):
            t = stmt.targets[0]
            if isinstance(t, ast.Name) and t.id == "_NS_PATH":
                namespace = ast.literal_eval(stmt.value)
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        ok, default = literal(stmt.value, consts)
        ann = stmt.annotation
        meta: dict[str, Any] | None = None
        typ = ann
        if (
            isinstance(ann, ast.Subscript)
            and isinstance(ann.value, ast.Name)
            and ann.value.id == "A"
        ):
            elts = list(ann.slice.elts) if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            typ = elts[0]
            for m in elts[1:]:
                got = arg_meta(m, consts)
                if got:
                    meta = got
                    break
        kind = kind_of(typ, meta.get("type_parser") if meta else None)
        entry: dict[str, Any] = {"namespace": namespace, **kind}
        if ok:
            entry["default"] = default
        elif stmt.value is not None:
            entry["default"] = None
            entry["default_expr"] = ast.unparse(stmt.value)
        else:
            entry["required"] = True
        fields[name] = entry
        if meta is None or meta.get("no_cli") or name.startswith("_"):
            continue
        action = meta.get("action")
        if action and action not in ("argparse.BooleanOptionalAction",):
            entry["action"] = action
        cli = meta.get("cli_name") or "--" + name.replace("_", "-")
        opt = dict(entry)
        opt["flag"] = cli
        opt["aliases"] = meta.get("aliases") or []
        opt["help"] = meta.get("help", "")
        choices = meta.get("choices") or kind.get("literal_choices")
        opt["choices"] = choices
        if meta.get("choices_dynamic") and not kind.get("literal_choices"):
            opt["choices_dynamic"] = True
        if meta.get("nargs"):
            opt["nargs"] = meta["nargs"]
        elif opt["type"] == "list" and not opt.get("json_list"):
            opt["nargs"] = "+"
        opt["negatable"] = action == "argparse.BooleanOptionalAction"
        opt.pop("literal_choices", None)
        options[name] = opt
    return options, fields


def manual_arguments(
    tree: ast.Module, fields: dict[str, Any], consts: dict[str, Any]
) -> dict[str, Any]:
    """Options registered by hand in ServerArgs.add_cli_args (dynamic choices, deprecations)."""
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    local = dict(consts)
    for stmt in ast.walk(fn):
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name):
            ok, v = literal(stmt.value, local)
            if ok:
                local[stmt.targets[0].id] = v
    out: dict[str, Any] = {}
    for node in ast.walk(fn):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_argument"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            continue
        flag = str(node.args[0].value)
        kws = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        dest = str(
            ast.literal_eval(kws["dest"]) if "dest" in kws else flag.lstrip("-").replace("-", "_")
        )
        if flag == "--config":
            continue
        base = dict(
            fields.get(dest, {"namespace": "server_args", "python_type": "", "nullable": False})
        )
        action = ast.unparse(kws["action"]) if "action" in kws else None
        help_text = text_of(kws.get("help"), local)
        deprecated = bool(action and action.startswith("Deprecated")) or help_text.lstrip(
            "("
        ).startswith("Deprecated")
        if action in ("store_true", "'store_true'", "DeprecatedStoreTrueAction") or (
            action and "StoreTrue" in action
        ):
            base["type"] = "bool"
        elif "type" not in base:
            t = ast.unparse(kws["type"]) if "type" in kws else "str"
            base["type"] = SCALARS.get(t, "str")
        ok, choices = literal(kws.get("choices"), local) if "choices" in kws else (True, None)
        opt = {
            **base,
            "flag": flag,
            "aliases": [],
            "help": help_text,
            "choices": sorted(choices)
            if isinstance(choices, set)
            else (list(choices) if choices else None),
            "negatable": False,
        }
        if "choices" in kws and not ok:
            opt["choices_dynamic"] = True
        if deprecated:
            opt["deprecated"] = True
        opt.pop("literal_choices", None)
        out[dest if dest not in out else flag.lstrip("-").replace("-", "_")] = opt
    return out


def generate(arg: str) -> dict[str, Any]:
    src = Source(arg)
    sa_rel = f"{PKG}/server_args.py"
    tree = ast.parse(src.read(sa_rel))
    imports: dict[str, str] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module:
            for alias in stmt.names:
                imports[alias.asname or alias.name] = stmt.module
    namespaces: list[str] = []
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id == "_INPUT_NAMESPACES"
        ):
            namespaces = [e.id for e in stmt.value.elts]  # type: ignore[attr-defined]
    if not namespaces:
        raise SystemExit("server_args.py has no _INPUT_NAMESPACES list; unsupported sglang layout")
    options: dict[str, Any] = {}
    fields: dict[str, Any] = {}
    for ns in namespaces:
        o, f = field_options(src, imports[ns], ns)
        options.update(o)
        fields.update(f)
    choice_consts: dict[str, Any] = {}
    ctree = ast.parse(src.read(f"{PKG}/arg_groups/choices.py"))
    choice_consts = module_constants(ctree, {})
    for dest, opt in manual_arguments(tree, fields, choice_consts).items():
        if dest in options and not opt.get("deprecated"):
            options[dest] = {
                **options[dest],
                **{k: v for k, v in opt.items() if v not in (None, "")},
            }
        elif dest not in options:
            options[dest] = opt
    for opt in options.values():
        opt.setdefault("choices", None)
        opt.setdefault("deprecated", False)
    version = src.version() or PIN
    return {
        "tool": "sglang",
        "distribution": f"sglang=={version}",
        "version": version,
        "generated_by": "scripts/gen_native_sglang.py",
        "note": (
            "ServerArgs options of the pinned SGLang release, read statically from "
            "sglang/srt/server_args.py and sglang/srt/arg_groups/fields/*.py (no import). "
            "Keys are ServerArgs field names; `flag` is the command-line spelling. "
            "`type` is one of bool, int, float, str, list (see `items`), json."
        ),
        "source_sha256": dict(sorted(src.digests.items())),
        "options": dict(sorted(options.items())),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", help="sglang wheel, a tree holding sglang/, or server_args.py")
    ap.add_argument("-o", "--out", default=str(OUT))
    ns = ap.parse_args(argv)
    table = generate(ns.source)
    if table["version"] != PIN:
        print(f"warning: source is sglang {table['version']}, pin is {PIN}", file=sys.stderr)
    Path(ns.out).write_text(json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {ns.out}: {len(table['options'])} options from sglang {table['version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
