"""The cross-field checks of our Beaker spec v2 model, as plain functions.

Why plain functions: the pydantic models in ``beaker_model`` run them as their validators,
and the generated fast path (``compiler.derive.fastgen``, via ``compiler.derive.fastpath``) calls the same
functions on the same attribute names without importing pydantic. Each check takes the
validated value (a model, or any object with the models' snake_case attributes) and
returns it, or raises ``ValueError`` with the message users see.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, TypeVar

T = TypeVar("T")

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)")
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
# Beaker (beaker-py) takes Go durations: no "d" unit. Specs may say "2d"; `go_duration`
# rewrites it before emission, and the Beaker model refuses anything else.
DURATION_PATTERN = r"^((\d+(\.\d+)?)(ns|us|µs|ms|s|m|h))+$"
_SPEC_DURATION = r"^((\d+(\.\d+)?)(ns|us|µs|ms|s|m|h|d))+$"
SIZE_PATTERN = r"^\d+(\.\d+)?\s*([KMGTP]i?B?|[kmgtp]i?b?|B|b)?$"


def duration_seconds(value: str | int) -> float:
    """Seconds in a Beaker duration: a string such as ``"90m"`` / ``"1h30m"``, or int nanoseconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a string such as '30m' or integer nanoseconds")
    if isinstance(value, int):
        return value / 1e9
    text = value.strip()
    if not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{value!r} is not a duration such as '30m', '6h' or '1h30m'")
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


def go_duration(value: str) -> str:
    """A spec duration in the Go form Beaker accepts: ``"2d"`` -> ``"48h"``, ``"0"`` -> ``"0s"``.

    Values without a day unit are returned unchanged.
    """
    text = value.strip()
    if text == "0":
        return "0s"
    if "d" not in text or not re.fullmatch(_SPEC_DURATION, text):
        return text
    total = sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))
    hours, rest = divmod(total, 3600.0)
    minutes, seconds = divmod(rest, 60.0)
    out = f"{int(hours)}h" if hours else ""
    out += f"{int(minutes)}m" if minutes else ""
    if seconds:
        out += f"{seconds:g}s"
    return out or "0s"


def camel(name: str) -> str:
    """``host_path`` -> ``hostPath`` (the models' alias generator, for messages)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _exactly_one(model: Any, names: list[str], what: str) -> None:
    given = [n for n in names if getattr(model, n) is not None]
    if len(given) != 1:
        spelled = ", ".join(camel(n) for n in names)
        found = ", ".join(camel(n) for n in given) or "none"
        raise ValueError(f"{what} needs exactly one of {spelled} (found: {found})")


def image_one(model: T) -> T:
    _exactly_one(model, ["beaker", "docker"], "image")
    return model


def env_var_one(model: T) -> T:
    m: Any = model
    _exactly_one(model, ["value", "secret"], f"env var {m.name!r}")
    return model


def data_source_one(model: T) -> T:
    _exactly_one(
        model, ["beaker", "host_path", "weka", "result", "secret", "volume"], "dataset source"
    )
    return model


def mount_path_absolute(v: str) -> str:
    if not v.startswith("/"):
        raise ValueError(f"mountPath {v!r} must be an absolute path")
    return v


def result_path_absolute(v: str) -> str:
    if not v.startswith("/"):
        raise ValueError(f"result path {v!r} must be an absolute path")
    return v


def duration_valid(v: str | int | None) -> str | int | None:
    if v is not None:
        duration_seconds(v)
    return v


def duration_positive(v: str | int | None) -> str | int | None:
    if v is not None and duration_seconds(v) <= 0:
        raise ValueError("durations must be positive")
    return v


def context_not_both(model: T) -> T:
    m: Any = model
    if m.preemptible is not None and (m.min_runtime is not None or m.auto_resume is not None):
        raise ValueError(
            "context.preemptible cannot be combined with minRuntime/autoResume "
            "(Beaker rejects the combination)"
        )
    return model


def constraints_exclusive(model: T) -> T:
    m: Any = model
    if m.cluster and m.hostname:
        raise ValueError("cluster and hostname constraints are mutually exclusive in Beaker")
    return model


def task_checks(model: T) -> T:
    m: Any = model
    sst = m.synchronized_start_timeout
    if sst is not None and duration_seconds(sst) > 48 * 3600:
        raise ValueError("synchronizedStartTimeout must be at most 48h")
    names = [e.name for e in m.env_vars or []]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"env var(s) given more than once: {', '.join(dup)}")
    paths = [PurePosixPath(d.mount_path.lower()) for d in m.datasets or []]
    for i, a in enumerate(paths):
        for b in paths[i + 1 :]:
            if a == b or a in b.parents or b in a.parents:
                raise ValueError(f"dataset mount paths {str(a)!r} and {str(b)!r} overlap")
    if m.replicas is not None and m.replicas > 1 and not m.leader_selection:
        raise ValueError(
            "a task with replicas > 1 needs leaderSelection: true (replicas must find rank 0)"
        )
    return model


def experiment_unique_names(model: T) -> T:
    m: Any = model
    names = [t.name for t in m.tasks]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"task names must be unique: {', '.join(dup)}")
    known = set(names)
    for t in m.tasks:
        for d in t.datasets or []:
            if d.source.result is not None and d.source.result not in known:
                raise ValueError(
                    f"task {t.name!r} mounts the result of unknown task {d.source.result!r}"
                )
    return model
