"""Synchronous native checkpoints with atomic publication and rolling retention.

Layout of one checkpoint ``<root>/step-000010/``::

    model/          native model dir (rlc_model.json, model.safetensors, tokenizer): load_model() reads it
    trainer.pt      optimizer + scheduler state, step, policy version (rank 0; data parallel replicas)
    dist/           instead of model/ when the trainer is sharded over several ranks: every
                    rank's model and optimizer shards (OLMo-core / torch.distributed.checkpoint);
                    trainer.pt then holds no optimizer. Restores on the same topology only.
    rng-rank<r>.pt  python / numpy / torch (+cuda) RNG states of each rank
    meta.json       step, caller's ``extra`` (data cursor, policy version, spec digest), topology
    COMPLETE        written last; a directory without it is never used

Everything is written under ``step-XXXXXX.tmp`` and renamed into place only after COMPLETE
exists, so an interrupted save never replaces (or masquerades as) a complete checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from runtime.checkpoints.layout import (  # noqa: F401 - re-exported
    COMPLETE,
    latest_complete,
    list_complete,
    step_dir_name,
)

META = "meta.json"
TRAINER_STATE = "trainer.pt"
SHARDED = "dist"
FORMAT_VERSION = 1


class CheckpointMismatch(RuntimeError):
    """The checkpoint was written by a different topology or a different spec."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, a read-only or vanished mount). The run
    stops on this one line; the partial directory is removed, earlier checkpoints stay."""


# below this much free space after a failed write, the disk is taken to have filled up
# (torch's zip writer reports a short write as "unexpected pos", not as ENOSPC)
FULL_DISK_BYTES = 256 * 2**20


def _bytes_under(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def _write_failure(final: Path, tmp: Path, exc: BaseException) -> CheckpointWriteError:
    """The one line for a failed save, after the partial directory is removed."""
    written = _bytes_under(tmp)
    try:
        free_at_failure = shutil.disk_usage(tmp.parent).free
    except OSError:
        free_at_failure = None
    shutil.rmtree(tmp, ignore_errors=True)
    full = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or (
        free_at_failure is not None and free_at_failure < FULL_DISK_BYTES
    )
    where = f"checkpoint {final.name} could not be written under {final.parent}"
    if full:
        try:
            free = f"{_gib(shutil.disk_usage(final.parent).free)} free"
        except OSError:
            free = "free space unknown"
        return CheckpointWriteError(
            f"{where}: the disk is full ({_gib(written)} written when it failed, {free} "
            "after removing the partial checkpoint); free space there or set output.root "
            "to a larger disk, then resume"
        )
    return CheckpointWriteError(f"{where}: {type(exc).__name__}: {exc}")


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class CheckpointData:
    path: Path
    step: int
    extra: dict[str, Any]
    topology: dict[str, Any]
    digest: str | None
    trainer_state: dict[str, Any]
    model_state: dict[str, torch.Tensor]
    rng: dict[str, Any] | None
    sharded: Path | None = None  # the dist/ directory of a sharded trainer's checkpoint


def _check(
    meta: dict[str, Any],
    expect_topology: dict[str, Any] | None,
    expect_digest: str | None,
    path: Path,
    expect_resume_key: str | None = None,
) -> None:
    if expect_resume_key is not None and meta.get("resume_key"):
        if meta["resume_key"] != expect_resume_key:
            raise CheckpointMismatch(
                f"{path}: written by a different experiment (resume key {meta['resume_key']}, "
                f"this run {expect_resume_key}); only run length, checkpoint, evaluation, "
                "tracking, launch and runtime settings may change between a run and its "
                "continuation"
            )
    elif expect_digest is not None and meta.get("digest") != expect_digest:
        raise CheckpointMismatch(
            f"{path}: written for spec digest {meta.get('digest')}, this run is {expect_digest}; "
            "resume with the same compiled spec or start a fresh output directory"
        )
    if expect_topology is not None:
        have = meta.get("topology", {})
        diff = {k: (have.get(k), v) for k, v in expect_topology.items() if have.get(k) != v}
        if diff:
            detail = ", ".join(
                f"{k}: checkpoint {a!r} vs run {b!r}" for k, (a, b) in sorted(diff.items())
            )
            raise CheckpointMismatch(
                f"{path}: written by trainer topology {describe_topology(have)}, this run is "
                f"{describe_topology(expect_topology)} ({detail}); a checkpoint restores on "
                "the topology that wrote it"
            )


def describe_topology(t: dict[str, Any]) -> str:
    """``world 2 (EP2, cpu)`` from a trainer's ``topology()``."""
    return (
        f"world {t.get('world_size', '?')} (EP{t.get('expert_parallel', 1)}, "
        f"{t.get('device_kind', '?')})"
    )


def read_meta(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not (p / COMPLETE).is_file():
        raise FileNotFoundError(f"{p} is not a complete checkpoint (no {COMPLETE} marker)")
    return json.loads((p / META).read_text())


def load(
    path: str | Path,
    expect_topology: dict[str, Any] | None = None,
    expect_digest: str | None = None,
    *,
    map_location: str | torch.device = "cpu",
    expect_resume_key: str | None = None,
) -> CheckpointData:
    """Read a complete checkpoint, refusing a different topology or experiment (its resume
    key when the checkpoint has one, else the spec digest)."""
    from runtime.models.weights import load_safetensors

    p = Path(path)
    meta = read_meta(p)
    _check(meta, expect_topology, expect_digest, p, expect_resume_key)
    trainer_state = torch.load(p / TRAINER_STATE, map_location=map_location, weights_only=False)
    rng_file = p / f"rng-rank{_rank()}.pt"
    rng = torch.load(rng_file, weights_only=False) if rng_file.is_file() else None
    if (p / SHARDED).is_dir():
        return CheckpointData(
            path=p,
            step=int(meta["step"]),
            extra=meta.get("extra", {}),
            topology=meta.get("topology", {}),
            digest=meta.get("digest"),
            trainer_state=trainer_state,
            model_state={},
            rng=rng,
            sharded=p / SHARDED,
        )
    return CheckpointData(
        path=p,
        step=int(meta["step"]),
        extra=meta.get("extra", {}),
        topology=meta.get("topology", {}),
        digest=meta.get("digest"),
        trainer_state=trainer_state,
        model_state=load_safetensors(p / "model", device=str(map_location)),
        rng=rng,
    )


class CheckpointManager:
    """Saves every ``interval`` collections; keeps the last ``keep_last`` plus every ``keep_every``-th."""

    def __init__(
        self,
        root: str | Path,
        *,
        interval: int | None = None,
        keep_last: int = 1,
        keep_every: int | None = None,
    ) -> None:
        self.root = Path(root)
        self.interval = interval
        self.keep_last = max(int(keep_last), 1)
        self.keep_every = keep_every

    def should_save(self, collection: int) -> bool:
        """True when ``collection`` (1-based count of finished collections) is a save point."""
        return bool(self.interval) and collection > 0 and collection % int(self.interval) == 0

    def latest_complete(self) -> Path | None:
        return latest_complete(self.root)

    def save(
        self,
        step: int,
        trainer: Any,
        *,
        extra: dict[str, Any] | None = None,
        digest: str | None = None,
        resume_key: str | None = None,
    ) -> Path:
        """Write checkpoint ``step`` for a :class:`runtime.trainer.Trainer` (all ranks call this)."""
        from runtime.models.loader import save_native

        final = self.root / step_dir_name(step)
        tmp = self.root / (step_dir_name(step) + ".tmp")
        rank = _rank()
        if rank == 0:
            self.root.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            tmp.mkdir()
        _barrier()
        try:
            torch.save(rng_state(), tmp / f"rng-rank{rank}.pt")
            sharded = getattr(trainer, "world_size", 1) > 1
            if sharded:
                trainer.save_sharded(tmp / SHARDED)
            if rank == 0:
                if not sharded:
                    state = trainer.state_dict_for_publication()
                    save_native(trainer.loaded, tmp / "model", state_dict=state)
                torch.save(trainer.checkpoint_state(), tmp / TRAINER_STATE)
                meta = {
                    "format_version": FORMAT_VERSION,
                    "step": step,
                    "extra": extra or {},
                    "topology": trainer.topology(),
                    "digest": digest,
                    "resume_key": resume_key,
                    "created_unix": time.time(),
                }
                (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        except Exception as exc:  # torch's, safetensors' and the OS's own write errors
            if rank == 0:
                raise _write_failure(final, tmp, exc) from exc
            raise
        _barrier()
        if rank == 0:
            (tmp / COMPLETE).write_text(json.dumps({"step": step}) + "\n")
            _fsync_dir(tmp)
            if final.exists():  # re-save of the same step: swap, never leave a gap
                old = self.root / (step_dir_name(step) + ".old")
                if old.exists():
                    shutil.rmtree(old)
                final.rename(old)
                tmp.rename(final)
                shutil.rmtree(old)
            else:
                tmp.rename(final)
            _fsync_dir(self.root)
            self.prune()
        _barrier()
        return final

    def prune(self) -> list[Path]:
        """Delete complete checkpoints outside the retention policy; returns what was removed."""
        found = list_complete(self.root)
        keep = {s for s, _ in found[-self.keep_last :]}
        if self.keep_every:
            keep |= {s for s, _ in found if s % int(self.keep_every) == 0}
        removed = []
        for s, p in found:
            if s not in keep:
                shutil.rmtree(p)
                removed.append(p)
        return removed

    def restore(
        self,
        trainer: Any,
        path: str | Path | None = None,
        *,
        expect_digest: str | None = None,
        check_topology: bool = True,
        expect_resume_key: str | None = None,
    ) -> CheckpointData | None:
        """Load the given (or newest complete) checkpoint into ``trainer``; None if none exists."""
        p = Path(path) if path is not None else self.latest_complete()
        if p is None:
            return None
        data = load(
            p,
            expect_topology=trainer.topology() if check_topology else None,
            expect_digest=expect_digest,
            map_location=trainer.device,
            expect_resume_key=expect_resume_key,
        )
        if data.sharded is not None:
            trainer.load_checkpoint_state({}, data.trainer_state, sharded=data.sharded)
        else:
            trainer.load_checkpoint_state(data.model_state, data.trainer_state)
        if data.rng is not None:
            set_rng_state(data.rng)
        return data
