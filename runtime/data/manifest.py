"""Immutable data manifests: what `rlc data prepare` writes and every run re-checks.

Layout under ``<output.root>/prepared/data/``: ``train.jsonl`` and ``eval.jsonl`` (one
`Prompt` per line), ``verifiers.json`` (the verifier registry used), and
``data-manifest.json`` listing each file with its sha256 and record count, the task
entries with the sha256 of their source files, the seed and the manifest's own digest.
Files are written atomically and read-only; preparing again into the same place with
different results is refused, so a run always trains on the bytes it was planned with.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.spec.data import DataSection
from contract.spec.rewards import RewardsSection
from contract.spec.root import Spec
from contract.tasks import verifier_settings
from runtime.data.records import Prompt
from runtime.data.render import LengthReport, check_prompt_lengths
from runtime.data.tasks import load_tasks, task_entries

MANIFEST_VERSION = 1
MANIFEST_NAME = "data-manifest.json"
PREPARED_SUBDIR = Path("prepared") / "data"


class DataManifestError(ValueError):
    """A data manifest that is missing, malformed, tampered with or would be overwritten."""


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _digest(body: Mapping[str, Any]) -> str:
    rest = {k: v for k, v in body.items() if k != "digest"}
    return "sha256:" + hashlib.sha256(canonical_json(rest).encode()).hexdigest()


def _write_readonly(path: Path, data: bytes) -> None:
    """Atomic write; an identical existing file is kept, a different one is refused."""
    if path.exists():
        if path.read_bytes() == data:
            return
        raise DataManifestError(
            f"{path} already exists with different content; prepared data is immutable "
            "(choose a fresh output.root or remove the old preparation deliberately)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, 0o444)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _jsonl(prompts: Sequence[Prompt]) -> bytes:
    return "".join(canonical_json(p.to_json()) for p in prompts).encode()


def verifier_registry(names: Sequence[str], rewards: RewardsSection) -> dict[str, Any]:
    """name -> {factory, config} for every verifier the prompts use (``config``: its typed
    ``[rewards.*]`` settings, `contract.tasks.verifier_settings`, written out)."""
    from runtime.rewards.base import UnknownVerifier, verifier_class

    out: dict[str, Any] = {}
    for name in sorted(set(names)):
        try:
            cls = verifier_class(name)
            factory: str | None = f"{cls.__module__}.{cls.__qualname__}"
        except UnknownVerifier:
            factory = None  # registered by a component not installed here; checked at run time
        settings = verifier_settings(rewards, name)
        out[name] = {
            "factory": factory,
            "config": {} if settings is None else settings.model_dump(),
        }
    return out


@dataclass
class PrepareResult:
    manifest_path: Path
    manifest: dict[str, Any]
    train_count: int
    eval_count: int
    length_report: LengthReport | None = None
    dropped: list[str] = field(default_factory=list)


def prepare_data(
    spec: Spec,
    out_dir: Path | None = None,
    *,
    tokenizer: Any = None,
    on_overflow: str = "error",
) -> PrepareResult:
    """Load every task of a resolved spec and write the immutable prepared data.

    With a tokenizer, prompts are checked against ``inference.max_prompt_length``:
    ``on_overflow="error"`` refuses over-long prompts (listing them), ``"drop"`` drops them
    and records their ids in the manifest.
    """
    data = spec.data
    if not data.tasks:
        raise DataManifestError("data.tasks is empty: nothing to prepare")
    seed, shuffle = data.seed, data.shuffle
    out_dir = Path(spec.output.root) / PREPARED_SUBDIR if out_dir is None else Path(out_dir)
    entries = task_entries(data)
    train, ev, parts = load_tasks(entries, seed)

    report: LengthReport | None = None
    dropped: list[str] = []
    if tokenizer is not None:
        budget = spec.inference.max_prompt_length
        if budget:
            mode = "drop" if on_overflow == "drop" else "error"
            train, report = check_prompt_lengths(train, tokenizer, int(budget), mode)  # type: ignore[arg-type]
            ev, ev_report = check_prompt_lengths(ev, tokenizer, int(budget), mode)  # type: ignore[arg-type]
            report.checked += ev_report.checked
            report.over_ids += ev_report.over_ids
            report.max_length = max(report.max_length, ev_report.max_length)
            dropped = list(report.over_ids)

    registry = verifier_registry([p.verifier for p in train + ev], spec.rewards)
    files: dict[str, Any] = {}
    for name, payload in (
        ("train", _jsonl(train)),
        ("eval", _jsonl(ev)),
        ("verifiers", canonical_json(registry).encode()),
    ):
        fname = f"{name}.json" if name == "verifiers" else f"{name}.jsonl"
        _write_readonly(out_dir / fname, payload)
        records = len(train) if name == "train" else len(ev) if name == "eval" else len(registry)
        files[name] = {
            "path": fname,
            "sha256": hashlib.sha256(payload).hexdigest(),
            "records": records,
        }

    task_rows = []
    for entry, part in zip(entries, parts, strict=True):
        task_rows.append(
            {
                "entry": entry.record(),
                "task": part.task,
                "train_records": len(part.train),
                "eval_records": len(part.eval),
                "sources": [
                    {"path": str(f.resolve()), "sha256": sha256_file(f), "bytes": f.stat().st_size}
                    for f in part.files
                ],
            }
        )
    body: dict[str, Any] = {
        "data_manifest_version": MANIFEST_VERSION,
        "seed": seed,
        "shuffle": shuffle,
        "tasks": task_rows,
        "files": files,
        "verifiers": sorted(registry),
        "failure_policy": spec.rewards.failure_policy,
        "dropped_over_length": dropped,
    }
    body["digest"] = _digest(body)
    path = out_dir / MANIFEST_NAME
    _write_readonly(path, canonical_json(body).encode())
    return PrepareResult(path, body, len(train), len(ev), report, dropped)


@dataclass(frozen=True)
class DataManifest:
    path: Path
    body: dict[str, Any]

    @property
    def directory(self) -> Path:
        return self.path.parent

    def file(self, name: str) -> Path:
        return self.directory / self.body["files"][name]["path"]

    def prompts(self, split: str) -> list[Prompt]:
        out = []
        with open(self.file(split), encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    out.append(Prompt.from_json(json.loads(line)))
        return out

    def verifier_registry(self) -> dict[str, Any]:
        with open(self.file("verifiers"), encoding="utf-8") as fh:
            reg: dict[str, Any] = json.load(fh)
        return reg


def verify_data_manifest(path: str | Path) -> DataManifest:
    """Re-check a data manifest's digest and every file's sha256 and record count."""
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST_NAME
    if not p.is_file():
        raise DataManifestError(f"data manifest {p} does not exist")
    try:
        body = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataManifestError(f"data manifest {p} is not valid JSON: {exc}") from None
    if not isinstance(body, dict) or body.get("data_manifest_version") != MANIFEST_VERSION:
        raise DataManifestError(
            f"data manifest {p}: unsupported data_manifest_version "
            f"{body.get('data_manifest_version') if isinstance(body, dict) else None!r} "
            f"(expected {MANIFEST_VERSION})"
        )
    if body.get("digest") != _digest(body):
        raise DataManifestError(
            f"data manifest {p}: digest mismatch; the manifest was edited after preparation"
        )
    for name, info in sorted(body.get("files", {}).items()):
        f = p.parent / info["path"]
        if not f.is_file():
            raise DataManifestError(f"data manifest {p}: {name} file {f} is missing")
        got = sha256_file(f)
        if got != info["sha256"]:
            raise DataManifestError(
                f"data manifest {p}: {name} file {f} was modified after preparation "
                f"(sha256 {got}, manifest says {info['sha256']})"
            )
        if name != "verifiers":
            with open(f, "rb") as fh:
                n = sum(1 for line in fh if line.strip())
            if n != info["records"]:
                raise DataManifestError(
                    f"data manifest {p}: {name} has {n} records, manifest says {info['records']}"
                )
    return DataManifest(p, body)


def _read_prompts(path: Path, what: str) -> list[Prompt]:
    out = []
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if line.strip():
                    try:
                        out.append(Prompt.from_json(json.loads(line)))
                    except (ValueError, KeyError, TypeError) as exc:
                        raise DataManifestError(
                            f"{what} {path}:{n}: not a prompt record ({exc})"
                        ) from None
    except OSError as exc:
        raise DataManifestError(f"{what} {path}: {exc.strerror or exc}") from None
    if not out:
        raise DataManifestError(f"{what} {path} holds no prompts")
    return out


def _check_verifiers(prompts: Sequence[Prompt], registry: Mapping[str, Any], where: str) -> None:
    """Every prompt names a verifier of the registry, and the runtime knows it."""
    from runtime.rewards.base import UnknownVerifier, verifier_class

    for name in sorted({p.verifier for p in prompts}):
        if name not in registry:
            raise DataManifestError(f"{where}: verifier {name!r} is not in the verifier registry")
        try:
            verifier_class(name)
        except UnknownVerifier:
            raise DataManifestError(f"{where}: verifier {name!r} is not available here") from None


def load_prompts(data: DataSection) -> tuple[list[Prompt], list[Prompt]]:
    """Train and eval prompts for a run: the prompt pool ``[data]`` selects.

    ``data.manifest`` (verified: digest, sha256s, record counts), ``data.prompt_data`` (a
    prepared JSONL of prompt records with ``data.reward_config``, the verifier registry
    JSON they name), or ``data.tasks`` (loaded and split here).
    """
    if data.manifest:
        m = verify_data_manifest(data.manifest)
        train = m.prompts("train")
        _check_verifiers(train, m.verifier_registry(), str(m.path))
        return train, m.prompts("eval")
    if data.prompt_data:
        path = Path(data.prompt_data)
        train = _read_prompts(path, "data.prompt_data")
        reg_path = data.reward_config
        if not reg_path:
            raise DataManifestError("data.prompt_data needs data.reward_config")
        try:
            registry = json.loads(Path(reg_path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DataManifestError(f"data.reward_config {reg_path}: {exc}") from None
        if not isinstance(registry, dict):
            raise DataManifestError(f"data.reward_config {reg_path} must be a JSON object")
        _check_verifiers(train, registry, str(path))
        return train, []
    train, ev, _ = load_tasks(task_entries(data), data.seed)
    return train, ev
