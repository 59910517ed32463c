"""Submit a compiled manifest's Beaker training spec through beaker-py 2.x.

The YAML comes from `compiler.emit.beaker` (the manifest is embedded in it), so what is
submitted is exactly what `rlc compile` wrote and linted. Image aliases are resolved to
immutable IDs at submission and both names are recorded in the receipt.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from compiler.diagnostics import Diagnostic, DiagnosticError
from runtime.launch.receipts import Receipt


def _git_revision(cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def render_train_spec(manifest: dict[str, Any]) -> str:
    from compiler.emit.beaker import render_beaker
    from compiler.manifest import manifest_bytes

    text = manifest_bytes(manifest).decode("utf-8")
    return render_beaker(manifest, text).files["train.yaml"]


def with_launch_id(spec_yaml: str, launch_id: str) -> dict[str, Any]:
    """The spec as data, with the per-submission launch id added to every task's env."""
    data: dict[str, Any] = yaml.safe_load(spec_yaml)
    for task in data.get("tasks", []):
        task.setdefault("envVars", []).append({"name": "RLC_LAUNCH_ID", "value": launch_id})
    return data


def _beaker_client() -> Any:
    try:
        from beaker import Beaker
    except ImportError as exc:
        raise DiagnosticError(
            Diagnostic(
                "error",
                "launch-no-beaker",
                "beaker-py is not installed, so rlc cannot submit to Beaker",
                help=("pip install 'beaker-py>=2.6,<3' (or use `rlc launch --dry-run`)",),
            )
        ) from exc
    try:
        return Beaker.from_env()
    except Exception as exc:  # noqa: BLE001 - beaker-py raises several config errors
        raise DiagnosticError(
            Diagnostic(
                "error",
                "launch-no-credentials",
                f"cannot configure a Beaker client: {exc}",
                help=("set BEAKER_TOKEN or run `beaker config set user_token ...`",),
            )
        ) from exc


def launch(
    manifest: dict[str, Any], manifest_path: Path, *, dry_run: bool
) -> tuple[Receipt, dict[str, Any]]:
    """Submit (or, with dry_run, only prepare) the training experiment; return its receipt."""
    spec_yaml = render_train_spec(manifest)
    launch_id = uuid.uuid4().hex
    data = with_launch_id(spec_yaml, launch_id)
    launch_cfg = manifest["config"]["launch"]
    image = data["tasks"][0]["image"].get("beaker", "")
    spec_sha = hashlib.sha256(yaml.safe_dump(data, sort_keys=True).encode()).hexdigest()
    receipt = Receipt(
        name=manifest["name"],
        launch_id=launch_id,
        created_unix=time.time(),
        manifest_path=str(manifest_path.resolve()),
        manifest_digest=manifest["digest"],
        spec_path=str(manifest["source"]["path"]),
        spec_sha256=str(manifest["source"]["sha256"]),
        workspace=str(launch_cfg.get("workspace")),
        budget=launch_cfg.get("budget"),
        image_requested=image,
        image_resolved=None,
        beaker_spec_sha256=spec_sha,
        dry_run=dry_run,
        git_revision=_git_revision(Path.cwd()),
        state="dry-run" if dry_run else "submitting",
    )
    if dry_run:
        return receipt, data
    from beaker import BeakerExperimentSpec

    client = _beaker_client()
    try:
        resolved = client.image.get(image)
        receipt.image_resolved = getattr(resolved, "id", None)
        if receipt.image_resolved:
            for task in data["tasks"]:
                task["image"] = {"beaker": receipt.image_resolved}
        workspace = client.workspace.get(receipt.workspace)
        workload = client.experiment.create(
            spec=BeakerExperimentSpec.from_json(data),
            name=f"{manifest['name']}-{launch_id[:8]}",
            workspace=workspace,
        )
    except Exception as exc:  # noqa: BLE001 - report Beaker's refusal as a user error
        raise DiagnosticError(
            Diagnostic("error", "launch-failed", f"Beaker refused the submission: {exc}")
        ) from exc
    experiment = getattr(workload, "experiment", None)
    receipt.experiment_id = getattr(experiment, "id", None)
    receipt.url = client.workload.url(workload) if hasattr(client.workload, "url") else None
    receipt.state = "submitted"
    return receipt, data


def job_state(receipt: Receipt) -> str:
    """The workload's latest job status, or a plain explanation when Beaker is unreachable."""
    if receipt.dry_run or not receipt.experiment_id:
        return receipt.state
    try:
        client = _beaker_client()
        workload = client.workload.get(receipt.experiment_id)
        job = client.workload.get_latest_job(workload)
    except DiagnosticError as exc:
        return f"unknown ({exc.diagnostics[0].message})"
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({type(exc).__name__}: {exc})"
    if job is None:
        return "queued"
    status = getattr(job, "status", None)
    return str(getattr(status, "status", status) or "unknown")
