"""The import graph of a checkout's `rlc_cli`, `compiler` and `runtime` packages, as numbers.

Why: issue 19 asks for the graph before and after the layering work; the graph is the one
`tests/unit/test_import_graph.py` enforces (built from the source with `ast`, annotation-only
imports included), so this script reuses that test's builder on any checkout:

    git worktree add /tmp/rlc-before 9c4d28a       # the code before the layering commits
    .venv/bin/python benchmarks/import_graph.py /tmp/rlc-before . --out benchmarks/results/import_graph.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests" / "unit"))

import test_import_graph as g  # noqa: E402


def _pkg(name: str) -> str:
    return name.split(".")[0]


def _contract(name: str) -> bool:
    """The manifest contract under its current name or an earlier one (`compiler.trust`
    before the stage packages, `compiler.manifest.trust` after)."""
    leaves = {c.rsplit(".", 1)[-1] for c in g.CONTRACT}
    return name in g.CONTRACT or (_pkg(name) == "compiler" and name.rsplit(".", 1)[-1] in leaves)


def measure(root: Path) -> dict[str, Any]:
    g.ROOT = root.resolve()
    graph = g._graph()
    cycles = g._cycles(graph)
    edges = [(a, b) for a, deps in graph.items() for b in deps]
    # before rlc_cli existed the command line lived in compiler/ (cli.py, commands/), so
    # its imports of the runtime count here: that is the upward edge the layering removed
    compiler_pkg_to_runtime = sorted(
        f"{a} -> {b}" for a, b in edges if _pkg(a) == "compiler" and _pkg(b) == "runtime"
    )
    runtime_up = sorted(
        f"{a} -> {b}"
        for a, b in edges
        if _pkg(a) == "runtime" and _pkg(b) in ("compiler", "rlc_cli") and not _contract(b)
    )
    runtime_contract = sorted(
        f"{a} -> {b}" for a, b in edges if _pkg(a) == "runtime" and _contract(b)
    )
    rev = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "commit": rev,
        "modules": len(graph),
        "edges": len(edges),
        "cycles": cycles,
        "modules_in_cycles": sum(len(c) for c in cycles),
        "compiler_package_to_runtime": compiler_pkg_to_runtime,
        "runtime_to_compiler_beyond_contract": runtime_up,
        "runtime_to_contract": runtime_contract,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("roots", type=Path, nargs="+", help="checkouts to measure, in order")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = [measure(r) for r in args.roots]
    print(
        f"{'commit':<9} {'modules':>7} {'edges':>6} {'cycles':>6} {'in cycles':>9} "
        f"{'compiler pkg->runtime':>21} {'runtime->compiler':>17}"
    )
    for r in rows:
        print(
            f"{r['commit']:<9} {r['modules']:>7} {r['edges']:>6} {len(r['cycles']):>6} "
            f"{r['modules_in_cycles']:>9} {len(r['compiler_package_to_runtime']):>21} "
            f"{len(r['runtime_to_compiler_beyond_contract']):>17}"
        )
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps({"benchmark": "import_graph", "rows": rows}, indent=2) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
