"""Which spec fields a running process actually reads: ``RLC_RECORD_READS=DIR``.

Opt-in and off by default: only when the variable is set (checked once, when the
``runtime`` package is imported) is a hook installed on the contract's section models
(`contract.spec._base.Section`), so a normal run pays nothing and behaves the same. With the
hook, every attribute read of a section field is recorded as its dotted spec path (``[]``
for list entries, ``*`` for map entries, the aliases the spec uses), and so is every
``model_dump`` of a section, separately: a dump hands a whole section over (a hash, a
logged config) and is not a read of each field. Each process appends what it newly reads to
``DIR/reads-PID.jsonl`` as it goes (a process stopped by a signal keeps what it read);
`load` joins every process's file.

A section knows its path from the way it was reached: the root `Spec` is ``""``, a field
read from a section at ``P`` is at ``P.field``, and a copy (``model_copy``) keeps its
origin's path. A section built outside the spec tree records under its class name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ENV = "RLC_RECORD_READS"


class _Recorder:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.file = directory / f"reads-{os.getpid()}.jsonl"
        self.seen: set[tuple[str, str]] = set()
        # id -> (section, path); the section is held so its id is never reused
        self.paths: dict[int, tuple[Any, str]] = {}

    def path_of(self, section: Any) -> str:
        known = self.paths.get(id(section))
        if known is not None and known[0] is section:
            return known[1]
        if type(section).__name__ == "Spec":
            return ""
        return f"<{type(section).__name__}>"

    def place(self, value: Any, path: str) -> None:
        """Remember the path of the sections ``value`` holds (itself, list entries, map values)."""
        from contract.spec._base import Section

        if isinstance(value, Section):
            self.paths[id(value)] = (value, path)
        elif isinstance(value, list | tuple):
            for v in value:
                if isinstance(v, Section):
                    self.paths[id(v)] = (v, path + ".[]")
        elif isinstance(value, dict):
            for v in value.values():
                if isinstance(v, Section):
                    self.paths[id(v)] = (v, path + ".*")

    def record(self, kind: str, path: str) -> None:
        if (kind, path) in self.seen:
            return
        self.seen.add((kind, path))
        with self.file.open("a") as f:
            f.write(json.dumps({"kind": kind, "path": path}) + "\n")


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def install(directory: str | Path) -> None:
    """Hook the section models so this process records its reads into ``directory``."""
    from contract.spec._base import Section

    if getattr(Section, "_reads_recorder", None) is not None:
        return
    rec = _Recorder(Path(directory))
    plain_get = object.__getattribute__
    plain_copy = Section.model_copy
    plain_dump = Section.model_dump

    def __getattribute__(self: Any, name: str) -> Any:
        value = plain_get(self, name)
        fields = type(self).model_fields
        if name in fields:
            path = _join(rec.path_of(self), fields[name].alias or name)
            rec.record("read", path)
            rec.place(value, path)
        return value

    def model_copy(self: Any, *args: Any, **kwargs: Any) -> Any:
        copy = plain_copy(self, *args, **kwargs)
        rec.place(copy, rec.path_of(self))
        return copy

    def model_dump(self: Any, *args: Any, **kwargs: Any) -> Any:
        rec.record("dump", rec.path_of(self))
        return plain_dump(self, *args, **kwargs)

    type.__setattr__(Section, "_reads_recorder", rec)
    type.__setattr__(Section, "__getattribute__", __getattribute__)
    type.__setattr__(Section, "model_copy", model_copy)
    type.__setattr__(Section, "model_dump", model_dump)


def install_from_env() -> None:
    """`install` when ``RLC_RECORD_READS`` names a directory; nothing otherwise."""
    directory = os.environ.get(ENV)
    if directory:
        install(directory)


def load(directory: str | Path) -> dict[str, set[str]]:
    """``{"read": paths, "dump": paths}`` over every process that recorded into ``directory``."""
    out: dict[str, set[str]] = {"read": set(), "dump": set()}
    for f in sorted(Path(directory).glob("reads-*.jsonl")):
        for line in _lines(f.read_text().splitlines()):
            entry = json.loads(line)
            out.setdefault(entry["kind"], set()).add(entry["path"])
    return out


def _lines(lines: Iterable[str]) -> Iterable[str]:
    # a process killed mid-write may leave a partial last line
    for line in lines:
        if line.endswith("}"):
            yield line
