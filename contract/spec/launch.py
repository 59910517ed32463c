"""[launch]: the Beaker submission."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from contract.spec._base import Section, fld
from contract.spec.constants import CREDENTIAL_SUFFIXES, RESERVED_ENV

__all__ = [
    "CREDENTIAL_SUFFIXES",
    "RESERVED_ENV",
    "Coordination",
    "LaunchSection",
    "WekaMount",
]

EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
SecretName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")]
Duration = Annotated[
    str, StringConstraints(pattern=r"^(0|[0-9]+(\.[0-9]+)?(s|m|h|d)([0-9]+(s|m|h))*)$")
]


class WekaMount(Section):
    weka: str = fld(description="WEKA filesystem (bucket) name", min_length=1)
    mount_path: str = fld(description="absolute mount point", pattern=r"^/[^/].*$")


class Coordination(Section):
    startup_timeout: int = fld(1200, description="multi-node coordinated startup wait (s)", ge=1)
    heartbeat_timeout: int = fld(
        120,
        description="a node or role whose heartbeat is older than this (s) is hung or cut off: "
        "the run ends with exit 3 naming it",
        ge=1,
    )


class LaunchSection(Section):
    workspace: str = fld("ai2/open-instruct-dev", description="Beaker workspace", min_length=1)
    budget: str = fld("ai2/oe-other", description="Beaker budget", min_length=1)
    cluster: str = fld("ai2/holmes", description="Beaker GPU cluster", min_length=1)
    priority: Literal["low", "normal", "high", "urgent"] = fld(
        "normal", description="Beaker job priority"
    )
    min_runtime: Duration = fld(
        "0s", description="Beaker protected minimum runtime (e.g. 1h; days are emitted as hours)"
    )
    timeout: Duration = fld(
        "3h", description="Beaker task timeout (0 = none; e.g. 2d is emitted as 48h)"
    )
    auto_resume: bool = fld(
        True, description="let Beaker restart the job; it resumes from the newest checkpoint"
    )
    max_retries: int = fld(-1, description="restarts allowed (-1: no cap)", ge=-1)
    gpus_per_replica: int | None = fld(
        None,
        description="physical GPUs per Beaker replica (node); 0 for a CPU-only run",
        derived="8 when more than one node is needed, else the GPUs the run uses",
        ge=0,
        le=8,
    )
    gpu_memory_gib: float = fld(
        80.0, description="memory per GPU, for the plan's memory-fit warning", gt=0.0
    )
    shared_memory: str = fld("200GiB", description="Beaker shared memory size", min_length=1)
    weka_mounts: list[WekaMount] = Field(
        default=[{"weka": "oe-training-default", "mount_path": "/weka/oe-training-default"}],
        validate_default=True,
        description="WEKA mounts; every /weka/... path in the spec must lie under one",
    )
    env: dict[EnvName, str] = Field(
        default={}, description="non-secret environment variables for every task"
    )
    secrets: dict[EnvName, SecretName] = Field(
        default={},
        description="environment variable -> Beaker secret NAME (never the secret value)",
    )
    image: str | None = fld(
        None,
        description="Beaker image for the job",
        derived="the runtime lock's image.beaker",
    )
    coordination: Coordination = Field(
        default={}, validate_default=True, description="multi-node coordination timeouts"
    )
