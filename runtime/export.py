"""``rlc export RUN_DIR --out DIR [--step N]``: an HF checkpoint from a run's native checkpoint.

Takes the newest complete checkpoint under ``RUN_DIR/checkpoints`` (or the one of step N)
and writes what ``transformers.AutoModelForCausalLM.from_pretrained`` loads, through the same
OLMo-core converters as the end-of-run export. ``--out`` must be new or empty: nothing the
user had is overwritten.
"""

from __future__ import annotations

from pathlib import Path


class ExportError(ValueError):
    """The run has no such checkpoint, the target is in use, or the model has no HF form."""


def checkpoint_model_dir(run_dir: Path, step: int | None) -> tuple[int, Path]:
    """``(step, <checkpoint>/model)`` of the newest (or the given) complete checkpoint."""
    from runtime.checkpoints.manager import list_complete

    root = run_dir / "checkpoints" if (run_dir / "checkpoints").is_dir() else run_dir
    found = list_complete(root)
    if not found:
        raise ExportError(f"no complete checkpoint under {root}")
    if step is None:
        step_found, path = found[-1]
    else:
        by_step = dict(found)
        if step not in by_step:
            have = ", ".join(str(s) for s, _ in found)
            raise ExportError(f"no complete checkpoint of step {step} under {root} (have: {have})")
        step_found, path = step, by_step[step]
    return step_found, path / "model"


def export_run(run_dir: Path, out: Path, step: int | None = None) -> tuple[int, Path]:
    """Write the HF export; returns ``(step, out)``."""
    from runtime.models import ModelLoadError, export_hf, load_model
    from runtime.models.hf import UnsupportedHFModel

    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty directory; choose a new --out")
    step_found, model_dir = checkpoint_model_dir(run_dir, step)
    try:
        loaded = load_model(str(model_dir))
        export_hf(loaded, loaded.tokenizer, out)
    except (ModelLoadError, UnsupportedHFModel) as exc:
        raise ExportError(f"cannot export {model_dir}: {exc}") from exc
    return step_found, out
