"""Golden snapshots: each example spec -> manifest -> Beaker YAML.

Update after an intended change with:  .venv/bin/python tests/golden/golden.py --update
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
EXAMPLES = sorted((ROOT / "specs" / "examples").glob("*.toml"))


def render(spec: Path) -> dict[str, str]:
    """file name -> text for one example, compiled from the repository root."""
    sys.path.insert(0, str(ROOT))
    from compiler.emit.beaker import render_beaker
    from compiler.manifest.manifest import manifest_bytes
    from compiler.pipeline import compile_spec

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = compile_spec(spec.relative_to(ROOT))
        manifest = result.manifest()
    finally:
        os.chdir(cwd)
    text = manifest_bytes(manifest).decode("utf-8")
    files = {"manifest.json": text}
    for name, body in render_beaker(manifest, text).files.items():
        files[f"beaker-{name}"] = body
    return files


def update() -> None:
    for spec in EXAMPLES:
        out = SNAPSHOTS / spec.stem
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            old.unlink()
        for name, text in render(spec).items():
            (out / name).write_text(text, encoding="utf-8")
        print(f"updated {out.relative_to(ROOT)}")


if __name__ == "__main__":
    if "--update" not in sys.argv:
        sys.exit("usage: python tests/golden/golden.py --update")
    update()
