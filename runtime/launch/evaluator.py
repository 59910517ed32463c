"""Background evaluation: snapshot the policy at milestones and submit evaluator jobs.

With ``evaluation.mode = "background"`` the trainer never evaluates itself: at update 0
(``evaluation.initial``), every ``evaluation.interval`` updates (or a task's own
interval) and at the final update (``evaluation.final``) it writes the weights to
``paths.eval_snapshots/update-NNNNNN`` and submits ``python -m runtime.entrypoints.evaluate``:

* on Beaker (``BEAKER_JOB_ID`` is set, or ``RLC_EVAL_SUBMIT=beaker``): the compiled
  ``evaluator.yaml`` with the update and snapshot filled in, through beaker-py, in a
  thread bounded by ``evaluation.submit_timeout`` so a slow Beaker never stalls training;
* locally: a subprocess per milestone, on this machine, which the run waits for at its end.

Every submission is one line of ``eval/submissions.jsonl``. A failed evaluation or
submission is reported, never a reason to stop training.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from runtime.config import RunConfig
from runtime.rollout.evaluators import milestone_due


class EvaluatorSubmitError(RuntimeError):
    """An evaluator job could not be prepared or submitted."""


def submit_target() -> str:
    """``beaker`` inside a Beaker job (or when forced), else ``local``."""
    forced = os.environ.get("RLC_EVAL_SUBMIT", "").strip().lower()
    if forced in ("beaker", "local"):
        return forced
    return "beaker" if os.environ.get("BEAKER_JOB_ID") else "local"


def evaluator_spec(
    manifest: dict[str, Any], update: int, checkpoint: Path, signature: str | None = None
) -> dict[str, Any]:
    """The compiled evaluator job for one milestone, as Beaker spec data (``signature``:
    the manifest's detached signature, carried into the job beside it)."""
    import yaml

    from compiler.manifest.trust import evaluator_job

    ck = str(checkpoint)
    if any(c in ck for c in "\"'\\$`\n"):
        raise EvaluatorSubmitError(f"snapshot path {ck!r} has characters a job script cannot hold")
    spec = evaluator_job(manifest, update, ck, signature)
    if spec is None:
        raise EvaluatorSubmitError("the manifest has no evaluator job (evaluation.mode)")
    data: dict[str, Any] = yaml.safe_load(spec)
    return data


class BeakerSubmitter:
    """Creates one Beaker experiment per milestone from the compiled evaluator spec."""

    def __init__(
        self,
        manifest: dict[str, Any],
        timeout_s: float,
        signature: str | None = None,
        workspace: str | None = None,
        name: str = "run",
    ) -> None:
        self.manifest = manifest  # the verified document the job embeds
        self.timeout_s = timeout_s
        self.signature = signature
        self.workspace = workspace  # evaluation.workspace (derived from launch.workspace)
        self.name = name

    def submit(self, update: int, checkpoint: Path) -> dict[str, Any]:
        from runtime.launch.beaker_client import beaker_client

        data = evaluator_spec(self.manifest, update, checkpoint, self.signature)
        launch_id = uuid.uuid4().hex
        for task in data.get("tasks", []):
            task.setdefault("envVars", []).append({"name": "RLC_LAUNCH_ID", "value": launch_id})
        workspace = self.workspace
        result: dict[str, Any] = {}

        def create() -> None:
            try:
                from beaker import BeakerExperimentSpec

                client = beaker_client()
                workload = client.experiment.create(
                    spec=BeakerExperimentSpec.from_json(data),
                    name=f"{self.name}-eval-{update:06d}-{launch_id[:6]}",
                    workspace=client.workspace.get(workspace),
                )
                experiment = getattr(workload, "experiment", None)
                result["experiment_id"] = getattr(experiment, "id", None)
            except Exception as exc:  # noqa: BLE001 - reported in the submission record
                msgs = getattr(exc, "diagnostics", None)
                result["error"] = msgs[0].message if msgs else f"{type(exc).__name__}: {exc}"

        worker = threading.Thread(target=create, name=f"eval-submit-{update}", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            result["error"] = f"submission did not finish in {self.timeout_s:g}s"
        return {"target": "beaker", "launch_id": launch_id, **result}

    def wait(self, timeout_s: float) -> list[dict[str, Any]]:
        return []  # Beaker jobs outlive the run; their results land under eval/


class LocalSubmitter:
    """Runs the compiled ``commands.evaluator_argv`` (``python -m runtime.entrypoints.evaluate``)
    as a subprocess per milestone."""

    def __init__(self, argv: Sequence[str], manifest_path: Path, log_dir: Path) -> None:
        if not argv:
            raise RuntimeError(
                "background evaluation but the manifest has no evaluator command line "
                "(commands.evaluator_argv): recompile the spec"
            )
        self.argv = list(argv)
        self.manifest_path = manifest_path
        self.log_dir = log_dir
        self.procs: list[tuple[int, subprocess.Popen[bytes], Path]] = []

    def submit(self, update: int, checkpoint: Path) -> dict[str, Any]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_dir / f"evaluate-{update:06d}.log"
        from runtime.node.launch_argv import substitute

        named = {"update": str(update), "checkpoint": str(checkpoint)}
        argv = substitute(self.argv, manifest=str(self.manifest_path), named=named)
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                argv, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs.append((update, proc, log))
        return {"target": "local", "pid": proc.pid, "log": str(log)}

    def wait(self, timeout_s: float) -> list[dict[str, Any]]:
        """Wait for every evaluation (killing those past ``timeout_s``); their outcomes."""
        deadline = time.monotonic() + timeout_s
        out = []
        for update, proc, log in self.procs:
            try:
                rc = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            out.append({"update": update, "returncode": rc, "log": str(log)})
        self.procs.clear()
        return out


class BackgroundEvaluator:
    """The loop's evaluator hook for ``evaluation.mode = "background"``."""

    def __init__(
        self,
        cfg: RunConfig,
        snapshot: Callable[[Path], None],
        submitter: BeakerSubmitter | LocalSubmitter,
        *,
        wait_timeout_s: float = 1800.0,
    ) -> None:
        self.cfg = cfg
        self.snapshot = snapshot
        self.submitter = submitter
        self.wait_timeout_s = wait_timeout_s
        self.log_path = cfg.paths.eval_dir / "submissions.jsonl"
        ev = cfg.evaluation
        self.task_intervals = [t.interval for t in ev.tasks if t.interval]

    def due(self, update: int, final: bool) -> bool:
        ev = self.cfg.evaluation
        if milestone_due(update, final, ev.interval, ev.initial, ev.final):
            return True
        return update > 0 and any(update % i == 0 for i in self.task_intervals)

    def snapshot_path(self, update: int) -> Path:
        return self.cfg.paths.eval_snapshots / f"update-{update:06d}"

    def __call__(self, update: int) -> dict[str, Any]:
        t0 = time.monotonic()
        path = self.snapshot_path(update)
        if not path.is_dir():
            tmp = path.with_name(path.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            self.snapshot(tmp)
            tmp.replace(path)
        t1 = time.monotonic()
        try:
            record = self.submitter.submit(update, path)
        except Exception as exc:  # noqa: BLE001 - a failed submission never stops training
            record = {"error": f"{type(exc).__name__}: {exc}"}
        record = {"update": update, "checkpoint": str(path), "unix": time.time(), **record}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as fh:
            fh.write(json.dumps(record, sort_keys=True) + "\n")
        if record.get("error"):
            print(
                f"rlc: warning: evaluator for update {update} not submitted: {record['error']}",
                file=sys.stderr,
                flush=True,
            )
        return {
            "eval/submitted_update": update,
            "eval/submit_failed": 1 if record.get("error") else 0,
            "time/eval_snapshot_s": t1 - t0,
            "time/eval_submit_s": time.monotonic() - t1,
        }

    def close(self) -> dict[str, Any]:
        """Wait for local evaluations; the summary lists each update's outcome."""
        done = self.submitter.wait(self.wait_timeout_s)
        failed = [d["update"] for d in done if d["returncode"] != 0]
        for d in done:
            if d["returncode"] != 0:
                print(
                    f"rlc: warning: evaluation of update {d['update']} exited "
                    f"{d['returncode']} (log {d['log']})",
                    file=sys.stderr,
                    flush=True,
                )
        return {"eval_background_done": [d["update"] for d in done], "eval_failed": failed}
