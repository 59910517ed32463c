"""parse -> overrides -> bind (recipe layer + spec) -> resolve -> check, collecting every
diagnostic. ``compile_spec`` never raises for user errors; inspect ``result.ok``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compiler.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span, did_you_mean


@dataclass
class CompileResult:
    source_path: str
    overrides: list[str]
    diagnostics: list[Diagnostic] = field(default_factory=list)
    sources: SourceMap = field(default_factory=SourceMap)
    source_sha256: str | None = None
    recipe: str | None = None
    recipe_sha256: str | None = None
    bound: Any = None  # compiler.spec.bind.Bound
    resolved: Any = None  # compiler.resolve.resolve.Resolved
    ruleset: Any = None  # compiler.rules.RuleSet
    lock: dict[str, Any] = field(default_factory=dict)
    # seconds per pipeline stage of this compile (benchmarks/compile_bench.py prints them)
    timings: dict[str, float] = field(default_factory=dict)
    _manifest: dict[str, Any] | None = None

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.is_error]

    @property
    def warnings(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if d.severity == "warning"]

    @property
    def ok(self) -> bool:
        return self.resolved is not None and not self.errors

    def manifest(self) -> dict[str, Any]:
        """The manifest (raises DiagnosticError when the compile has errors)."""
        if not self.ok:
            err = DiagnosticError(self.errors or [Diagnostic("error", "compile", "compile failed")])
            err.sources = self.sources  # type: ignore[attr-defined]
            raise err
        if self._manifest is None:
            from compiler.manifest.manifest import build_manifest

            self._manifest = build_manifest(self)
        return self._manifest

    def raise_for_errors(self) -> None:
        if self.errors:
            err = DiagnosticError(self.diagnostics)
            err.sources = self.sources  # type: ignore[attr-defined]
            raise err


class ResolvedView:
    """The rules' view of a resolved config: config paths, ``plan.*`` and ``facts.*``."""

    def __init__(self, resolved: Any, bound: Any = None):
        self.r = resolved
        self.bound = bound  # for section headers: a rule `at data` points at `[data]`

    def get(self, path: str) -> Any:
        from compiler.rules import UNSET

        head, _, rest = path.partition(".")
        if head == "facts":
            return self.r.facts.get(rest, UNSET)
        node: Any = self.r.plan if head == "plan" else self.r.config
        parts = rest.split(".") if head == "plan" else path.split(".")
        for part in parts:
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                return UNSET
        return node

    def is_set(self, path: str) -> bool:
        if path in self.r.explicit:
            return True
        prefix = path + "."
        return any(p.startswith(prefix) for p in self.r.explicit)

    def span(self, path: str) -> Span | None:
        if path.startswith("facts."):
            span: Span | None = self.r.fact_spans.get(path)
            return span
        span = self.r.spans.get(path)
        if span is None and "." not in path and self.bound is not None:
            found = self.bound.writer((path,))
            if found is not None:
                header: Span | None = found[1].key_span
                return header
        if span is None:
            prefix = path + "."
            for p, s in self.r.spans.items():
                if p.startswith(prefix):
                    return s
        if span is None:
            span = self._input_span(path, 0)
        return span

    def _input_span(self, path: str, depth: int) -> Span | None:
        """A derived value is positioned at the first user-written input it came from."""
        prov = self.r.provenance.get(path)
        if prov is None or depth > 8:
            return None
        for inp in prov.inputs:
            found = self.r.spans.get(inp) or self._input_span(inp, depth + 1)
            if found is not None:
                return found
        return None


def _flatten(prefix: str, node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        out.add(prefix) if prefix else None
        for k, v in node.items():
            _flatten(f"{prefix}.{k}" if prefix else k, v, out)
    else:
        out.add(prefix)


def known_fields(resolved: Any) -> set[str]:
    """Every path a rule may name: config fields, plan values and facts."""
    from compiler.resolve.resolve import field_paths

    out = set(field_paths(resolved.config))
    _flatten("plan", resolved.plan, out)
    out.update(f"facts.{k}" for k in resolved.facts)
    # judges/rubrics/bindings are maps: rules talk about them through facts
    out.update({"judges", "rubrics", "judging.bindings"})
    return out


def _read(path: Path, shown: str) -> bytes:
    from contract.safe_read import SPEC_LIMIT, read_regular

    try:
        return read_regular(path, SPEC_LIMIT)
    except OSError as exc:
        raise DiagnosticError(
            Diagnostic("error", "spec-io", f"cannot read {shown}: {exc.strerror or exc}")
        ) from exc


def _parse(text: str, source: str) -> Any:
    from compiler.parse import parse_document

    return parse_document(text, source)


def load_recipe_layer(name: str, span: Span | None) -> tuple[Any, str, str, bytes]:
    """(Layer, source name, text, bytes) of ``specs/recipes/NAME.toml``."""
    from compiler.resources import recipes_dir
    from compiler.spec.bind import Layer

    rdir = recipes_dir()
    names = sorted(p.stem for p in rdir.glob("*.toml"))
    # a recipe is a catalog name, never a path: "/etc/x" or "../x" must not load a file
    if name not in names:
        raise DiagnosticError(
            Diagnostic(
                "error",
                "unknown-recipe",
                f"unknown recipe {name!r}"
                + (
                    "; a recipe is a catalog name, not a path"
                    if "/" in name or "\\" in name
                    else ""
                ),
                span,
                help=did_you_mean(name, names) or (f"available recipes: {', '.join(names)}",),
            )
        )
    data = (rdir / f"{name}.toml").read_bytes()
    source = f"recipe {name}"
    text = data.decode("utf-8")
    doc = _parse(text, source)
    return Layer("recipe", doc, recipe=name), source, text, data


def compile_spec(
    path: str | Path, overrides: Sequence[str] = (), *, lock: dict[str, Any] | None = None
) -> CompileResult:
    """Compile the spec at ``path`` (kept as given in the manifest) with ``--set`` overrides."""
    shown = str(path)
    result = CompileResult(source_path=shown, overrides=list(overrides))
    try:
        _compile(result, Path(path), shown, lock)
    except DiagnosticError as exc:
        result.diagnostics.extend(exc.diagnostics)
        extra = getattr(exc, "sources", None)
        if isinstance(extra, SourceMap):
            result.sources.texts.update(extra.texts)
        result.resolved = None if result.errors else result.resolved
    return result


def _compile(result: CompileResult, path: Path, shown: str, lock: dict[str, Any] | None) -> None:
    t0 = time.perf_counter()

    def stage(name: str) -> None:
        nonlocal t0
        now = time.perf_counter()
        result.timings[name] = now - t0
        t0 = now

    from compiler.spec.bind import Layer, bind

    data = _read(path, shown)
    result.source_sha256 = hashlib.sha256(data).hexdigest()
    from compiler.parse.source import decode_bytes

    text = decode_bytes(data, shown)  # invalid UTF-8: positioned at the first bad byte
    result.sources.add(shown, text)
    for i, ov in enumerate(result.overrides, start=1):
        result.sources.add(f"override {i}", ov)
    doc = _parse(text, shown)
    if result.overrides:
        from compiler.parse.overrides import apply_overrides

        doc = apply_overrides(doc, list(result.overrides))
    layers = []
    recipe_entry = doc.root.entries.get("recipe")
    if recipe_entry is not None and isinstance(recipe_entry.value.to_python(), str):
        name = recipe_entry.value.to_python()
        try:
            layer, source, rtext, rdata = load_recipe_layer(name, recipe_entry.value.span)
        except DiagnosticError as exc:
            # without its recipe the spec is incomplete: report only the recipe problem
            result.diagnostics.extend(exc.diagnostics)
            return
        else:
            result.sources.add(source, rtext)
            result.recipe = name
            result.recipe_sha256 = hashlib.sha256(rdata).hexdigest()
            layers.append(layer)
    layers.append(Layer("spec", doc))
    stage("parse")
    bound = bind(layers)
    from compiler.spec.secrets import bound_span, mask_message, mask_sources, scan

    leaked, values = scan(bound.merged, bound_span(bound))
    if leaked:
        mask_sources(result.sources, values)
        bound.diagnostics[:] = mask_message(bound.diagnostics, values)
        bound.spec = None
    stage("bind")
    result.bound = bound
    result.diagnostics.extend(bound.diagnostics)
    result.diagnostics.extend(leaked)
    if bound.spec is None or result.errors:
        return
    if lock is None:
        from compiler.resources import runtime_lock_path

        lock = json.loads(runtime_lock_path().read_text())
    result.lock = lock
    from compiler.resolve.resolve import resolve

    resolved = resolve(bound, shown, lock)
    result.resolved = resolved
    stage("resolve")
    result.diagnostics.extend(_native_checks(resolved, bound))
    from compiler.resolve.data_files import missing_data_files

    result.diagnostics.extend(missing_data_files(resolved.config, bound))
    stage("native")
    result.diagnostics.extend(check(resolved, result))
    stage("rules")
    if not result.errors:
        result.diagnostics.extend(_artifact_checks(result, resolved))
        stage("artifacts")


# Spec fields behind the Beaker spec's keys (a Beaker-model message names the latter).
_BEAKER_FIELDS = (
    ("launch.coordination.startup_timeout", "synchronizedStartTimeout"),
    ("launch.min_runtime", "minRuntime"),
    ("launch.timeout", "timeout"),
    ("launch.shared_memory", "sharedMemory"),
    ("launch.priority", "priority"),
    ("launch.cluster", "cluster"),
    ("launch.image", "image"),
    ("launch.budget", "budget"),
    ("launch.env", "envVars"),
    ("launch.secrets", "secret"),
    ("launch.weka_mounts", "mountPath"),
    ("launch.gpus_per_replica", "gpuCount"),
)


def _artifact_checks(result: CompileResult, resolved: Any) -> list[Diagnostic]:
    """Render the Beaker specs in memory so validate catches what compile would emit.

    A Beaker-level refusal becomes a diagnostic at the spec field it names (else at
    ``[launch]``), never an internal error after the manifest was written.
    """
    from compiler.emit.beaker import render_beaker
    from compiler.manifest.manifest import manifest_bytes

    try:
        manifest = result.manifest()
        render_beaker(manifest, manifest_bytes(dict(manifest)).decode("utf-8"))
    except (DiagnosticError, ValueError) as exc:  # the Beaker model's refusal
        if isinstance(exc, DiagnosticError):
            message = [d.message for d in exc.diagnostics]
        else:
            message = str(exc).strip().splitlines()
        view = ResolvedView(resolved)
        where = "launch"
        for path, key in _BEAKER_FIELDS:
            if any(key in m for m in message):
                where = path
                break
        return [
            Diagnostic(
                "error",
                "beaker-spec",
                "the Beaker spec for this run would be refused: " + " ".join(message[:3]),
                span=view.span(where),
                help=(f"check {where}",),
            )
        ]
    return []


def _native_checks(resolved: Any, bound: Any) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for tool in ("sglang", "olmo_core"):
        options = resolved.config["native"][tool]
        if not options:
            continue
        try:  # only specs with native options pay for the option tables
            from compiler.spec.native_options import check_native, flatten_options
        except ImportError:
            return []
        spans: dict[str, Span | None] = {}
        for key in flatten_options(tool, options):  # nested tables: the inner key's line
            parts = key.split(".")
            found = bound.writer(("native", tool, *parts)) or bound.writer(
                ("native", tool, parts[0])
            )
            spans[f"native.{tool}.{key}"] = found[1].key_span if found else None
        out.extend(check_native(tool, options, spans) or [])
    return out


def check(resolved: Any, result: CompileResult | None = None) -> list[Diagnostic]:
    """Evaluate the rule files against a resolved config."""
    from compiler.resources import rules_dir
    from compiler.rules import evaluate, load_rules

    ruleset = load_rules(rules_dir(), known_fields(resolved))
    if result is not None:
        result.ruleset = ruleset
    bound = result.bound if result is not None else None
    out = [f.to_diagnostic() for f in evaluate(ruleset, ResolvedView(resolved, bound))]
    if result is not None:
        # a finding about defaults and plan values alone still points into the spec: its top
        start = Span(result.source_path, 1, 1, 1, 2)
        out = [d if d.span is not None else replace(d, span=start) for d in out]
    return out
