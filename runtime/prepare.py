"""`python -m runtime.prepare MANIFEST`: the CPU preparation job (beaker/prepare.yaml).

Runs before GPUs are held: verifies the manifest, writes the immutable data manifest under
output.root (prepared/data), and converts an OLMo-core checkpoint to the HF layout the
engines serve when the model is given in OLMo-core format.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_USER = 2
EXIT_RUNTIME = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime.prepare")
    parser.add_argument("manifest", type=Path)
    args = parser.parse_args(argv)

    from compiler.trust import DiagnosticError, load_trusted, render_all

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
        from runtime.models import export_hf, load_model

        target = Path(
            manifest["paths"].get("prepared_hf")
            or Path(config["output"]["root"]) / "prepared" / "hf"
        )
        loaded = load_model(config["model"]["source"])
        export_hf(loaded, loaded.tokenizer, target)
        print(f"converted {config['model']['source']} -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
