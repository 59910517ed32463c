"""Resolution: a bound spec -> every field's value, its provenance, and the plan.

Order: spec values (already layered over the recipe by ``bind``), relative paths resolved
against the spec's directory, then derived values in dependency order (each records its
formula and inputs), then placement and the plan. Constraints are not checked here: the
rules (``schemas/rules``) check the result.

Paths: relative paths are joined to the spec's directory *as the spec path was given*
(``specs/examples/x.toml`` + ``../../runs/x`` -> ``runs/x``), and then normalized. So a
manifest compiled from a relative spec path holds cwd-relative paths (the same base as
``source.path``) and is byte-identical on every machine; absolute spec paths or values give
absolute paths. ``~`` is not expanded.
"""

from __future__ import annotations

import copy
import json
import math
import os
import posixpath
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from compiler.diagnostics import Span
from compiler.resolve.provenance import Provenance, span_kind
from compiler.resolve.transport import publication_transport
from compiler.spec.bind import Bound, dotted
from compiler.spec.model_source import SourceInfo


@dataclass
class Resolved:
    config: dict[str, Any]
    provenance: dict[str, Provenance]
    plan: dict[str, Any]
    paths: dict[str, str]
    facts: dict[str, Any]
    fact_spans: dict[str, Span] = field(default_factory=dict)
    explicit: set[str] = field(default_factory=set)
    spans: dict[str, Span] = field(default_factory=dict)

    def get(self, path: str) -> Any:
        node: Any = self.config
        for part in path.split("."):
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                raise KeyError(path)
        return node


def field_paths(config: dict[str, Any]) -> list[str]:
    """Leaf field paths of a resolved config: section.field, nested tables recursed,
    arrays and free-form maps (env, native options) kept whole."""
    trees = _field_trees()
    out: list[str] = []
    for key, value in config.items():
        if key in trees and isinstance(value, dict):
            _walk_tree(trees[key], value, key, out)
        elif key in ("judges", "rubrics") and isinstance(value, dict):
            for name, body in value.items():
                for f in body:
                    out.append(f"{key}.{name}.{f}")
        elif key == "judging" and isinstance(value, dict):
            for verifier, body in value.get("bindings", {}).items():
                for f in body:
                    out.append(f"judging.bindings.{verifier}.{f}")
        else:
            out.append(key)
    return out


# The modules the table's builder runs besides the spec models (its cache key).
FIELD_TREE_READS = (
    "resolve/__init__.py",
    "resolve/resolve.py",
    "resolve/provenance.py",
    "resolve/transport.py",
    "spec/bind.py",
    "spec/model_source.py",
    "parse/__init__.py",
    "parse/document.py",
    "diagnostics.py",
)


@cache
def _field_trees() -> dict[str, Any]:
    """`model_field_trees`, derived once and cached (building it imports pydantic)."""
    from compiler.derive.fastpath import spec_table

    trees: dict[str, Any] = spec_table("spec-field-tree", FIELD_TREE_READS, model_field_trees)
    return trees


def model_field_trees() -> dict[str, Any]:
    """Per section, (key, nested tree or None) for each field, from the pydantic models."""
    from pydantic import BaseModel

    from compiler.spec import SECTIONS

    def tree(model: Any) -> tuple[tuple[str, Any], ...]:
        out = []
        for name, info in model.model_fields.items():
            ann = info.annotation
            sub = tree(ann) if isinstance(ann, type) and issubclass(ann, BaseModel) else None
            out.append((info.alias or name, sub))
        return tuple(out)

    return {section: tree(model) for section, model in SECTIONS.items()}


def _walk_tree(tree: Any, value: dict[str, Any], prefix: str, out: list[str]) -> None:
    for key, sub in tree:
        if sub is not None and isinstance(value.get(key), dict):
            _walk_tree(sub, value[key], f"{prefix}.{key}", out)
        else:
            out.append(f"{prefix}.{key}")


_TTL_COMPONENT = re.compile(r"tmp-[0-9]+[hdwmy]")


def _credential_like(key: str) -> bool:
    """A key that names a credential (api_key, auth_token, password, ...)."""
    from contract.spec.constants import CREDENTIAL_NAMES

    words = [w for w in re.split(r"[^A-Za-z0-9]+", key.upper()) if w]
    return bool(words) and (
        words[-1] in CREDENTIAL_NAMES or "_".join(words[-2:]) in CREDENTIAL_NAMES
    )


def _builtin_base(source: str) -> str | None:
    """``builtin:olmo3-1b?vocab_size=100352`` -> ``builtin:olmo3-1b``; None for paths."""
    if not source.startswith("builtin:"):
        return None
    return source.partition("?")[0]


def _builtin_bad_overrides(source: str) -> list[str]:
    from contract.spec.constants import BUILTIN_OVERRIDE_KEYS

    if not source.startswith("builtin:"):
        return []
    query = source.partition("?")[2]
    bad = []
    for part in filter(None, query.split("&")):
        key, sep, value = part.partition("=")
        if not sep or key not in BUILTIN_OVERRIDE_KEYS or not value.isdigit():
            bad.append(part)
    return bad


def _join(base_dir: str, p: str | None) -> str | None:
    if p is None or p.startswith("builtin:"):
        return p
    if posixpath.isabs(p) or os.path.isabs(p):
        return posixpath.normpath(p)
    return posixpath.normpath(posixpath.join(base_dir or ".", p))


# System directories a run directory may never be, nor lie under.
_SYSTEM_DIRS = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
    "/root", "/run", "/sbin", "/sys", "/usr", "/var",
)  # fmt: skip


def _system_path(root: str) -> bool:
    """``output.root`` (already normalised) is a system directory, under one, a shared
    top-level directory itself ("/", "/tmp", "/weka") or the working directory: a run there
    could clobber what others own."""
    if not root.startswith("/"):
        return root in (".", "")
    if root in ("/", "/tmp", "/home", "/weka", "/mnt", "/media", "/opt", "/srv"):
        return True
    return any(root == d or root.startswith(d + "/") for d in _SYSTEM_DIRS)


# Per-user scratch areas an absolute run directory may lie in without a declared mount:
# strictly inside /tmp, or inside a home directory (/home/<user>/<dir>...).
_SCRATCH_PREFIXES = (("tmp",), ("home", "*"))


def _outside_root(root: str, mounts: list[str], cwd: str) -> bool:
    """``output.root`` (normalised, relative paths already relative to the working directory)
    lies outside the working directory ``cwd``, every declared mount and the per-user scratch
    areas: a relative path that climbs above ``cwd``, or an absolute one elsewhere."""
    if not root.startswith("/"):
        return root == ".." or root.startswith("../")
    if any(_under(root, m) for m in mounts) or (root != cwd and _under(root, cwd)):
        return False
    parts = root.strip("/").split("/")
    for prefix in _SCRATCH_PREFIXES:
        n = len(prefix)
        if len(parts) > n and all(p in ("*", q) for p, q in zip(prefix, parts, strict=False)):
            return False
    return True


def _under(path: str, root: str) -> bool:
    """``path`` is ``root`` or inside it (both normalised)."""
    p, r = posixpath.normpath(path), posixpath.normpath(root)
    return p == r or p.startswith(r.rstrip("/") + "/")


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return []


class _Resolver:
    def __init__(self, bound: Bound, spec_path: str, lock: dict[str, Any]):
        self.bound = bound
        self.spec_dir = posixpath.dirname(spec_path.replace(os.sep, "/"))
        self.lock = lock
        if bound.spec is None:
            raise ValueError("resolve needs a bound spec without errors")
        self.config: dict[str, Any] = copy.deepcopy(bound.spec)
        self.prov: dict[str, Provenance] = {}
        self.explicit: set[str] = set()
        self.spans: dict[str, Span] = {}
        self.source_info = SourceInfo()
        self.given_source_info: SourceInfo | None = None
        self.given_teacher_facts: dict[str, Any] | None = None
        self.written_teacher_source = ""  # teacher.source as the spec wrote it
        self.student_info: dict[str, Any] = {}

    # -- provenance --------------------------------------------------------------------
    def record_sources(self) -> None:
        aliases: dict[str, str] = {}
        for layer in self.bound.layers:
            aliases.update(layer.aliases)
        for path in field_paths(self.config):
            parts = tuple(int(p) if p.isdigit() else p for p in path.split("."))
            found = self.bound.writer(parts)
            if found is None:
                self.prov[path] = Provenance("default")
                continue
            layer, entry = found
            self.explicit.add(path)
            self.spans[path] = entry.value.span
            alias = layer.aliases.get(path)
            if layer.kind == "recipe":
                self.prov[path] = Provenance(
                    "recipe", entry.value.span, recipe=layer.recipe, alias_of=alias
                )
            else:
                self.prov[path] = Provenance(
                    span_kind(entry.value.span), entry.value.span, alias_of=alias
                )

    def value(self, path: str) -> Any:
        node: Any = self.config
        for part in path.split("."):
            node = node[part]
        return node

    def put(self, path: str, value: Any) -> None:
        node: Any = self.config
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[part]
        node[parts[-1]] = value

    def derive(self, path: str, value: Any, formula: str, inputs: tuple[str, ...]) -> None:
        """Fill ``path`` unless the user set it."""
        if path in self.explicit or self.value(path) is not None:
            return
        self.put(path, value)
        self.prov[path] = Provenance("derived", formula=formula, inputs=inputs)

    def note(self, path: str, text: str) -> None:
        old = self.prov.get(path)
        if old is not None:
            self.prov[path] = Provenance(
                old.kind,
                old.span,
                old.recipe,
                old.formula,
                old.inputs,
                old.alias_of,
                (*old.notes, text),
            )

    # -- resolution --------------------------------------------------------------------
    def paths(self) -> None:
        c = self.config
        rel = f"relative paths resolve against the spec directory ({self.spec_dir or '.'})"
        for path in (
            "model.source",
            "model.hf_template",
            "output.root",
            "data.prompt_data",
            "data.reward_config",
            "data.manifest",
            "teacher.source",
            "teacher.hf_template",
        ):
            before = self.value(path)
            # a value given on the command line (--set) is relative to the working directory
            typed = self.prov.get(path) is not None and self.prov[path].kind == "override"
            after = _join("" if typed else self.spec_dir, before)
            if after != before:
                self.put(path, after)
                self.note(path, "relative to the working directory (--set)" if typed else rel)
        template = self.value("model.chat_template")
        if isinstance(template, str) and template.endswith(".jinja"):  # a file, not a name
            after = _join(self.spec_dir, template)
            if after != template:
                self.put("model.chat_template", after)
                self.note("model.chat_template", rel)
        for task in c["data"]["tasks"] or []:
            task["path"] = _join(self.spec_dir, task["path"])
        for ev in c["data"]["eval"]:
            ev["path"] = _join(self.spec_dir, ev["path"])

    def run(self) -> Resolved:
        from compiler.resolve.builtin_shape import builtin_info
        from contract.spec.constants import DEFAULT_SHARED_ROOT

        self.record_sources()
        written = str(self.value("model.source"))
        self.written_teacher_source = str(self.value("teacher.source") or "")
        self.paths()
        c = self.config
        m, tr, inf, opt, asy = c["model"], c["trainer"], c["inference"], c["optimizer"], c["async"]
        builtin = m["source"].startswith("builtin:")
        info = builtin_info(m["source"]) if builtin else {}

        self.derive(
            "model.format",
            "builtin" if builtin else "hf",
            "'builtin' if model.source starts with 'builtin:' else 'hf'",
            ("model.source",),
        )
        from compiler.spec import model_source

        self.source_info = (
            self.given_source_info
            if self.given_source_info is not None
            else model_source.inspect(
                m["source"], m["format"], m["hf_template"], written, m["chat_template"]
            )
        )
        if builtin:
            arch, formula = info.get("architecture", "dense"), "the builtin model's architecture"
        elif self.source_info.family:
            arch, formula = self.source_info.family, "read from the checkpoint's config"
        else:
            arch, formula = "dense", "'dense' when the checkpoint is not readable at compile time"
        self.derive("model.architecture", arch, formula, ("model.source",))
        if info:
            self.derive(
                "model.num_params", info["params"], "the builtin model's size", ("model.source",)
            )
        elif self.source_info.shape:
            info = dict(self.source_info.shape)  # the plan's memory estimate reads the sizes
            self.derive(
                "model.num_params",
                info["params"],
                "counted from the checkpoint's config",
                ("model.source",),
            )
        gpu = tr["gpus"] > 0
        self.derive(
            "trainer.device",
            "cuda" if gpu else "cpu",
            "'cuda' if trainer.gpus > 0 else 'cpu'",
            ("trainer.gpus",),
        )
        self.derive(
            "model.dtype",
            "bfloat16" if gpu else "float32",
            "'bfloat16' on GPU, 'float32' on CPU",
            ("trainer.gpus",),
        )
        self.derive(
            "trainer.attention_backend",
            "flex" if gpu else "sdpa",
            "'flex' on GPU, 'sdpa' on CPU",
            ("trainer.gpus",),
        )
        self.derive(
            "trainer.compile_model",
            gpu and arch == "dense",
            "true on GPU for dense models (measured), false otherwise",
            ("trainer.gpus", "model.architecture"),
        )

        on = asy["enabled"]
        self.derive(
            "async.max_policy_lag", 6 if on else 0, "6 if async.enabled else 0", ("async.enabled",)
        )
        self.derive(
            "async.off_policy_correction",
            "tis" if on and not opt["use_rollout_logprobs"] else "none",
            "'tis' if async.enabled and not optimizer.use_rollout_logprobs else 'none'",
            ("async.enabled", "optimizer.use_rollout_logprobs"),
        )
        self.derive(
            "inference.placement",
            "disaggregated" if on else "colocated",
            "'disaggregated' if async.enabled else 'colocated'",
            ("async.enabled",),
        )
        colocated = inf["placement"] == "colocated"
        world_gpus = tr["nodes"] * tr["gpus"]
        if colocated:
            self.derive(
                "inference.gpus",
                world_gpus,
                "trainer.nodes * trainer.gpus (colocated)",
                ("trainer.nodes", "trainer.gpus", "inference.placement"),
            )
        else:
            self.derive(
                "inference.gpus",
                1 if gpu else 0,
                "1 if trainer.gpus > 0 else 0 (disaggregated)",
                ("trainer.gpus", "inference.placement"),
            )
        if inf["gpus"] > 0:
            self.derive(
                "inference.num_engines",
                max(inf["gpus"] // inf["tensor_parallel"], 1),
                "inference.gpus // inference.tensor_parallel",
                ("inference.gpus", "inference.tensor_parallel"),
            )
        else:
            self.derive(
                "inference.num_engines",
                1,
                "1 CPU engine when inference.gpus = 0",
                ("inference.gpus",),
            )

        P, S = inf["prompts_per_collection"], inf["samples_per_prompt"]
        self.derive(
            "inference.global_batch_size",
            P * S,
            "inference.prompts_per_collection * inference.samples_per_prompt",
            ("inference.prompts_per_collection", "inference.samples_per_prompt"),
        )
        G = inf["global_batch_size"]
        self.derive(
            "optimizer.steps_per_collection",
            max((P * S) // G, 1),
            "prompts_per_collection * samples_per_prompt // global_batch_size",
            (
                "inference.prompts_per_collection",
                "inference.samples_per_prompt",
                "inference.global_batch_size",
            ),
        )
        ctx = inf["max_context_length"]
        self.derive(
            "inference.max_response_length",
            min(4096, ctx // 2),
            "min(4096, inference.max_context_length // 2)",
            ("inference.max_context_length",),
        )
        self.derive(
            "inference.max_prompt_length",
            ctx - inf["max_response_length"],
            "inference.max_context_length - inference.max_response_length",
            ("inference.max_context_length", "inference.max_response_length"),
        )
        self.derive(
            "inference.max_total_tokens",
            max(524288, inf["max_running_requests"] * ctx),
            "max(524288, inference.max_running_requests * inference.max_context_length)",
            ("inference.max_running_requests", "inference.max_context_length"),
        )
        self.derive(
            "inference.mem_fraction_static",
            0.4 if colocated else 0.6,
            "0.4 if colocated else 0.6",
            ("inference.placement",),
        )
        self.derive("inference.seed", c["data"]["seed"], "data.seed", ("data.seed",))
        self.derive("runtime.seed", c["data"]["seed"], "data.seed", ("data.seed",))
        from compiler.resolve.teacher import derive_teacher

        derive_teacher(self)
        for name, judge in sorted(c["judges"].items()):
            if judge["mode"] == "managed":  # SGLang serves on GPUs (any width)
                self.derive(
                    f"judges.{name}.engine",
                    "sglang" if c["trainer"]["gpus"] > 0 else "embedded",
                    "'sglang' on a GPU run, 'embedded' on a CPU run",
                    ("trainer.gpus",),
                )
        self.derive(
            "runtime.startup_timeout_s",
            c["launch"]["coordination"]["startup_timeout"],
            "launch.coordination.startup_timeout",
            ("launch.coordination.startup_timeout",),
        )
        if tr["sequence_packing"]:
            self.derive(
                "trainer.packing_max_tokens",
                ctx,
                "inference.max_context_length (packing)",
                ("trainer.sequence_packing", "inference.max_context_length"),
            )
        steps = opt["steps_per_collection"]
        self.derive(
            "optimizer.scoring_check_tolerance",
            0.05 if tr["compile_model"] else 1e-3,
            "0.05 with trainer.compile_model (two compiled programs round bf16 differently), "
            "else 0.001",
            ("trainer.compile_model",),
        )
        self.derive(
            "optimizer.scoring_pass",
            bool(steps != 1 or opt["kl_coef"] > 0),
            "optimizer.steps_per_collection != 1 or optimizer.kl_coef > 0",
            ("optimizer.steps_per_collection", "optimizer.kl_coef"),
        )
        if c["training"]["save_checkpoints"]:
            self.derive(
                "checkpoint.interval",
                c["training"]["num_rollouts"],
                "training.num_rollouts (save at the end)",
                ("training.save_checkpoints", "training.num_rollouts"),
            )
        self.derive(
            "checkpoint.export_hf_final",
            c["output"]["export_hf"],
            "output.export_hf",
            ("output.export_hf",),
        )

        data = c["data"]
        for task in data["tasks"] or []:
            if task["prompt_wrapper"] is None:
                task["prompt_wrapper"] = data["prompt_wrapper"]
        has_eval = bool(data["eval"]) or any(t.get("eval_count") for t in data["tasks"] or [])
        ev = c["evaluation"]
        shared = ev["mode"] == "shared"
        if shared and has_eval:
            self.derive(
                "training.eval_interval",
                20,
                "20 with held-out data (shared evaluation)",
                ("data.tasks", "data.eval", "evaluation.mode"),
            )
        self.derive(
            "training.skip_eval_before_train",
            not (shared and has_eval),
            "false with shared held-out evaluation, else true",
            ("evaluation.mode", "data.tasks", "data.eval"),
        )
        self.derive(
            "evaluation.max_response_length",
            inf["max_response_length"],
            "inference.max_response_length",
            ("inference.max_response_length",),
        )
        if not shared:
            self.derive("evaluation.interval", 20, "20 (background mode)", ("evaluation.mode",))
        for key in ("cluster", "workspace", "budget"):
            self.derive(f"evaluation.{key}", c["launch"][key], f"launch.{key}", (f"launch.{key}",))

        root = c["output"]["root"]
        self.derive(
            "tracking.metrics_path",
            posixpath.join(root, "metrics.jsonl"),
            "<output.root>/metrics.jsonl",
            ("output.root",),
        )
        self.derive("tracking.wandb_run_name", c["name"], "name", ("name",))
        image = (self.lock.get("image") or {}).get("beaker")
        self.derive("launch.image", image, "runtime lock image.beaker", ())
        if gpu:
            self.derive(
                "compiler_cache.shared_root",
                DEFAULT_SHARED_ROOT,
                "default shared root on GPU runs",
                ("trainer.gpus",),
            )

        engines = inf["num_engines"]
        slots = min(inf["server_concurrency"], inf["max_running_requests"])
        if on:
            target = max(P * S, 2 * engines * slots)
            self.derive(
                "async.producer_budget",
                math.ceil(target / S) * S,
                "ceil(max(P*S, 2*engines*min(server_concurrency, max_running_requests)) / S) * S",
                (
                    "inference.prompts_per_collection",
                    "inference.samples_per_prompt",
                    "inference.num_engines",
                    "inference.server_concurrency",
                    "inference.max_running_requests",
                ),
            )
        else:
            self.derive(
                "async.producer_budget",
                P * S,
                "P*S (synchronous: one collection in flight)",
                ("inference.prompts_per_collection", "inference.samples_per_prompt"),
            )

        self.student_info = info
        facts, fact_spans = self.facts(has_eval)
        teacher_params = facts["teacher_source_shape"].get("params")
        if teacher_params:
            self.derive(
                "teacher.num_params",
                teacher_params,
                "the teacher checkpoint's size (builtin table or its config)",
                ("teacher.source",),
            )
        plan = self.plan(info, facts)
        placement = plan["placement"]
        self.derive(
            "launch.gpus_per_replica",
            placement["gpus_per_replica"],
            "the placement's GPUs per replica",
            ("trainer.nodes", "trainer.gpus", "inference.gpus"),
        )
        transport, why = publication_transport(c, placement)
        self.derive(
            "runtime.publication_transport",
            transport,
            why,
            (
                "trainer.gpus",
                "inference.engine",
                "inference.placement",
                "async.publication_mode",
                "plan.placement",
            ),
        )
        from compiler.resolve.paths import derived_paths

        paths = derived_paths(c)
        return Resolved(c, self.prov, plan, paths, facts, fact_spans, self.explicit, self.spans)

    # -- facts the rules read (aggregates the rule language cannot compute) -------------
    def facts(self, has_eval: bool) -> tuple[dict[str, Any], dict[str, Span]]:
        c = self.config
        spans: dict[str, Span] = {}
        launch = c["launch"]
        mounts = [m["mount_path"] for m in launch["weka_mounts"]]
        scan = {k: v for k, v in c.items() if k not in ("launch", "compiler_cache")}
        scan["launch"] = {k: v for k, v in launch.items() if k != "weka_mounts"}
        if "compiler_cache.shared_root" in self.explicit:
            scan["compiler_cache"] = c["compiler_cache"]["shared_root"]
        overlap_mounts = sorted(
            {
                a
                for i, a in enumerate(mounts)
                for j, b in enumerate(mounts)
                if i != j and (a == b or a.startswith(b.rstrip("/") + "/"))
            }
        )
        if overlap_mounts:
            idx = max(i for i, m in enumerate(mounts) if m in overlap_mounts)
            self._fact_span(
                spans, "facts.weka_mount_overlap", ("launch", "weka_mounts", idx, "mount_path")
            )
        # normalised first: "/weka/x/../../etc" is /etc, not a path under /weka
        norm = {s: posixpath.normpath(s) for s in _strings(scan) if s.startswith("/")}
        weka = sorted({n for n in norm.values() if n.startswith("/weka/")})
        overlap = sorted(set(launch["env"]) & set(launch["secrets"]))
        if overlap:
            self._fact_span(
                spans, "facts.env_secret_overlap", ("launch", "secrets", overlap[0]), key=True
            )
        unmounted = [w for w in weka if not any(_under(w, m) for m in mounts)]
        deterministic = (c.get("native") or {}).get("sglang", {}).get(
            "enable_deterministic_inference"
        ) is True
        if deterministic:
            self._fact_span(
                spans,
                "facts.sglang_deterministic",
                ("native", "sglang", "enable_deterministic_inference"),
            )
        for orig, n in norm.items():  # point at an unmounted path first
            span = self._find_string_span(orig) if n in unmounted else None
            if span is not None:
                spans.setdefault("facts.weka_paths", span)
        for orig, n in norm.items():
            span = self._find_string_span(orig) if n in weka else None
            if span is not None:
                spans.setdefault("facts.weka_paths", span)
        root_system = _system_path(c["output"]["root"])
        if root_system:
            self._fact_span(spans, "facts.output_root_system", ("output", "root"))
        root_outside = not root_system and _outside_root(
            c["output"]["root"], [posixpath.normpath(m) for m in mounts], os.getcwd()
        )
        if root_outside:
            self._fact_span(spans, "facts.output_root_outside", ("output", "root"))
        judges = c["judges"]
        bindings = c["judging"]["bindings"]
        unknown_j = sorted({b["judge"] for b in bindings.values()} - set(judges))
        unknown_r = sorted({b["rubric"] for b in bindings.values()} - set(c["rubrics"]))
        for verifier, b in bindings.items():
            if b["judge"] in unknown_j:
                self._fact_span(
                    spans,
                    "facts.unknown_binding_judges",
                    ("judging", "bindings", verifier, "judge"),
                )
            if b["rubric"] in unknown_r:
                self._fact_span(
                    spans,
                    "facts.unknown_binding_rubrics",
                    ("judging", "bindings", verifier, "rubric"),
                )
        bound = sorted({b["judge"] for b in bindings.values()} & set(judges))
        managed = {n: j["gpus"] for n, j in judges.items() if j["mode"] == "managed" and n in bound}
        over = []
        for verifier, b in bindings.items():
            j, r = judges.get(b["judge"]), c["rubrics"].get(b["rubric"])
            if j and r and r["max_response_tokens"] >= j["max_context_length"]:
                over.append(verifier)
                self._fact_span(
                    spans,
                    "facts.rubric_over_context",
                    ("rubrics", b["rubric"], "max_response_tokens"),
                )
        yarn = [
            n
            for n, j in judges.items()
            if j["mode"] == "managed"
            and j["context_extension"] == "qwen3-yarn-128k"
            and (j["model"] != "Qwen/Qwen3-32B" or j["max_context_length"] > 131072)
        ]
        for n in yarn:
            self._fact_span(spans, "facts.yarn_misuse", ("judges", n, "context_extension"))
        embedded = {n: j for n, j in judges.items() if j.get("engine") == "embedded"}
        embedded_tp = sorted(n for n, j in embedded.items() if j["gpus"] > 1)
        embedded_yarn = sorted(n for n, j in embedded.items() if j["context_extension"] != "none")
        for n in embedded_tp:
            self._fact_span(spans, "facts.embedded_judge_tp", ("judges", n, "gpus"))
        for n in embedded_yarn:
            self._fact_span(spans, "facts.embedded_judge_yarn", ("judges", n, "context_extension"))
        widest = max(managed.values(), default=0)
        for n, g in managed.items():
            if g == widest:
                self._fact_span(spans, "facts.managed_judge_max_gpus", ("judges", n, "gpus"))
        if judges:
            self._fact_span(spans, "facts.judge_names", ("judges", sorted(judges)[0]), key=True)
        tasks = [t["task"] for t in c["data"]["tasks"] or []]
        dup = sorted({t for t in tasks if tasks.count(t) > 1})
        if dup:
            idx = [i for i, t in enumerate(tasks) if t == dup[0]][1]
            self._fact_span(spans, "facts.duplicate_tasks", ("data", "tasks", idx, "task"))
        names = [e["name"] for e in c["data"]["eval"]]
        dup_sets = sorted({n for n in names if names.count(n) > 1})
        if dup_sets:
            idx = [i for i, n in enumerate(names) if n == dup_sets[0]][1]
            self._fact_span(spans, "facts.duplicate_eval_sets", ("data", "eval", idx, "name"))
        ev_tasks = [t["task"] for t in c["evaluation"]["tasks"]]
        dup_ev = sorted({t for t in ev_tasks if ev_tasks.count(t) > 1})
        if dup_ev:
            idx = [i for i, t in enumerate(ev_tasks) if t == dup_ev[0]][1]
            self._fact_span(
                spans, "facts.duplicate_eval_tasks", ("evaluation", "tasks", idx, "task")
            )
        cred_keys = []
        for i, t in enumerate(c["evaluation"]["tasks"]):
            for table in ("generation", "scoring"):
                for key in t[table]:
                    if _credential_like(str(key)):
                        cred_keys.append(f"evaluation.tasks[{i}].{table}.{key}")
                        self._fact_span(
                            spans,
                            "facts.eval_credential_keys",
                            ("evaluation", "tasks", i, table, key),
                            key=True,
                        )
        cache_root = c["compiler_cache"]["shared_root"]
        cache_no_ttl = bool(
            cache_root
            and cache_root.startswith("/weka/")
            and not any(_TTL_COMPONENT.fullmatch(part) for part in cache_root.split("/"))
        )
        if cache_no_ttl:
            self._fact_span(
                spans, "facts.compiler_cache_root_without_ttl", ("compiler_cache", "shared_root")
            )
        ev = c["evaluation"]
        background_fields = [k for k in ("image", "revision") if ev[k] is not None]
        if ev["tasks"]:
            background_fields.append("tasks")
        shared_eval_sources = []
        for i, t in enumerate(c["data"]["tasks"] or []):
            if t.get("eval_count"):
                shared_eval_sources.append(f"data.tasks[{i}].eval_count")
                self._fact_span(
                    spans, "facts.shared_eval_sources", ("data", "tasks", i, "eval_count")
                )
        if c["data"]["eval"]:
            shared_eval_sources.append("data.eval")
            self._fact_span(spans, "facts.shared_eval_sources", ("data", "eval"))
        reserved = {
            "--model",
            "--model-path",
            "--tokenizer-path",
            "--port",
            "--host",
            "--tp",
            "--tp-size",
        }
        bad_args = [a for a in ev["server_args"] if a.split("=", 1)[0] in reserved]
        if bad_args:
            self._fact_span(spans, "facts.eval_reserved_server_args", ("evaluation", "server_args"))
        return (
            {
                "weka_paths": weka,
                "weka_unmounted": unmounted,
                "sglang_deterministic": deterministic,
                "weka_mount_paths": mounts,
                "weka_mount_overlap": overlap_mounts,
                "env_secret_overlap": overlap,
                "has_eval_data": has_eval,
                "shared_eval_sources": shared_eval_sources,
                "judge_names": sorted(judges),
                "bound_judges": bound,
                "unknown_binding_judges": unknown_j,
                "unknown_binding_rubrics": unknown_r,
                "managed_judge_max_gpus": widest,
                "managed_judge_gpus": sum(managed.values()),
                "rubric_over_context": over,
                "yarn_misuse": yarn,
                "embedded_judge_tp": embedded_tp,
                "embedded_judge_yarn": embedded_yarn,
                "duplicate_tasks": dup,
                "duplicate_eval_sets": dup_sets,
                "duplicate_eval_tasks": dup_ev,
                "eval_credential_keys": cred_keys,
                "compiler_cache_root_without_ttl": cache_no_ttl,
                "num_experts": self._num_experts(),
                "background_only_fields": background_fields,
                "eval_reserved_server_args": bad_args,
                "output_root_system": root_system,
                "output_root_outside": root_outside,
                "builtin_model": c["model"]["source"].startswith("builtin:"),
                "builtin_base": _builtin_base(c["model"]["source"]),
                "builtin_bad_overrides": _builtin_bad_overrides(c["model"]["source"]),
                **self._source_facts(),
                **self._teacher_facts(spans),
            },
            spans,
        )

    def _teacher_facts(self, spans: dict[str, Span]) -> dict[str, Any]:
        from compiler.resolve.teacher import teacher_facts

        out = teacher_facts(
            self.config,
            self.student_info,
            dict(self.source_info.shape),
            self.given_teacher_facts,
            written=self.written_teacher_source,
        )
        for fact in (
            "teacher_source_problem",
            "teacher_tokenizer_mismatch",
            "teacher_vocab_mismatch",
        ):
            if out[fact]:
                self._fact_span(spans, f"facts.{fact}", ("teacher", "source"))
        return out

    def _num_experts(self) -> int:
        """Experts per MoE layer (0: dense or unknown): builtin table / override, or the
        readable checkpoint's config."""
        from contract.spec.constants import BUILTIN_MODELS

        source = self.config["model"]["source"]
        if source.startswith("builtin:"):
            base, _, query = source.removeprefix("builtin:").partition("?")
            for part in filter(None, query.split("&")):
                key, _, value = part.partition("=")
                if key == "num_experts" and value.isdigit():
                    return int(value)
            experts: Any = BUILTIN_MODELS.get(base, {}).get("experts", 0)
            return int(experts)
        return int(self.source_info.shape.get("experts", 0))

    def _source_facts(self) -> dict[str, Any]:
        """What the readable checkpoint says (all empty when it is not readable)."""
        from compiler.spec.model_source import NO_HF_EXPORT, SGLANG_NO_RECURRENT

        m, info = self.config["model"], self.source_info
        export = info.export_problem
        if m["source"].startswith("builtin:") or m["architecture"] == "hybrid_moe":
            # A declared hybrid MoE has no HF form whether or not the checkpoint is readable here.
            export = export or NO_HF_EXPORT.get(str(m["architecture"]), "")
        return {
            "model_source_problem": info.problem,
            "model_source_family": info.family,
            "model_template_problem": info.template_problem,
            "model_hf_export_problem": export,
            "model_source_shape": dict(info.shape),
            # GatedDeltaNet layers: recurrent state per sequence (max_mamba_cache_size bounds
            # how many sequences hold one), and a model the pinned SGLang cannot serve
            "model_recurrent_layers": info.recurrent_layers,
            "model_sglang_problem": SGLANG_NO_RECURRENT if info.recurrent_layers else "",
        }

    def _fact_span(
        self, spans: dict[str, Span], fact: str, path: tuple[Any, ...], key: bool = False
    ) -> None:
        found = self.bound.writer(path) or self.bound.locate(path)
        if found is not None and fact not in spans:
            spans[fact] = found[1].key_span if key else found[1].value.span

    def _find_string_span(self, value: str) -> Span | None:
        for layer in reversed(self.bound.layers):
            for _path, entry in layer.doc.leaves():
                node = entry.value
                items = getattr(node, "items", None)
                if getattr(node, "value", None) == value:
                    return node.span
                if items:
                    for it in items:
                        if getattr(it, "value", None) == value:
                            return it.span
        return None

    # -- the plan ---------------------------------------------------------------------
    def plan(self, info: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
        from compiler.resolve.placement import PlacementInput, place
        from compiler.resolve.teacher import active as teacher_active

        c = self.config
        tr, inf, opt, asy, launch = (
            c["trainer"],
            c["inference"],
            c["optimizer"],
            c["async"],
            c["launch"],
        )
        judges = tuple(
            (n, c["judges"][n]["gpus"])
            for n in facts["bound_judges"]
            if c["judges"][n]["mode"] == "managed"
        )
        explicit_gpr = (
            launch["gpus_per_replica"] if "launch.gpus_per_replica" in self.explicit else None
        )
        placement = place(
            PlacementInput(
                trainer_nodes=tr["nodes"],
                trainer_gpus=tr["gpus"],
                cpu_processes=tr["cpu_processes"],
                inference_gpus=inf["gpus"],
                tensor_parallel=inf["tensor_parallel"],
                num_engines=inf["num_engines"],
                colocated=inf["placement"] == "colocated",
                router=inf["router"],
                judges=judges,
                gpus_per_replica=explicit_gpr,
                engine_nodes=inf["nodes"],
                teacher_gpus=c["teacher"]["gpus"] if teacher_active(c) else None,
            )
        )
        P, S, G = inf["prompts_per_collection"], inf["samples_per_prompt"], inf["global_batch_size"]
        world = placement["trainer"]["world_size"]
        steps = opt["steps_per_collection"]
        batch = {
            "prompts_per_collection": P,
            "samples_per_prompt": S,
            "samples_per_collection": P * S,
            "global_batch_size": G,
            "optimizer_steps_per_collection": steps,
            "total_optimizer_steps": c["training"]["num_rollouts"] * steps,
            "trainer_world_size": world,
            "samples_per_rank_per_step": G // world if world else None,
            "micro_batch_size": tr["micro_batch_size"],
        }
        lengths = {
            "max_context_length": inf["max_context_length"],
            "max_prompt_length": inf["max_prompt_length"],
            "max_response_length": inf["max_response_length"],
            "packing_max_tokens": tr["packing_max_tokens"],
            "eval_max_response_length": c["evaluation"]["max_response_length"],
            "token_pool": inf["max_total_tokens"],
            "full_context_slots_per_engine": inf["max_total_tokens"] // inf["max_context_length"],
        }
        engines = inf["num_engines"]
        slots = min(inf["server_concurrency"], inf["max_running_requests"])
        budget = asy["producer_budget"]
        groups = max(budget // S, 1)
        buffer_groups = math.floor(asy["buffer_factor"] * P)
        asy_plan = {
            "enabled": asy["enabled"],
            "engines": engines,
            "global_http_slots": engines * inf["server_concurrency"],
            "requested_engine_slots": engines * inf["max_running_requests"],
            "usable_slots": engines * slots,
            "producer_sample_budget": budget,
            "producer_group_budget": groups,
            "producer_budget_whole_groups": budget % S == 0,
            "completed_buffer_groups": buffer_groups,
            "completed_buffer_samples": buffer_groups * S,
            "max_policy_lag": asy["max_policy_lag"],
            "lag_window_samples": (asy["max_policy_lag"] + 1) * G,
            "submission_granularity": asy["submission_granularity"],
            "publication_mode": asy["publication_mode"],
            "off_policy_correction": asy["off_policy_correction"],
        }
        scoring = {
            "standalone": opt["scoring_pass"],
            "reason": (
                "steps_per_collection != 1"
                if steps != 1
                else "kl_coef > 0"
                if opt["kl_coef"] > 0
                else "explicit"
                if opt["scoring_pass"]
                else "skipped: old logprobs come from the training forward"
            ),
            "check_interval": opt["scoring_check_interval"],
            "check_tolerance": opt["scoring_check_tolerance"],
        }
        ev = c["evaluation"]
        milestones: list[int] = []
        if ev["mode"] == "background":
            total = batch["total_optimizer_steps"]
            ms = {0} if ev["initial"] else set()
            intervals = [t["interval"] or ev["interval"] for t in ev["tasks"]] or [ev["interval"]]
            for iv in intervals:
                ms.update(range(iv, total + 1, iv))
            if ev["final"]:
                ms.add(total)
            milestones = sorted(ms)
        evaluation = {
            "mode": ev["mode"],
            "interval": c["training"]["eval_interval"]
            if ev["mode"] == "shared"
            else ev["interval"],
            "milestones": milestones,
            "has_eval_data": facts["has_eval_data"],
        }
        return {
            "placement": placement,
            "batch": batch,
            "lengths": lengths,
            "async": asy_plan,
            "scoring_pass": scoring,
            "evaluation": evaluation,
            "memory": _memory(c, info, placement, facts["teacher_source_shape"]),
        }


def _memory(
    c: dict[str, Any], info: dict[str, Any], placement: dict[str, Any], teacher: dict[str, Any]
) -> dict[str, Any]:
    """The per-GPU memory estimate and its parts (``compiler.resolve.memory``)."""
    from compiler.resolve.memory import estimate

    return estimate(c, info, placement, teacher)


def resolve(
    bound: Bound,
    spec_path: str,
    lock: dict[str, Any] | None = None,
    source_info: SourceInfo | None = None,
    teacher_facts: dict[str, Any] | None = None,
) -> Resolved:
    """``source_info``: what the model checkpoint said at compile time (re-derivation on
    another machine must not depend on whether the checkpoint is readable there)."""
    if lock is None:
        from compiler.resources import runtime_lock_path

        lock = json.loads(runtime_lock_path().read_text())
    resolver = _Resolver(bound, spec_path, lock)
    resolver.given_source_info = source_info
    resolver.given_teacher_facts = teacher_facts
    return resolver.run()


__all__ = ["Resolved", "dotted", "field_paths", "resolve"]
