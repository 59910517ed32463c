"""Runtime tests get their configuration the way a run does: a spec, compiled by the real
compiler, read back as the typed contract. `run_config(tmp_path, inference={...})` writes a
small spec (a CPU run on ``builtin:tiny`` with one arithmetic task) with those sections laid
over it, compiles it and returns the runtime's `RunConfig`."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from contract.run import RunContract, parse
from runtime.config import RunConfig

BASE: dict[str, Any] = {
    "schema_version": 1,
    "name": "t",
    "model": {"source": "builtin:tiny"},
    "data": {"seed": 1, "tasks": [{"task": "arithmetic", "train_count": 64}]},
    "training": {"num_rollouts": 3},
    "trainer": {"gpus": 0},
    "inference": {"prompts_per_collection": 2, "samples_per_prompt": 2},
}


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"no TOML for {type(v).__name__}")


def _table(prefix: str, table: dict[str, Any], out: list[str]) -> None:
    nested = []
    for k, v in table.items():
        if (
            isinstance(v, dict)
            and v
            or isinstance(v, list)
            and v
            and all(isinstance(x, dict) for x in v)
        ):
            nested.append((k, v))
        else:
            out.append(f"{k} = {_value(v)}")
    for k, v in nested:
        name = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            out.append(f"\n[{name}]")
            _table(name, v, out)
        else:
            for item in v:
                out.append(f"\n[[{name}]]")
                out.extend(f"{ik} = {_value(iv)}" for ik, iv in item.items())


def toml_text(spec: dict[str, Any]) -> str:
    out: list[str] = []
    _table("", spec, out)
    return "\n".join(out) + "\n"


def spec_of(tmp_path: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec["output"] = {"root": str(tmp_path)}
    for name, values in sections.items():
        if isinstance(spec.get(name), dict) and isinstance(values, dict):
            spec[name].update(values)
            spec[name] = {k: v for k, v in spec[name].items() if v is not None}  # None: unset
        else:
            spec[name] = values
    return spec


def compile_manifest(tmp_path: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """The manifest of the base spec with ``sections`` laid over it (compile errors raise)."""
    from compiler.pipeline import compile_spec

    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "spec.toml"
    path.write_text(toml_text(spec_of(tmp_path, **sections)))
    manifest: dict[str, Any] = compile_spec(str(path)).manifest()
    return manifest


def contract(tmp_path: Path, **sections: dict[str, Any]) -> RunContract:
    return parse(compile_manifest(tmp_path, **sections))


def run_config(tmp_path: Path, **sections: dict[str, Any]) -> RunConfig:
    return RunConfig.from_contract(contract(tmp_path, **sections))


def edited_contract(tmp_path: Path, edits: dict[str, Any], **sections: Any) -> RunContract:
    """The contract of a compiled manifest with ``edits`` ({"trainer.device": "cuda"})
    written into its config afterwards: values the rules keep to other hardware (GPU-only
    settings on this CPU machine), to test what the runtime does with them."""
    manifest = compile_manifest(tmp_path, **sections)
    for dotted, value in edits.items():
        *parents, leaf = dotted.split(".")
        node = manifest["config"]
        for part in parents:
            node = node[part]
        node[leaf] = value
    return parse(manifest)


def with_managed_judge(
    manifest: dict[str, Any],
    name: str,
    port: int,
    *,
    verifier: str,
    gpus: tuple[int, ...] = (),
    **judge: Any,
) -> dict[str, Any]:
    """``manifest`` with a managed judge ``name`` bound to ``verifier`` and placed on ``port``
    of node 0. The compiler places managed judges on GPUs only; this puts one in the plan of a
    CPU run, to test how the runtime starts and reaches it."""
    config = manifest["config"]
    config["judges"] = {
        name: {
            "mode": "managed",
            "model": "judge-model",
            "revision": "0" * 40,
            "prepared_dir": "/weka/judges/tiny",
            "engine": "embedded",
            **judge,
        }
    }
    config["rubrics"] = {"r": {"profile": "open-instruct/general-quality"}}
    config["judging"] = {"bindings": {verifier: {"judge": name, "rubric": "r"}}}
    placed = {"name": name, "node": 0, "gpus": list(gpus), "port": port}
    manifest["plan"]["placement"]["judges"] = [placed]
    from compiler.resolve.argv import judge_process
    from contract.spec.judges import ManagedJudge

    full = {**config, "judges": {name: ManagedJudge(**config["judges"][name]).model_dump()}}
    manifest["commands"]["judges"] = {name: judge_process(full, placed)}
    return manifest
