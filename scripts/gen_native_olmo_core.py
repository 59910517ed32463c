#!/usr/bin/env python3
"""Write schemas/native/olmo_core.json: train-module options of the pinned OLMo-core, read statically.

    python scripts/gen_native_olmo_core.py                      # the installed olmo_core
    python scripts/gen_native_olmo_core.py ai2_olmo_core-3.0.0-py3-none-any.whl
    python scripts/gen_native_olmo_core.py /path/to/site-packages   # a tree holding olmo_core/

Nothing is imported from OLMo-core (it imports torch): dataclass fields, their defaults,
the docstring that follows each field, and the members of the enums they use are read with
``ast``. Nested config classes are flattened into dotted keys (``dp_config.name``).
Which options are exposed is the `EXPOSED` table below; everything rlc derives itself
(micro-batch size, sequence length, optimizer, scheduler, clipping, parallelism degrees)
is left out on purpose and configured through rlc's own sections.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import json
import re
import zipfile
from pathlib import Path
from typing import Any

PIN = "3.0.0"
OUT = Path(__file__).resolve().parents[1] / "schemas" / "native" / "olmo_core.json"
TRAIN_CONFIG = "olmo_core.train.train_module.transformer.config"

# (key prefix, module, class, fields to take (None: all), note)
EXPOSED: list[tuple[str, str, str, list[str] | None]] = [
    (
        "",
        TRAIN_CONFIG,
        "TransformerTrainModuleConfig",
        ["compile_model", "z_loss_multiplier", "autocast_precision", "label_ignore_index"],
    ),
    ("float8_config.", "olmo_core.float8", "Float8Config", ["enabled", "modules_to_ignore"]),
    (
        "dp_config.",
        TRAIN_CONFIG,
        "TransformerDataParallelConfig",
        None,
    ),
    ("ac_config.", TRAIN_CONFIG, "TransformerActivationCheckpointingConfig", None),
]

# Where a field has no docstring, `:param NAME:` lines of these classes' docstrings are used.
PARAM_DOCS = [
    ("olmo_core.train.train_module.transformer.train_module", "TransformerTrainModule"),
    ("olmo_core.float8", "Float8Config"),
]

# The few fields documented nowhere in the source; worded from how OLMo-core uses them.
HELP_FALLBACK = {
    "label_ignore_index": "Label id that the loss ignores (padding / masked tokens).",
    "dp_config.name": "Data-parallel implementation: fsdp, hsdp (replicated shards) or ddp.",
    "dp_config.param_dtype": "Dtype FSDP materializes parameters in for compute (mixed precision).",
    "dp_config.reduce_dtype": "Dtype of gradient reduction.",
    "dp_config.num_replicas": "HSDP: number of replica groups (default: one per node).",
    "dp_config.shard_degree": "HSDP: ranks per shard group (default: GPUs per node).",
    "dp_config.prefetch_factor": "FSDP: how many modules ahead to prefetch parameters.",
}

NOTE = (
    "Pass-through options of OLMo-core's TransformerTrainModuleConfig that rlc does not "
    "derive itself: torch.compile (compile_model), the LM-head z-loss (z_loss_multiplier), "
    "autocast precision, label ignore index, float8 training (float8_config.enabled / "
    "modules_to_ignore), the data-parallel wrapper (dp_config.*: fsdp/hsdp/ddp, param and "
    "reduce dtypes, replica/shard degrees, wrapping strategy, prefetch, bucket size) and "
    "activation checkpointing (ac_config.*: mode full/selected_blocks/selected_modules/"
    "selected_ops/budget and its parameters). Not exposed: rank_microbatch_size, "
    "max_sequence_length, optim, scheduler, max_grad_norm (rlc's [trainer]/[optimizer]), "
    "tp/cp/pp/ep configs (rlc's parallelism fields) and checkpoint state-dict options."
)


class Source:
    def __init__(self, arg: str | None):
        self.zip: zipfile.ZipFile | None = None
        self.root: Path
        if arg is None:
            spec = importlib.util.find_spec("olmo_core")  # locates, does not import
            if spec is None or spec.origin is None:
                raise SystemExit("olmo_core is not installed; pass a wheel or a source tree")
            self.root = Path(spec.origin).parents[1]
        else:
            p = Path(arg)
            if p.is_file() and p.suffix == ".whl":
                self.zip = zipfile.ZipFile(p)
                self.root = Path("/")
            elif (p / "olmo_core").is_dir():
                self.root = p
            elif (p / "src" / "olmo_core").is_dir():
                self.root = p / "src"
            else:
                raise SystemExit(f"{arg}: not a wheel or a tree holding olmo_core/")
        self.digests: dict[str, str] = {}
        self._trees: dict[str, ast.Module] = {}

    def _read(self, rel: str) -> bytes | None:
        if self.zip is not None:
            try:
                return self.zip.read(rel)
            except KeyError:
                return None
        f = self.root / rel
        return f.read_bytes() if f.is_file() else None

    def module(self, name: str) -> tuple[str, ast.Module] | None:
        base = name.replace(".", "/")
        for rel in (base + ".py", base + "/__init__.py"):
            if rel in self._trees:
                return rel, self._trees[rel]
            data = self._read(rel)
            if data is not None:
                self.digests[rel] = hashlib.sha256(data).hexdigest()
                tree = ast.parse(data.decode("utf-8"))
                self._trees[rel] = tree
                return rel, tree
        return None

    def version(self) -> str | None:
        found = self.module("olmo_core.version")
        if found is None:
            return None
        for stmt in found[1].body:
            if not isinstance(stmt, ast.Assign):
                continue
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and target.id == "VERSION":
                try:
                    return str(ast.literal_eval(stmt.value))
                except ValueError:
                    return None
        return None


def resolve_import(module: str, rel: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    pkg = module.split(".") if rel.endswith("__init__.py") else module.split(".")[:-1]
    pkg = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
    return ".".join(pkg + ([node.module] if node.module else []))


def find_class(
    src: Source, module: str, name: str, depth: int = 0
) -> tuple[str, ast.ClassDef] | None:
    """Find a class through re-exports (``from .config import X`` in ``__init__``)."""
    found = src.module(module)
    if found is None or depth > 8:
        return None
    rel, tree = found
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    target = resolve_import(module, rel, node)
                    hit = find_class(src, target, alias.name, depth + 1)
                    if hit is None:  # `from pkg import submodule_name`? try as a module
                        continue
                    return hit
    return None


def enum_members(cls: ast.ClassDef) -> list[str] | None:
    if (
        not any(isinstance(b, ast.Name) and b.id in ("StrEnum", "Enum", "str") for b in cls.bases)
        and not any(
            isinstance(b, ast.Attribute) and b.attr in ("StrEnum", "Enum") for b in cls.bases
        )
        and not any(isinstance(b, ast.Subscript) for b in cls.bases)
    ):
        return None
    out = []
    for stmt in cls.body:
        if (
            isinstance(stmt, ast.Assign)
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)
        ):
            out.append(stmt.value.value)
    return out or None


def split_optional(t: ast.AST) -> tuple[ast.AST, bool]:
    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == "Optional":
        return t.slice, True
    if isinstance(t, ast.BinOp) and isinstance(t.op, ast.BitOr):
        for a, b in ((t.left, t.right), (t.right, t.left)):
            if isinstance(b, ast.Constant) and b.value is None:
                return a, True
    return t, False


SCALARS = {"bool": "bool", "int": "int", "float": "float", "str": "str"}


def describe_type(src: Source, module: str, t: ast.AST) -> dict[str, Any]:
    inner, nullable = split_optional(t)
    out: dict[str, Any] = {"python_type": ast.unparse(t), "nullable": nullable}
    if isinstance(inner, ast.Name) and inner.id in SCALARS:
        out["type"] = SCALARS[inner.id]
        return out
    if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name):
        if inner.value.id in ("List", "list"):
            out["type"] = "list"
            item = inner.slice
            out["items"] = SCALARS.get(item.id, "str") if isinstance(item, ast.Name) else "str"
            return out
        if inner.value.id == "Literal":
            vals = ast.literal_eval(inner.slice)
            out["type"] = "str"
            out["choices"] = list(vals) if isinstance(vals, tuple) else [vals]
            return out
    if isinstance(inner, ast.Name):
        hit = find_class(src, module, inner.id)
        if hit is not None:
            members = enum_members(hit[1])
            if members is not None:
                out["type"] = "str"
                out["choices"] = members
                out["enum"] = inner.id
                return out
    out["type"] = "json"
    return out


def default_of(node: ast.AST | None) -> tuple[bool, Any]:
    if node is None:
        return False, None
    try:
        return True, ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return True, node.attr  # EnumClass.member -> its member name (== value for StrEnums)
    if (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", "")) == "field"
    ):
        for kw in node.keywords:
            if kw.arg == "default_factory" and isinstance(kw.value, ast.Name):
                return True, {"list": [], "dict": {}}.get(kw.value.id)
            if kw.arg == "default":
                return default_of(kw.value)
    return False, None


def clean_doc(text: str) -> str:
    text = re.sub(r":(data|class|func|meth|attr):`~?([^`]+)`", r"`\2`", text)
    return " ".join(text.split())


def class_fields(src: Source, module: str, cls: ast.ClassDef, depth: int = 0) -> dict[str, Any]:
    """Dataclass fields of ``cls`` including inherited ones (bases first, as dataclasses do)."""
    out: dict[str, Any] = {}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in ("Config", "object") and depth < 6:
            hit = find_class(src, module, base.id)
            if hit is not None:
                out.update(class_fields(src, hit[0], hit[1], depth + 1))
    body = cls.body
    for i, stmt in enumerate(body):
        if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
            continue
        name = stmt.target.id
        if name.startswith("_"):
            continue
        entry = describe_type(src, module, stmt.annotation)
        ok, default = default_of(stmt.value)
        if ok:
            entry["default"] = default
        elif stmt.value is None:
            entry["required"] = True
            entry["default"] = None
        else:
            entry["default"] = None
            entry["default_expr"] = ast.unparse(stmt.value)
        doc = ""
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            doc = clean_doc(nxt.value.value)
        entry["help"] = doc
        entry["owner_class"] = cls.name
        out[name] = entry
    return out


def param_docs(src: Source) -> dict[str, str]:
    out: dict[str, str] = {}
    for module, name in PARAM_DOCS:
        hit = find_class(src, module, name)
        doc = ast.get_docstring(hit[1]) if hit else None
        for m in re.finditer(r":param (\w+):(.*?)(?=\n\s*:param |\n\s*\n|\Z)", doc or "", re.S):
            out.setdefault(m.group(1), clean_doc(m.group(2)))
    return out


def generate(arg: str | None) -> dict[str, Any]:
    src = Source(arg)
    options: dict[str, Any] = {}
    params = param_docs(src)
    for prefix, module, cls_name, names in EXPOSED:
        hit = find_class(src, module, cls_name)
        if hit is None:
            raise SystemExit(f"cannot find {cls_name} in {module}")
        fields = class_fields(src, hit[0], hit[1])
        if prefix and "name" in fields and fields["name"].get("required"):
            fields["name"]["required"] = False  # given a section, `name` is what selects it
        for name, entry in fields.items():
            if names is not None and name not in names:
                continue
            entry["config"] = f"{hit[0]}.{cls_name}"
            key = prefix + name
            if not entry["help"]:
                entry["help"] = HELP_FALLBACK.get(key) or params.get(name, "")
            options[key] = entry
    for opt in options.values():
        opt.setdefault("choices", None)
    version = src.version() or PIN
    return {
        "tool": "olmo_core",
        "distribution": f"ai2-olmo-core=={version}",
        "version": version,
        "generated_by": "scripts/gen_native_olmo_core.py",
        "note": NOTE,
        "source_sha256": dict(sorted(src.digests.items())),
        "options": dict(sorted(options.items())),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", nargs="?", help="olmo-core wheel or source tree (default: installed)")
    ap.add_argument("-o", "--out", default=str(OUT))
    ns = ap.parse_args(argv)
    table = generate(ns.source)
    if table["version"] != PIN:
        print(f"warning: source is ai2-olmo-core {table['version']}, pin is {PIN}")
    Path(ns.out).write_text(json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {ns.out}: {len(table['options'])} options from ai2-olmo-core {table['version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
