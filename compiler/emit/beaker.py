"""Render the Beaker experiment specs of a manifest (training, preparation, evaluator).

The manifest travels inside the job (gzip + base64 in the task's script), so a job never
fetches anything from the submitting machine. Rendering is a pure function of the manifest:
the same manifest gives byte-identical YAML. Every rendered spec is validated against our
pydantic model of Beaker spec v2 before it is returned.
"""

from __future__ import annotations

import base64
import gzip
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
import yaml

from compiler import __version__
from compiler.emit.beaker_checks import go_duration
from compiler.resources import templates_dir

MANIFEST_PATH = "/rlc/manifest.json"
SIGNATURE_SUFFIX = (
    ".sig"  # compiler.manifest.trust reads the detached signature beside the manifest
)
SIGNATURE_RE = re.compile(r"hmac-sha256:[0-9a-f]{64}")
RESULT_PATH = "/results"
CODE_DIR = "/opt/rlc"
# Environment every job gets; launch.env may override these, never the reserved names.
DEFAULT_ENV: dict[str, str] = {
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "2",
    "NCCL_CUMEM_ENABLE": "1",
    "HF_HOME": "/tmp/hf-cache",
    "PYTHONUNBUFFERED": "1",
}
# What the background evaluator job template leaves for the runtime to fill per milestone
# (`compiler.manifest.trust.evaluator_job`).
EVAL_UPDATE_PLACEHOLDER = "__RLC_EVAL_UPDATE__"
EVAL_CHECKPOINT_PLACEHOLDER = "__RLC_EVAL_CHECKPOINT__"
# Node-local directory of the private Triton / Inductor caches (runtime.compiler_cache).
COMPILER_CACHE_DIR = "/tmp/rlc-compiler-cache"


@dataclass(frozen=True)
class BeakerArtifacts:
    """File name (under ``beaker/``) -> YAML text."""

    files: dict[str, str]


@cache
def _env() -> jinja2.Environment:
    """The templates' environment (their compiled form depends on it: see `_template`)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir() / "beaker")),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


@cache
def _template(name: str) -> jinja2.Template:
    """``templates/beaker/NAME`` compiled by jinja2 to Python, through `compiler.derive.derived`
    (keyed by the template's bytes, this module, which sets up the environment, and the
    jinja2 version), as jinja2's own ``ModuleLoader`` loads precompiled templates.

    Why: compiling the templates costs ~20 ms per process, loading the cached code ~1 ms.
    """
    from compiler.derive.derived import code_payload, derived

    env = _env()
    path = templates_dir() / "beaker" / name
    source = path.read_bytes()

    def build() -> bytes:
        code = env.compile(source.decode("utf-8"), name, name, raw=True, defer_init=True)
        return code_payload(code, name)

    def load(payload: bytes) -> jinja2.Template:
        import marshal

        namespace: dict[str, Any] = {"__name__": f"rlc_template_{name}", "__file__": str(path)}
        exec(marshal.loads(payload), namespace)  # noqa: S102, S302 - our own entry
        return env.template_class.from_module_dict(env, namespace, env.make_globals(None))

    return derived("jinja-beaker", [name, source, Path(__file__)], build, load, libs=("jinja2",))


def embed_manifest(manifest_text: str) -> str:
    """Deterministic gzip+base64 of the manifest bytes (mtime fixed at 0)."""
    packed = gzip.compress(manifest_text.encode("utf-8"), compresslevel=9, mtime=0)
    return base64.b64encode(packed).decode("ascii")


def _script(
    manifest_text: str, entry: list[str], log_name: str, signature: str | None = None
) -> str:
    """The task's script: the manifest (and its detached signature, when signed) written
    where the runtime reads them, then the entry command."""
    payload = embed_manifest(manifest_text)
    command = " ".join(shlex.quote(part) for part in entry)
    lines = [
        "set -euo pipefail",
        f"mkdir -p {shlex.quote(RESULT_PATH)} $(dirname {MANIFEST_PATH})",
        f"echo {payload} | base64 -d | gunzip > {MANIFEST_PATH}",
    ]
    if signature is not None:
        if not SIGNATURE_RE.fullmatch(signature):
            raise ValueError(f"not a manifest signature: {signature[:80]!r}")
        lines.append(f"echo {signature} > {MANIFEST_PATH}{SIGNATURE_SUFFIX}")
    lines += [f"cd {CODE_DIR}", f"{command} 2>&1 | tee -a {RESULT_PATH}/{log_name}"]
    return "\n".join(lines)


def _cache_env(compiler_cache: Mapping[str, Any]) -> dict[str, str]:
    """The compiler-cache variables ``runtime.compiler_cache`` reads (none when off)."""
    if not compiler_cache.get("enabled", True):
        return {}
    out = {"RLC_COMPILER_CACHE_DIR": COMPILER_CACHE_DIR}
    if compiler_cache.get("shared_root"):
        out["RLC_COMPILER_CACHE_SHARED_ROOT"] = str(compiler_cache["shared_root"])
    return out


def _env_vars(
    launch: Mapping[str, Any], digest: str, compiler_cache: Mapping[str, Any]
) -> list[dict[str, str]]:
    values: dict[str, str] = dict(DEFAULT_ENV)
    values.update({str(k): str(v) for k, v in (launch.get("env") or {}).items()})
    values.update(_cache_env(compiler_cache))
    values["RLC_MANIFEST"] = MANIFEST_PATH
    values["RLC_MANIFEST_SHA256"] = digest
    secrets: dict[str, str] = {str(k): str(v) for k, v in (launch.get("secrets") or {}).items()}
    out = [{"name": k, "value": values[k]} for k in sorted(values) if k not in secrets]
    out.extend({"name": k, "secret": secrets[k]} for k in sorted(secrets))
    return out


def _image(manifest: Mapping[str, Any]) -> str:
    launch = manifest["config"].get("launch", {})
    image = launch.get("image")
    if image:
        return str(image)
    lock = manifest.get("runtime_lock") or {}
    return str((lock.get("image") or {}).get("beaker") or "")


def _nodes(manifest: Mapping[str, Any]) -> int:
    placement = (manifest.get("plan") or {}).get("placement") or {}
    nodes = placement.get("nodes")
    if isinstance(nodes, list) and nodes:
        return len(nodes)
    return int(manifest["config"].get("trainer", {}).get("nodes", 1) or 1)


def _gpus_per_replica(manifest: Mapping[str, Any]) -> int:
    launch = manifest["config"].get("launch", {})
    value = launch.get("gpus_per_replica")
    if isinstance(value, int):
        return value
    placement = (manifest.get("plan") or {}).get("placement") or {}
    per = placement.get("gpus_per_replica")
    return int(per) if isinstance(per, int) else 0


def _common(manifest: Mapping[str, Any]) -> dict[str, Any]:
    launch = manifest["config"].get("launch", {})
    mounts = launch.get("weka_mounts") or []
    min_runtime = go_duration(str(launch.get("min_runtime") or ""))
    timeout = go_duration(str(launch.get("timeout") or ""))
    return {
        "name": manifest["name"],
        "digest": manifest["digest"],
        "compiler_version": __version__,
        "budget": launch.get("budget"),
        "image": _image(manifest),
        "datasets": sorted(mounts, key=lambda m: m["mount_path"]),
        "result_path": RESULT_PATH,
        "priority": launch.get("priority", "normal"),
        "cluster": launch.get("cluster", ""),
        "timeout": "" if timeout in ("0", "0s") else timeout,
        "min_runtime": "" if min_runtime in ("", "0", "0s") else min_runtime,
        "auto_resume": bool(launch.get("auto_resume", False)),
        "env_vars": _env_vars(
            launch, manifest["digest"], manifest["config"].get("compiler_cache") or {}
        ),
    }


def _eval_timeout(evaluation: Mapping[str, Any], default: str) -> str:
    value = go_duration(str(evaluation.get("timeout") or ""))
    if value == "0s":
        return ""
    return value or default


def _needs_preparation(config: Mapping[str, Any]) -> bool:
    """CPU preparation runs where weights or data must be made ready before GPUs are held."""
    model = config.get("model", {})
    judges = config.get("judges") or {}
    managed = any((j or {}).get("mode", "external") == "managed" for j in judges.values())
    return (
        model.get("format") == "olmo_core" or managed or bool(config.get("data", {}).get("prepare"))
    )


def _compiled(argv: list[str]) -> list[str]:
    """A compiled command line as a Beaker job runs it: the manifest where the job mounts
    it; a background evaluation's milestone is filled in at submission."""
    names = {
        "{manifest}": MANIFEST_PATH,
        "{update}": EVAL_UPDATE_PLACEHOLDER,
        "{checkpoint}": EVAL_CHECKPOINT_PLACEHOLDER,
    }
    return [names.get(a, a) for a in argv]


def _background_eval(config: Mapping[str, Any]) -> bool:
    return (config.get("evaluation") or {}).get("mode") == "background"


def render_beaker(
    manifest: Mapping[str, Any], manifest_text: str, signature: str | None = None
) -> BeakerArtifacts:
    """All Beaker specs for a manifest, each validated against our Beaker v2 model.

    ``signature``: the manifest's ``rlc compile --sign`` signature; it travels in every
    job beside the manifest, where the runtime verifies it when ``RLC_SIGNING_KEY`` is set.
    """
    config = manifest["config"]
    common = _common(manifest)
    nodes = _nodes(manifest)
    launch = config.get("launch", {})
    coordination = launch.get("coordination") or {}
    judges = config.get("judges") or {}
    max_retries = launch.get("max_retries", -1)
    files: dict[str, str] = {}

    train = _template("train.yaml.j2").render(
        **common,
        description=f"rlc {manifest['name']} (manifest {manifest['digest']})",
        task_name=manifest["name"],
        script=_script(
            manifest_text,
            _compiled(manifest["commands"]["trainer_argv"]),
            "run.log",
            signature,
        ),
        replicas=nodes,
        host_networking=bool(judges),
        synchronized_start_timeout=f"{int(coordination.get('startup_timeout', 3600))}s",
        gpu_count=_gpus_per_replica(manifest),
        shared_memory=launch.get("shared_memory"),
        allowed_retries=max_retries if isinstance(max_retries, int) and max_retries >= 0 else None,
    )
    files["train.yaml"] = train

    if _needs_preparation(config):
        files["prepare.yaml"] = _template("prepare.yaml.j2").render(
            **{**common, "cluster": launch.get("cpu_cluster") or "ai2/saturn"},
            description=f"rlc {manifest['name']} preparation (manifest {manifest['digest']})",
            task_name=f"{manifest['name']}-prepare",
            script=_script(
                manifest_text,
                ["python", "-m", "runtime.entrypoints.prepare", MANIFEST_PATH],
                "prepare.log",
                signature,
            ),
            cpu_count=8,
        )

    if _background_eval(config):
        evaluation = config.get("evaluation") or {}
        files["evaluator.yaml"] = _template("evaluator.yaml.j2").render(
            **{
                **common,
                "cluster": evaluation.get("cluster") or common["cluster"],
                "budget": evaluation.get("budget") or common["budget"],
                "image": evaluation.get("image") or common["image"],
                "timeout": _eval_timeout(evaluation, common["timeout"]),
            },
            description=f"rlc {manifest['name']} background evaluation update "
            + EVAL_UPDATE_PLACEHOLDER,
            script=_script(
                manifest_text,
                _compiled(manifest["commands"]["evaluator_argv"]),
                "evaluation.log",
                signature,
            ),
            gpu_count=int(evaluation.get("gpus", 1) or 1),
        )

    for name, text in files.items():
        validate_beaker_yaml(text, name)
    return BeakerArtifacts(files)


def validate_beaker_yaml(text: str, name: str = "beaker spec") -> dict[str, Any]:
    """Parse and validate one rendered spec against our Beaker v2 model.

    The generated fast check (from that model, `compiler.derive.fastgen`) accepts what it can
    prove the model accepts; anything else is validated by the pydantic model itself.
    """
    from compiler.derive.fastpath import beaker_module

    # libyaml's parser when PyYAML has it (same SafeConstructor, ~10x faster)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    data = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader
    fast = beaker_module()
    if fast is None or not fast.accepts(data):
        from compiler.emit.beaker_model import validate_beaker_spec

        validate_beaker_spec(data, source=f"generated {name}")
    return dict(data)
