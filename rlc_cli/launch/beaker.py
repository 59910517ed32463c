"""Submit a compiled manifest's Beaker specs through beaker-py 2.x: preparation, then training.

The YAML comes from `compiler.emit.beaker` (the manifest is embedded in it), so what is
submitted is exactly what `rlc compile` wrote and linted. Image aliases are resolved to
immutable IDs at submission and both names are recorded in the receipt.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from compiler.diagnostics import Diagnostic, DiagnosticError
from rlc_cli.launch.receipts import Receipt
from runtime.launch.beaker_client import beaker_client


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


def render_specs(manifest: dict[str, Any], signature: str | None = None) -> dict[str, str]:
    """``{stage: yaml}`` in submission order: ``prepare`` (when the manifest needs one), ``train``
    (``signature``: the manifest's ``.sig``, carried into every job)."""
    from compiler.emit.beaker import render_beaker
    from compiler.manifest.manifest import manifest_bytes

    text = manifest_bytes(manifest).decode("utf-8")
    files = render_beaker(manifest, text, signature).files
    stages = {"prepare": files["prepare.yaml"]} if "prepare.yaml" in files else {}
    stages["train"] = files["train.yaml"]
    return stages


def render_train_spec(manifest: dict[str, Any]) -> str:
    return render_specs(manifest)["train"]


def with_launch_id(spec_yaml: str, launch_id: str) -> dict[str, Any]:
    """The spec as data, with the per-submission launch id added to every task's env."""
    data: dict[str, Any] = yaml.safe_load(spec_yaml)
    for task in data.get("tasks", []):
        task.setdefault("envVars", []).append({"name": "RLC_LAUNCH_ID", "value": launch_id})
    return data


# preparation is CPU work (data manifest, checkpoint conversion); how long to wait for it
PREPARE_TIMEOUT_S = 6 * 3600.0
PREPARE_POLL_S = 15.0
_DONE = {"STATUS_SUCCEEDED", "STATUS_FAILED", "STATUS_CANCELED"}


def _receipt(
    manifest: dict[str, Any],
    manifest_path: Path,
    data: dict[str, Any],
    *,
    name: str,
    launch_id: str,
    dry_run: bool,
    extra: dict[str, Any],
) -> Receipt:
    launch_cfg = manifest["config"]["launch"]
    return Receipt(
        name=name,
        launch_id=launch_id,
        created_unix=time.time(),
        manifest_path=str(manifest_path.resolve()),
        manifest_digest=manifest["digest"],
        spec_path=str(manifest["source"]["path"]),
        spec_sha256=str(manifest["source"]["sha256"]),
        workspace=str(launch_cfg.get("workspace")),
        budget=launch_cfg.get("budget"),
        image_requested=data["tasks"][0]["image"].get("beaker", ""),
        image_resolved=None,
        beaker_spec_sha256=hashlib.sha256(
            yaml.safe_dump(data, sort_keys=True).encode()
        ).hexdigest(),
        dry_run=dry_run,
        git_revision=_git_revision(Path.cwd()),
        state="dry-run" if dry_run else "submitting",
        extra=extra,
    )


def _submit(client: Any, data: dict[str, Any], receipt: Receipt, name: str) -> Any:
    """Create the experiment (image alias pinned to its ID); fill the receipt."""
    from beaker import BeakerExperimentSpec

    try:
        resolved = client.image.get(receipt.image_requested)
        receipt.image_resolved = getattr(resolved, "id", None)
        if receipt.image_resolved:
            for task in data["tasks"]:
                task["image"] = {"beaker": receipt.image_resolved}
        workspace = client.workspace.get(receipt.workspace)
        workload = client.experiment.create(
            spec=BeakerExperimentSpec.from_json(data), name=name, workspace=workspace
        )
    except Exception as exc:  # noqa: BLE001 - report Beaker's refusal as a user error
        raise DiagnosticError(
            Diagnostic("error", "launch-failed", f"Beaker refused the submission: {exc}")
        ) from exc
    experiment = getattr(workload, "experiment", None)
    receipt.experiment_id = getattr(experiment, "id", None)
    receipt.url = client.workload.url(workload) if hasattr(client.workload, "url") else None
    receipt.state = "submitted"
    return workload


def _status_name(job: Any) -> str:
    status = getattr(getattr(job, "status", None), "status", None)
    try:
        from beaker import beaker_pb2 as pb2

        return str(pb2.WorkloadStatus.Name(status))
    except Exception:  # noqa: BLE001 - a plain string (or a stand-in) is fine as is
        return str(status)


def wait_for_preparation(
    client: Any,
    workload: Any,
    *,
    timeout_s: float = PREPARE_TIMEOUT_S,
    poll_s: float = PREPARE_POLL_S,
    echo: Callable[[str], None] = print,
) -> None:
    """Block until the preparation job ends; DiagnosticError unless it succeeded."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        job = client.workload.get_latest_job(client.workload.get(workload.experiment.id))
        state = _status_name(job) if job is not None else "STATUS_QUEUED"
        if state != last:
            echo(f"preparation: {state.removeprefix('STATUS_').lower()}")
            last = state
        if state in _DONE:
            break
        if time.monotonic() > deadline:
            raise DiagnosticError(
                Diagnostic(
                    "error",
                    "launch-prepare-timeout",
                    f"preparation did not finish in {timeout_s:.0f}s; training was not submitted",
                )
            )
        time.sleep(poll_s)
    if state != "STATUS_SUCCEEDED":
        code = getattr(getattr(job, "status", None), "exit_code", None)
        raise DiagnosticError(
            Diagnostic(
                "error",
                "launch-prepare-failed",
                f"preparation ended {state.removeprefix('STATUS_').lower()}"
                + (f" (exit code {code})" if code else "")
                + "; training was not submitted (see prepare.log in its results)",
            )
        )


def launch_all(
    manifest: dict[str, Any],
    manifest_path: Path,
    *,
    dry_run: bool,
    record: Callable[[Receipt], Any],
    client: Any = None,
    echo: Callable[[str], None] = print,
    poll_s: float = PREPARE_POLL_S,
) -> list[tuple[Receipt, dict[str, Any]]]:
    """Submit preparation (when the manifest has one), wait for it to succeed, then training.

    Beaker experiment specs cannot depend on another experiment, so the order is kept here:
    each submission writes its receipt (``record``) at once, the training receipt names the
    preparation experiment it waited for, and a failed preparation submits nothing more.
    """
    from runtime.manifest import manifest_signature

    launch_id = uuid.uuid4().hex
    stages = render_specs(manifest, manifest_signature(manifest_path))
    out: list[tuple[Receipt, dict[str, Any]]] = []
    after: dict[str, Any] = {}
    for stage, spec_yaml in stages.items():
        data = with_launch_id(spec_yaml, launch_id)
        name = manifest["name"] if stage == "train" else f"{manifest['name']}-{stage}"
        receipt = _receipt(
            manifest,
            manifest_path,
            data,
            name=name,
            launch_id=launch_id,
            dry_run=dry_run,
            extra={"stage": stage, **after},
        )
        out.append((receipt, data))
        if dry_run:
            record(receipt)
            continue
        client = client or beaker_client()
        workload = _submit(client, data, receipt, f"{name}-{launch_id[:8]}")
        record(receipt)
        echo(f"submitted {name}: {receipt.url or receipt.experiment_id}")
        if stage == "prepare":
            wait_for_preparation(client, workload, poll_s=poll_s, echo=echo)
            after = {"after_prepare": receipt.experiment_id}
    return out


def job_state(receipt: Receipt) -> str:
    """The workload's latest job status, or a plain explanation when Beaker is unreachable."""
    if receipt.dry_run or not receipt.experiment_id:
        return receipt.state
    try:
        client = beaker_client()
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
