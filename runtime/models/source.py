"""What a model source is, checked from its files alone (no torch, no OLMo-core).

``rlc run`` checks the files before any process starts, in a fraction of a second; the
deeper check (``loader.check_source``: the architecture through OLMo-core's configs) needs
torch and runs while the engines start (``runtime.node.preload``).
"""

from __future__ import annotations

import json
from pathlib import Path

NATIVE_META = "rlc_model.json"


class ModelLoadError(ValueError):
    """The model source cannot be loaded (bad name, missing files, unsupported format)."""


def source_format(source: str) -> str:
    """``builtin`` | ``native`` | ``hf`` | ``olmo_core_dist`` for a source string."""
    if source.startswith("builtin:"):
        return "builtin"
    path = Path(source)
    if not path.is_dir():
        raise ModelLoadError(f"model source {source!r} is neither builtin:NAME nor a directory")
    if (path / NATIVE_META).is_file() or (path / "model" / NATIVE_META).is_file():
        return "native"
    cfg_file = path / "config.json"
    if cfg_file.is_file():
        cfg = json.loads(cfg_file.read_text())
        if "model_type" in cfg:
            return "hf"
        if "model" in cfg and (path / "model_and_optim").is_dir():
            return "olmo_core_dist"
    raise ModelLoadError(
        f"{source}: not a model directory (expected {NATIVE_META}, an HF config.json with "
        "model_type + *.safetensors, or an OLMo-core checkpoint with model_and_optim/)"
    )


def tokenizer_dir(path: Path, hf_template: str | None) -> Path:
    """Where the tokenizer is: beside the weights, else in ``hf_template``."""
    for root in (path, Path(hf_template) if hf_template else None):
        if root is not None and (root / "tokenizer.json").is_file():
            return root
    where = f"{path} or the hf_template {hf_template}" if hf_template else str(path)
    raise ModelLoadError(f"no tokenizer.json in {where} (the tokenizer travels with the model)")


def native_root(path: Path) -> Path:
    """The folder holding a native checkpoint's metadata (itself or its ``model/``)."""
    return path if (path / NATIVE_META).is_file() else path / "model"


def check_source_files(
    source: str, *, hf_template: str | None = None, tokenizer: bool = True
) -> str:
    """Refuse a source whose files are missing or unreadable; its format. The metadata is
    parsed, never the weights (their presence is checked). ``tokenizer=False`` leaves the
    tokenizer's file to the caller (``loader.check_source`` names an unsupported
    architecture before a missing tokenizer)."""
    try:
        fmt = source_format(source)
        path = Path(source)
        if fmt == "native":
            root = native_root(path)
            json.loads((root / NATIVE_META).read_text())["model_config"]
            if not any(root.glob("*.safetensors")):
                raise ModelLoadError(f"{source}: no *.safetensors weights")
        elif fmt == "hf":
            if not any(path.glob("*.safetensors")):
                raise ModelLoadError(f"{source}: no *.safetensors weights")
            json.loads((path / "config.json").read_text())
        if tokenizer and fmt in ("hf", "olmo_core_dist"):
            tokenizer_dir(path, hf_template)
        return fmt
    except ModelLoadError:
        raise
    except KeyError as exc:
        raise ModelLoadError(f"{source}: {NATIVE_META} has no {exc}") from None
    except (OSError, ValueError, TypeError) as exc:  # json errors are ValueErrors too
        raise ModelLoadError(f"{source}: {type(exc).__name__}: {exc}") from None
