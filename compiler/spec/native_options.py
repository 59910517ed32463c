"""Native pass-through options: `[native.sglang]` and `[native.olmo_core]`.

Each is checked against a pinned option table in ``schemas/native/<tool>.json`` (generated
statically from the pinned release by ``scripts/gen_native_<tool>.py``): unknown options
get did-you-mean, values are type- and choice-checked, and options that rlc itself sets
from its own sections are refused with the field to use instead. `sglang_argv` renders
checked options as SGLang command-line flags; `explain_native` prints an option's own help.
`[native.olmo_core]` options are checked the same way and then refused: the trainer builds
its OLMo-core model, mesh and optimizer from rlc's own fields and reads none of them, and a
spec compiles only to what runs (a `dp_config` the compiler kept would promise a topology
the runtime does not produce).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from compiler.diagnostics import Diagnostic, DiagnosticError, Span, did_you_mean, suggest
from compiler.resources import native_dir

TOOLS = ("sglang", "olmo_core")

_MESH = (
    "rlc plans the trainer mesh from trainer.gpus, trainer.nodes and trainer.expert_parallel "
    "(FSDP on one node, HSDP across trainer nodes, EP over the shard dimension)"
)
# Options rlc derives or places itself -> what to set instead. Keys are table keys.
OWNED: dict[str, dict[str, str]] = {
    "sglang": {
        "model_path": "set model.source instead",
        "tokenizer_path": "set model.source instead",
        "host": "rlc assigns engine addresses from the placement",
        "port": "rlc assigns engine ports from the placement",
        "nnodes": "rlc places engines from the placement (inference.gpus, launch)",
        "node_rank": "rlc places engines from the placement",
        "dist_init_addr": "rlc places engines from the placement",
        "base_gpu_id": "rlc assigns GPUs from the placement",
        "tp_size": "set inference.tensor_parallel instead",
        "dp_size": "rlc runs one engine per inference.tensor_parallel GPUs; set inference.gpus",
        "pp_size": "pipeline-parallel serving is not supported; engines are TP1",
        "mem_fraction_static": "set inference.mem_fraction_static instead",
        "max_running_requests": "set inference.max_running_requests instead",
        "max_total_tokens": "set inference.max_total_tokens instead",
        "context_length": "set inference.max_context_length instead",
        "disable_radix_cache": "set inference.radix_cache instead",
        "kv_cache_dtype": "set inference.kv_cache_dtype instead",
        "enable_return_routed_experts": "set trainer.router_replay instead",
        "random_seed": "set data.seed (or inference.seed) instead",
        "dtype": "set model.dtype instead",
        "cuda_graph_max_bs_decode": "set inference.cuda_graph_max_bs instead",
        "disable_cuda_graph": "set inference.cuda_graph_decode instead",
        "chunked_prefill_size": "set inference.chunked_prefill_size instead",
        "max_mamba_cache_size": "rlc serves no hybrid (recurrent) model with SGLang",
    },
    "olmo_core": {
        **dict.fromkeys(
            ("dp_config.name", "dp_config.num_replicas", "dp_config.shard_degree"), _MESH
        ),
        "dp_config.param_dtype": "set model.dtype instead (the compute dtype; master weights stay fp32)",
        "dp_config.reduce_dtype": "gradients are always reduced in fp32; set model.dtype for compute",
        "autocast_precision": "set model.dtype instead",
        **dict.fromkeys(
            (
                "ac_config.mode",
                "ac_config.block_interval",
                "ac_config.modules",
                "ac_config.activation_memory_budget",
            ),
            "set trainer.activation_recompute instead (full recompute of every block)",
        ),
    },
}
# Tools whose checked options the runtime does not apply: every option is refused with this.
NOT_APPLIED: dict[str, str] = {
    "olmo_core": "the trainer does not read [native.olmo_core]: it builds its OLMo-core model, "
    "mesh and optimizer from rlc's own fields; remove the option",
}


@dataclass(frozen=True)
class NativeOption:
    key: str
    type: str  # bool | int | float | str | list | json
    help: str
    default: Any = None
    nullable: bool = False
    choices: tuple[Any, ...] | None = None
    items: str | None = None  # for lists
    flag: str | None = None  # sglang command-line spelling
    aliases: tuple[str, ...] = ()
    deprecated: bool = False
    negatable: bool = False  # `--no-X` exists
    json_list: bool = False  # a list passed as one JSON string
    python_type: str = ""
    required: bool = False

    def type_text(self) -> str:
        base = f"list of {self.items or 'str'}" if self.type == "list" else self.type
        return base + (" (optional)" if self.nullable else "")


@dataclass(frozen=True)
class NativeTable:
    name: str
    version: str
    distribution: str
    note: str
    options: dict[str, NativeOption]
    aliases: dict[str, str] = field(default_factory=dict)

    def resolve(self, key: str) -> str | None:
        """The table key for a user key: itself, its `-`/`_` spelling, or a flag alias."""
        norm = key.lstrip("-").replace("-", "_")
        if norm in self.options:
            return norm
        return self.aliases.get(norm)

    def get(self, key: str) -> NativeOption | None:
        k = self.resolve(key)
        return self.options.get(k) if k else None


def _unknown_tool(name: str) -> DiagnosticError:
    return DiagnosticError(
        Diagnostic(
            "error",
            "native-unknown-tool",
            f"unknown native section {name!r}; native sections are "
            + ", ".join(f"[native.{t}]" for t in TOOLS),
            help=did_you_mean(name, TOOLS),
        )
    )


@cache
def load_native_table(name: str) -> NativeTable:
    """The pinned option table of `name` (``sglang`` or ``olmo_core``), cached."""
    if name not in TOOLS:
        raise _unknown_tool(name)
    raw = json.loads((native_dir() / f"{name}.json").read_text(encoding="utf-8"))
    options: dict[str, NativeOption] = {}
    aliases: dict[str, str] = {}
    for key, o in raw["options"].items():
        choices = o.get("choices")
        options[key] = NativeOption(
            key=key,
            type=o.get("type", "str"),
            help=o.get("help", ""),
            default=o.get("default"),
            nullable=bool(o.get("nullable")),
            choices=tuple(choices) if choices else None,
            items=o.get("items"),
            flag=o.get("flag"),
            aliases=tuple(o.get("aliases") or ()),
            deprecated=bool(o.get("deprecated")),
            negatable=bool(o.get("negatable")),
            json_list=bool(o.get("json_list")),
            python_type=o.get("python_type", ""),
            required=bool(o.get("required")),
        )
        for alias in o.get("aliases") or ():
            aliases.setdefault(alias.lstrip("-").replace("-", "_"), key)
        if o.get("flag"):
            aliases.setdefault(o["flag"].lstrip("-").replace("-", "_"), key)
    return NativeTable(
        name=name,
        version=raw.get("version", ""),
        distribution=raw.get("distribution", ""),
        note=raw.get("note", ""),
        options=options,
        aliases=aliases,
    )


def flatten_options(name: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Nested tables (``[native.olmo_core.dp_config]``) as dotted keys (``dp_config.name``).

    A table value stays whole when its key is itself an option (a JSON-typed option).
    """
    table = load_native_table(name)
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and table.get(prefix) is None:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = value

    for k, v in options.items():
        walk(str(k), v)
    return out


def _kind_ok(kind: str | None, value: Any) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "str" or kind is None:
        return isinstance(value, str)
    if kind == "json":
        return isinstance(value, str | int | float | bool | list | dict)
    return False


def _type_error(opt: NativeOption, value: Any) -> str | None:
    if opt.type == "list":
        if not isinstance(value, list):
            return f"expects a list of {opt.items or 'str'}, got {_show(value)}"
        if opt.items != "json":
            bad = [v for v in value if not _kind_ok(opt.items or "str", v)]
            if bad:
                return f"expects a list of {opt.items or 'str'}; {_show(bad[0])} is not one"
        return None
    if not _kind_ok(opt.type, value):
        return f"expects {opt.type}, got {_show(value)}"
    return None


def _show(value: Any) -> str:
    kind = {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "table"}
    return f"{kind.get(type(value), type(value).__name__)} {json.dumps(value, default=str)}"


def _span_for(name: str, key: str, spans: Mapping[str, Span | None] | None) -> Span | None:
    if not spans:
        return None
    return spans.get(key) or spans.get(f"native.{name}.{key}")


def check_native(
    name: str,
    options: Mapping[str, Any],
    spans: Mapping[str, Span | None] | None = None,
    owned: Mapping[str, str] | None = None,
) -> list[Diagnostic]:
    """Diagnostics for one `[native.NAME]` table (nested tables are flattened first).

    ``spans`` maps the user's (dotted) option key, or ``native.NAME.KEY``, to its span.
    """
    if name not in TOOLS:
        return [_unknown_tool(name).diagnostics[0]]
    table = load_native_table(name)
    owned = OWNED.get(name, {}) if owned is None else owned
    out: list[Diagnostic] = []
    where = f"[native.{name}]"
    for key, value in flatten_options(name, options).items():
        span = _span_for(name, key, spans)
        canon = table.resolve(key)
        if canon is None:
            out.append(
                Diagnostic(
                    "error",
                    "native-unknown-option",
                    f"{where}: {key!r} is not an option of {table.distribution}",
                    span,
                    help=did_you_mean(key.replace("-", "_"), table.options)
                    + (f"`rlc explain native.{name}.OPTION` shows an option's help",),
                )
            )
            continue
        opt = table.options[canon]
        if canon in owned:
            out.append(
                Diagnostic(
                    "error",
                    "native-owned",
                    f"{where}: {key!r} is owned by rlc and cannot be passed through",
                    span,
                    help=(owned[canon],),
                )
            )
            continue
        if name in NOT_APPLIED:
            out.append(
                Diagnostic(
                    "error",
                    "native-not-applied",
                    f"{where}: {key!r} is an option of {table.distribution} that rlc does not apply",
                    span,
                    help=(NOT_APPLIED[name],),
                )
            )
            continue
        problem = _type_error(opt, value)
        if problem is not None:
            out.append(Diagnostic("error", "native-type", f"{where}: {key!r} {problem}", span))
            continue
        smuggled = flag_like_value(opt, value) if name == "sglang" else None
        if smuggled is not None:
            out.append(
                Diagnostic(
                    "error",
                    "native-flag-value",
                    f"{where}: {key!r} value {json.dumps(smuggled)} reads as a command-line "
                    f"option: a [native.sglang] value sets {opt.flag or key} only, it cannot "
                    "add or override other flags",
                    span,
                    help=(
                        "each key maps to exactly one SGLang flag; set other options as "
                        "their own keys (rlc-owned ones through rlc's fields)",
                    ),
                )
            )
            continue
        if opt.choices is not None:
            values = value if isinstance(value, list) else [value]
            bad = [v for v in values if v not in opt.choices]
            if bad:
                shown = ", ".join(json.dumps(c) for c in opt.choices[:12])
                more = ", ..." if len(opt.choices) > 12 else ""
                out.append(
                    Diagnostic(
                        "error",
                        "native-choice",
                        f"{where}: {key!r} = {json.dumps(bad[0])} is not one of {shown}{more}",
                        span,
                        help=did_you_mean(str(bad[0]), [str(c) for c in opt.choices]),
                    )
                )
                continue
        cli_only = name == "sglang"  # olmo_core options are config values, not flags
        if (
            cli_only
            and opt.type == "bool"
            and value is False
            and opt.default is True
            and not opt.negatable
        ):
            out.append(
                Diagnostic(
                    "error",
                    "native-type",
                    f"{where}: {key!r} defaults to true and has no command-line form to turn it off",
                    span,
                )
            )
            continue
        if opt.deprecated:
            out.append(
                Diagnostic(
                    "warning",
                    "native-deprecated",
                    f"{where}: {key!r} is deprecated in {table.distribution}",
                    span,
                    help=(opt.help,) if opt.help else (),
                )
            )
    return out


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def flag_like_value(opt: NativeOption, value: Any) -> str | None:
    """The first part of ``value`` that SGLang's argument parser would read as an option
    (so a value could add a flag, or override one rlc sets): a string beginning with
    ``--``, or a list item beginning with ``-`` that is not a number (each item of a list
    option is its own argument). None when the value is only values."""
    if opt.type == "list" and isinstance(value, list) and not opt.json_list:
        for v in value:
            text = _scalar_arg(v)
            if text.startswith("-") and not _numeric(text):
                return text
        return None
    if isinstance(value, str) and value.startswith("--"):
        return value
    return None


def _scalar_arg(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return str(value)


def sglang_argv(options: Mapping[str, Any]) -> list[str]:
    """SGLang flags for checked `[native.sglang]` options, in key order (deterministic).

    Booleans are bare flags (``--no-X`` for false where SGLang has it; false is otherwise
    the default and omitted); lists are ``--flag a b`` (or one JSON string where SGLang
    parses JSON); tables are one JSON string.
    """
    table = load_native_table("sglang")
    argv: list[str] = []
    resolved: dict[str, Any] = {}
    for key, value in flatten_options("sglang", options).items():
        canon = table.resolve(key)
        if canon is None:
            raise ValueError(f"unknown sglang option {key!r} (run check_native first)")
        resolved[canon] = value
    for canon in sorted(resolved):
        value = resolved[canon]
        opt = table.options[canon]
        if canon in OWNED["sglang"] or flag_like_value(opt, value) is not None:
            raise ValueError(f"[native.sglang] {key!r} cannot be passed (run check_native first)")
        flag = opt.flag or "--" + canon.replace("_", "-")
        if opt.type == "bool":
            if value is True:
                argv.append(flag)
            elif value is False and opt.negatable:
                argv.append("--no-" + flag[2:])
        elif opt.type == "list" and isinstance(value, list):
            if opt.json_list:
                argv += [flag, json.dumps(value, separators=(",", ":"))]
            else:
                argv += [flag, *(_scalar_arg(v) for v in value)]
        else:
            text = _scalar_arg(value)
            # `--flag=-x`: argparse would read a separate "-x" as another option.
            argv += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return argv


def explain_native(name: str, key: str) -> str:
    """The text of `rlc explain native.NAME.KEY`: the option's own help, type, default, choices."""
    table = load_native_table(name)
    canon = table.resolve(key)
    if canon is None:
        raise DiagnosticError(
            Diagnostic(
                "error",
                "native-unknown-option",
                f"{key!r} is not an option of {table.distribution}",
                help=tuple(f"did you mean native.{name}.{s}?" for s in suggest(key, table.options)),
            )
        )
    opt = table.options[canon]
    head = f"native.{name}.{canon}"
    if opt.flag:
        head += f"  ({opt.flag}" + "".join(f", {a}" for a in opt.aliases) + ")"
    lines = [head, f"  {table.distribution} option" + (" (deprecated)" if opt.deprecated else "")]
    lines.append(f"  type:    {opt.type_text()}")
    lines.append(f"  default: {json.dumps(opt.default)}")
    if opt.choices:
        lines.append("  choices: " + ", ".join(json.dumps(c) for c in opt.choices))
    owned = OWNED.get(name, {}).get(canon)
    if owned:
        lines.append(f"  owned by rlc: {owned}")
    elif name in NOT_APPLIED:
        lines.append(f"  not applied: {NOT_APPLIED[name]}")
    if opt.help:
        lines.append("")
        lines.extend(textwrap.wrap(opt.help, width=88, initial_indent="  ", subsequent_indent="  "))
    return "\n".join(lines)
