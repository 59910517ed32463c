"""The import graph of `rlc_cli`, `compiler`, `runtime` and `contract`, built from the
source with `ast` (nothing is imported). The layers, with no named exceptions: no import
cycle; `contract` (the typed compiler/runtime contract) imports none of the others; the
compiler never imports runtime or rlc_cli; runtime imports only the verification entry of
the compiler (`compiler.manifest.trust` and its error type); nothing imports rlc_cli (the
`rlc` command line on top).

Imports under ``if TYPE_CHECKING:`` count too: a cycle through annotations is still two
modules that cannot be understood apart.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rlc_cli", "compiler", "runtime", "contract")
# The `rlc` command line (entry point, its commands, Beaker submission and receipts): the
# layer on top, the only one that uses both the compiler and the runtime.
CLI = ("rlc_cli",)
# What the runtime may import from the compiler: `compiler.manifest.trust` verifies and
# re-derives a manifest (once per run, at its entry) and derives the background evaluator's
# job from a verified one, using the compiler inside. Everything else the runtime reads of
# a manifest comes typed from the `contract` package.
CONTRACT = {"compiler.manifest.trust", "compiler.diagnostics"}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            mods[name] = path
    return mods


def _imported(name: str, path: Path, mods: dict[str, Path]) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: set(_imported(name, path, mods)) for name, path in mods.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _in(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_graph_sees_known_edges() -> None:
    graph = _graph()
    assert "compiler.manifest.trust" in graph["runtime.manifest"]
    assert "contract.run" in graph["runtime.manifest"]
    assert "contract.spec.root" in graph["contract.run"]
    assert "compiler.manifest.manifest" in graph["compiler.pipeline"]
    assert "runtime.rollout.driver" in graph["runtime.entrypoints.execute"]
    assert "runtime.node.supervisor" in graph["runtime.node.protocol"]  # an annotation-only import
    assert "compiler.diagnostics" in graph["rlc_cli.main"]
    assert "runtime.launch.beaker_client" in graph["rlc_cli.launch.beaker"]


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def test_cycle_detection_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_compiler_never_imports_runtime_or_the_cli() -> None:
    upward = sorted(
        f"{a} -> {b}"
        for a, deps in _graph().items()
        if _in(a, ("compiler",))
        for b in deps
        if _in(b, ("runtime", *CLI))
    )
    assert upward == []


def test_runtime_reaches_compiler_only_through_the_contract() -> None:
    beyond = sorted(
        f"{a} -> {b}"
        for a, deps in _graph().items()
        if _in(a, ("runtime",))
        for b in deps
        if _in(b, ("compiler", *CLI)) and b not in CONTRACT
    )
    assert beyond == []


def test_the_contract_packages_import_nothing() -> None:
    """Importing `compiler.manifest.trust` first runs `compiler/__init__.py` and
    `compiler/manifest/__init__.py`; they import nothing, so the runtime reaches only what the
    contract names."""
    graph = _graph()
    packages = {".".join(c.split(".")[:i]) for c in CONTRACT for i in range(1, c.count(".") + 1)}
    assert packages == {"compiler", "compiler.manifest"}
    assert {p: sorted(graph[p]) for p in sorted(packages) if graph[p]} == {}


def test_the_contract_imports_none_of_the_others() -> None:
    """The typed contract is the bottom layer: both sides import it, it imports neither."""
    upward = sorted(
        f"{a} -> {b}"
        for a, deps in _graph().items()
        if _in(a, ("contract",))
        for b in deps
        if _in(b, ("compiler", "runtime", *CLI))
    )
    assert upward == []
    assert _graph()["contract"] == set()  # importing the package imports nothing


def test_only_the_runtimes_entry_verifies_through_the_compiler() -> None:
    """One module of the runtime runs the compiler's verification (`runtime.manifest`); the
    background evaluator's job is rendered by it too (`runtime.launch.evaluator`)."""
    users = sorted(
        a
        for a, deps in _graph().items()
        if _in(a, ("runtime",)) and "compiler.manifest.trust" in deps
    )
    assert users == ["runtime.launch.evaluator", "runtime.manifest"]


def test_nothing_imports_the_cli() -> None:
    users = sorted(
        f"{a} -> {b}"
        for a, deps in _graph().items()
        if not _in(a, CLI)
        for b in deps
        if _in(b, CLI)
    )
    assert users == []
