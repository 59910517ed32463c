"""`python -m runtime.entrypoints.prepare MANIFEST`: the CPU preparation job (beaker/prepare.yaml).

Runs before GPUs are held: verifies the manifest (its own job: it is the entry), writes the immutable data manifest under
output.root (prepared/data), and converts an OLMo-core checkpoint to the HF layout SGLang
serves (prepared/hf) through OLMo-core's converters. A model with no transformers
architecture (hybrid MoE) is never converted: the embedded engines read the checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from contract.run import RunContract

EXIT_USER = 2
EXIT_RUNTIME = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.entrypoints.prepare")
    parser.add_argument("manifest", type=Path)
    args = parser.parse_args(argv)

    from runtime.manifest import ManifestError, load

    try:
        contract = load(args.manifest)
    except ManifestError as exc:
        print(f"rlc prepare: error: {exc}", file=sys.stderr)
        return EXIT_USER
    from runtime.data.manifest import DataManifestError, prepare_data

    try:
        prepared = prepare_data(contract.config)
    except DataManifestError as exc:
        print(f"rlc prepare: error: {exc}", file=sys.stderr)
        return EXIT_USER
    print(f"prepared data: {prepared.manifest_path} ({prepared.train_count} training prompts)")
    if contract.config.model.format == "olmo_core":
        return _convert(contract)
    return 0


def _convert(contract: RunContract) -> int:
    """OLMo-core checkpoint -> HF directory for SGLang (embedded engines and the trainer read
    the checkpoint itself, with the tokenizer from model.hf_template)."""
    model = contract.config.model
    if contract.config.inference.engine != "sglang":
        print(f"no conversion: embedded engines read {model.source} directly")
        return 0
    from runtime.models import ModelLoadError, export_hf, load_model
    from runtime.models.hf import UnsupportedHFModel

    target = Path(contract.paths.prepared) / "hf"
    try:
        loaded = load_model(
            model.source,
            architecture=model.architecture,
            hf_template=model.hf_template,
        )
        export_hf(loaded, loaded.tokenizer, target)
    except (ModelLoadError, UnsupportedHFModel) as exc:
        print(
            f"rlc prepare: error: cannot convert {model.source} for SGLang: {exc}",
            file=sys.stderr,
        )
        return EXIT_USER
    print(f"converted {model.source} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
