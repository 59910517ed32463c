"""Our own strict model of Beaker's experiment spec v2 (what `beaker experiment create` takes).

Every Beaker spec rlc emits is validated here before it is written: pydantic models with
camelCase aliases and ``extra="forbid"`` (beaker-py itself silently drops unknown keys, so a
typo'd key would otherwise vanish at submit time), plus the cross-field checks Beaker's API
enforces or that bit users in the wild (exactly one image / data source kind, unique task
names, mount paths absolute and distinct, cluster vs hostname constraints, deprecated
``preemptible`` not combined with ``minRuntime``/``autoResume``, multi-replica tasks that
coordinate). Field reference: ``shared/reference/anchors.md`` section A, beaker-py 2.x
``beaker/types.py``. ``schemas/beaker-v2.schema.json`` is generated from these models.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from compiler.diagnostics import Diagnostic, DiagnosticError, Span, did_you_mean
from compiler.emit import beaker_checks as checks
from compiler.emit.beaker_checks import DURATION_PATTERN, SIZE_PATTERN, duration_seconds

__all__ = ["DURATION_PATTERN", "SIZE_PATTERN", "duration_seconds"]  # and the models below

SCHEMA_ID = "https://rlc.dev/schemas/beaker-v2.schema.json"

Duration = Annotated[str, Field(pattern=DURATION_PATTERN)] | Annotated[int, Field(ge=0)]
"""A Beaker duration: ``"30m"``, ``"1h30m"``... or integer **nanoseconds** (beaker-py's wire form)."""


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=False,
        use_enum_values=True,
    )


class ImageSource(_Model):
    """The task's container image: a Beaker image (name or immutable ID) or a Docker tag."""

    beaker: str | None = Field(None, description="Beaker image name or ID.")
    docker: str | None = Field(None, description="Docker image tag.")

    _one = model_validator(mode="after")(checks.image_one)


class EnvVar(_Model):
    """An environment variable: a literal value, or the name of a workspace secret."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str | None = None
    secret: str | None = Field(None, description="Name of a secret in the workspace.")

    _one = model_validator(mode="after")(checks.env_var_one)


class DataSource(_Model):
    """What is mounted: exactly one kind."""

    beaker: str | None = Field(None, description="Beaker dataset name or ID.")
    host_path: str | None = Field(None, description="A path on the host machine.")
    weka: str | None = Field(None, description="A WEKA bucket name.")
    result: str | None = Field(None, description="Result of an earlier task (adds a dependency).")
    secret: str | None = Field(None, description="A workspace secret, mounted as a file.")
    volume: str | None = Field(None, description="A Beaker volume.")

    _one = model_validator(mode="after")(checks.data_source_one)


class DataMount(_Model):
    mount_path: str = Field(description="Absolute path inside the container.")
    source: DataSource
    sub_path: str | None = Field(None, description="Mount only this path within the source.")
    mode: Literal["readonly", "readwrite"] | None = None

    _absolute = field_validator("mount_path")(checks.mount_path_absolute)


class ResultSpec(_Model):
    path: str = Field(description="Directory whose contents become the result dataset.")

    _absolute = field_validator("path")(checks.result_path_absolute)


class TaskResources(_Model):
    """Minimum resources per replica."""

    cpu_count: float | None = Field(None, gt=0)
    gpu_count: int | None = Field(None, ge=0)
    memory: str | None = Field(None, pattern=SIZE_PATTERN, description="e.g. '256GiB'.")
    shared_memory: str | None = Field(None, pattern=SIZE_PATTERN, description="e.g. '64GiB'.")


class TaskContext(_Model):
    priority: Literal["low", "normal", "high", "urgent", "immediate"] | None = None
    preemptible: bool | None = Field(
        None, description="Deprecated by Beaker; prefer minRuntime / autoResume."
    )
    min_runtime: Duration | None = Field(
        None, description="Guaranteed runtime before preemption (duration)."
    )
    auto_resume: bool | None = Field(None, description="Resume the job after preemption.")
    cluster: str | None = Field(None, description="Deprecated: use constraints.cluster.")

    _duration = field_validator("min_runtime")(checks.duration_valid)
    _not_both = model_validator(mode="after")(checks.context_not_both)


class Constraints(_Model):
    cluster: list[str] | None = None
    hostname: list[str] | None = None

    _exclusive = model_validator(mode="after")(checks.constraints_exclusive)


class TaskSpec(_Model):
    name: str = Field(min_length=1, description="Unique within the experiment.")
    image: ImageSource
    command: list[str] | None = Field(None, description="Replaces the image's ENTRYPOINT.")
    arguments: list[str] | None = Field(None, description="Appended to command (replaces CMD).")
    env_vars: list[EnvVar] | None = None
    datasets: list[DataMount] | None = None
    result: ResultSpec
    resources: TaskResources | None = None
    context: TaskContext
    constraints: Constraints | None = None
    host_networking: bool | None = None
    replicas: int | None = Field(None, ge=1, description="Copies of the task, scheduled together.")
    leader_selection: bool | None = None
    propagate_failure: bool | None = None
    propagate_preemption: bool | None = None
    synchronized_start_timeout: Duration | None = None
    timeout: Duration | None = None

    _duration = field_validator("timeout", "synchronized_start_timeout")(checks.duration_positive)
    _checks = model_validator(mode="after")(checks.task_checks)


class RetrySpec(_Model):
    allowed_task_retries: int | None = Field(None, ge=0, le=10)


class ExperimentSpec(_Model):
    """A Beaker experiment spec, version v2."""

    version: Literal["v2", "v2-alpha"] = "v2"
    description: str | None = None
    budget: str | None = Field(None, description="e.g. 'ai2/<team>'.")
    groups: list[str] | None = None
    tasks: list[TaskSpec] = Field(min_length=1)
    retry: RetrySpec | None = None

    _unique_names = model_validator(mode="after")(checks.experiment_unique_names)

    def to_json(self) -> dict[str, Any]:
        """The camelCase JSON form, without unset fields (what Beaker takes)."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def _loc_text(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<spec>"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that holds the key at ``loc`` (for did-you-mean on unknown keys)."""
    model: Any = ExperimentSpec
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return None
        ann = field.annotation
        nxt = None
        for cand in getattr(ann, "__args__", (ann,)):
            for c in getattr(cand, "__args__", (cand,)):
                if isinstance(c, type) and issubclass(c, BaseModel):
                    nxt = c
        if nxt is None:
            return None
        model = nxt
    return model


def validation_diagnostics(
    err: ValidationError, source: str = "<beaker spec>", span: Span | None = None
) -> list[Diagnostic]:
    """pydantic errors as diagnostics: ``tasks[0].resources.gpuCount: ...``, with did-you-mean."""
    out: list[Diagnostic] = []
    for e in err.errors():
        loc = tuple(e["loc"])
        where = _loc_text(loc)
        helps: tuple[str, ...] = ()
        if e["type"] == "extra_forbidden":
            model = _model_at(loc)
            key = str(loc[-1])
            message = f"{where}: unknown key {key!r} in a Beaker spec v2"
            if model is not None:
                names = [f.alias or n for n, f in model.model_fields.items()]
                helps = did_you_mean(key, names)
        else:
            msg = e["msg"]
            if msg.startswith("Value error, "):
                msg = msg[len("Value error, ") :]
            message = f"{where}: {msg}"
        out.append(Diagnostic("error", "beaker-spec", message, span, help=helps))
    return out


def validate_beaker_spec(
    data: Mapping[str, Any] | str, source: str = "<beaker spec>", span: Span | None = None
) -> ExperimentSpec:
    """Validate a spec given as a dict or as YAML/JSON text; raise `DiagnosticError` if invalid."""
    if isinstance(data, str):
        import yaml

        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            raise DiagnosticError(
                Diagnostic("error", "beaker-spec", f"{source}: not valid YAML: {exc}", span)
            ) from None
        if not isinstance(data, Mapping):
            raise DiagnosticError(
                Diagnostic("error", "beaker-spec", f"{source}: a spec must be a mapping", span)
            )
    try:
        return ExperimentSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise DiagnosticError(validation_diagnostics(exc, source, span)) from None


def beaker_json_schema() -> dict[str, Any]:
    """The JSON Schema of `ExperimentSpec` (camelCase keys), as committed in schemas/."""
    schema = ExperimentSpec.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "Beaker experiment spec v2 (as checked by rlc)"
    return schema


def beaker_schema_text() -> str:
    """The exact text of ``schemas/beaker-v2.schema.json``."""
    return json.dumps(beaker_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_beaker_schema(path: Any = None) -> Any:
    """Write the schema file (default: the checkout's schemas/ directory); return its path."""
    from pathlib import Path

    from compiler.resources import schemas_dir

    target = Path(path) if path is not None else schemas_dir() / "beaker-v2.schema.json"
    target.write_text(beaker_schema_text(), encoding="utf-8")
    return target
