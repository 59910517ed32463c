"""Stage 5, manifest -> artifacts: Beaker experiment specs (`beaker`, validated by
`beaker_model`), and the generated reference files (`docs_gen`, from the field catalog in
`reference`): docs/configuration.md, the rule table, the JSON Schemas."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def emit_artifacts(
    manifest: Mapping[str, Any], out_dir: Path, signature: str | None = None
) -> list[Path]:
    """Write ``beaker/*.yaml`` beside a manifest. Pure function of the manifest (and its
    signature, when signed), written atomically; an unchanged file is left alone."""
    from compiler.emit.beaker import render_beaker
    from compiler.manifest.manifest import manifest_bytes

    text = manifest_bytes(dict(manifest)).decode("utf-8")
    written: list[Path] = []
    beaker_dir = Path(out_dir) / "beaker"
    beaker_dir.mkdir(parents=True, exist_ok=True)
    for name, body in render_beaker(manifest, text, signature).files.items():
        target = beaker_dir / name
        if target.exists() and target.read_text(encoding="utf-8") == body:
            written.append(target)
            continue
        tmp = target.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_text(body, encoding="utf-8")
        os.replace(tmp, target)
        written.append(target)
    return written
