"""`python -m runtime.prepare MANIFEST`: the CPU preparation job (beaker/prepare.yaml).

Runs before GPUs are held: verifies the manifest, writes the immutable data manifest under
output.root (prepared/data), and converts an OLMo-core checkpoint to the HF layout SGLang
serves (prepared/hf) through OLMo-core's converters. A model with no transformers
architecture (hybrid MoE) is never converted: the embedded engines read the checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXIT_USER = 2
EXIT_RUNTIME = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.prepare")
    parser.add_argument("manifest", type=Path)
    args = parser.parse_args(argv)

    from compiler.manifest.trust import DiagnosticError, load_trusted, render_all

    try:
        manifest = load_trusted(args.manifest)
    except DiagnosticError as exc:
        print(render_all(exc.diagnostics), file=sys.stderr)
        return EXIT_USER
    config = manifest["config"]
    from runtime.data.manifest import DataManifestError, prepare_data

    try:
        prepared = prepare_data(config)
    except DiagnosticError as exc:
        print(render_all(exc.diagnostics), file=sys.stderr)
        return EXIT_USER
    except DataManifestError as exc:
        print(f"rlc prepare: error: {exc}", file=sys.stderr)
        return EXIT_USER
    print(f"prepared data: {prepared.manifest_path} ({prepared.train_count} training prompts)")
    if config["model"].get("format") == "olmo_core":
        return _convert(manifest)
    return 0


def _convert(manifest: dict[str, Any]) -> int:
    """OLMo-core checkpoint -> HF directory for SGLang (embedded engines and the trainer read
    the checkpoint itself, with the tokenizer from model.hf_template)."""
    config = manifest["config"]
    model = config["model"]
    if config["inference"]["engine"] != "sglang":
        print(f"no conversion: embedded engines read {model['source']} directly")
        return 0
    from runtime.models import ModelLoadError, export_hf, load_model
    from runtime.models.hf import UnsupportedHFModel

    target = Path(manifest["paths"]["prepared"]) / "hf"
    try:
        loaded = load_model(
            model["source"],
            architecture=model.get("architecture"),
            hf_template=model["hf_template"],
        )
        export_hf(loaded, loaded.tokenizer, target)
    except (ModelLoadError, UnsupportedHFModel) as exc:
        print(
            f"rlc prepare: error: cannot convert {model['source']} for SGLang: {exc}",
            file=sys.stderr,
        )
        return EXIT_USER
    print(f"converted {model['source']} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
