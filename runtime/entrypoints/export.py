"""``rlc export RUN_DIR --out DIR [--step N]``: an HF checkpoint from a run's native checkpoint.

Takes the newest complete checkpoint under ``RUN_DIR/checkpoints`` (or the one of step N;
a sharded trainer's ``dist/`` shards are read with the model rebuilt from the manifest the run
filed under ``RUN_DIR/manifests``) and writes what ``transformers.AutoModelForCausalLM.from_pretrained`` loads, through the same
OLMo-core converters as the end-of-run export. ``--out`` must be new or empty: nothing the
user had is overwritten.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ExportError(ValueError):
    """The run has no such checkpoint, the target is in use, or the model has no HF form."""


def checkpoint_model_dir(run_dir: Path, step: int | None) -> tuple[int, Path]:
    """``(step, <checkpoint>/model)`` of the newest (or the given) complete checkpoint."""
    from runtime.checkpoints.layout import list_complete

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


def _load_sharded(run_dir: Path, ckpt: Path) -> Any:
    """A sharded trainer's checkpoint (``dist/``, no model config beside it): rebuild the
    model from the run's filed manifest, then read the shards in this one process."""
    import json

    from olmo_core.distributed.checkpoint import load_model_and_optim_state

    from runtime.models import load_model

    if not (ckpt / "dist").is_dir():
        raise ExportError(f"{ckpt} has neither a model/ directory nor dist/ shards")
    digest = json.loads((ckpt / "meta.json").read_text()).get("digest") or ""
    short = str(digest).removeprefix("sha256:")[:16]
    for path in sorted((run_dir / "manifests").glob(f"*-{short}.json")) if short else []:
        manifest = json.loads(path.read_text())
        if manifest.get("digest") == digest:
            break
    else:
        raise ExportError(
            f"{ckpt} is sharded and {run_dir}/manifests has no manifest {digest or '(none)'}"
        )
    from contract.run import ContractError, parse

    try:
        model = parse(manifest, str(path)).config.model
    except ContractError as exc:
        raise ExportError(str(exc)) from None
    loaded = load_model(model.source, hf_template=model.hf_template)
    load_model_and_optim_state(str(ckpt / "dist"), loaded.model)
    return loaded


def check_export(run_dir: Path, out: Path, step: int | None = None) -> tuple[int, Path]:
    """The arguments' errors, found without torch: ``(step, <checkpoint>/model)``."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty directory; choose a new --out")
    return checkpoint_model_dir(run_dir, step)


def export_run(run_dir: Path, out: Path, step: int | None = None) -> tuple[int, Path]:
    """Write the HF export; returns ``(step, out)``."""
    step_found, model_dir = check_export(run_dir, out, step)
    from runtime.models import ModelLoadError, export_hf, load_model
    from runtime.models.hf import UnsupportedHFModel

    try:
        if model_dir.is_dir():
            loaded = load_model(str(model_dir))
        else:
            loaded = _load_sharded(run_dir, model_dir.parent)
        export_hf(loaded, loaded.tokenizer, out)
    except (ModelLoadError, UnsupportedHFModel) as exc:
        raise ExportError(f"cannot export {model_dir.parent}: {exc}") from exc
    return step_found, out
