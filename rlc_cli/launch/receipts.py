"""Launch receipts: one immutable JSON file per submission (or dry run)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RECEIPT_VERSION = 1


def receipts_dir(explicit: str | Path | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get("RLC_RECEIPTS_DIR")
    if env:
        return Path(env)
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "rlc" / "receipts"


@dataclass
class Receipt:
    name: str
    launch_id: str
    created_unix: float
    manifest_path: str
    manifest_digest: str
    spec_path: str
    spec_sha256: str
    workspace: str
    budget: str | None
    image_requested: str
    image_resolved: str | None
    beaker_spec_sha256: str
    dry_run: bool
    experiment_id: str | None = None
    url: str | None = None
    git_revision: str | None = None
    state: str = "created"
    extra: dict[str, Any] = field(default_factory=dict)
    receipt_version: int = RECEIPT_VERSION

    def file_name(self) -> str:
        return f"{self.name}-{self.launch_id}.json"


def write_receipt(receipt: Receipt, directory: Path) -> Path:
    """Atomic, read-only, never overwritten (each launch id is fresh)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / receipt.file_name()
    if target.exists():
        raise FileExistsError(f"receipt {target} already exists")
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(asdict(receipt), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.chmod(tmp, 0o444)
    os.replace(tmp, target)
    return target


def read_receipts(directory: Path, name: str | None = None) -> list[Receipt]:
    out: list[Receipt] = []
    if not directory.exists():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            receipt = Receipt(**data)
        except (OSError, ValueError, TypeError):
            continue
        if name is None or receipt.name == name or receipt.launch_id == name:
            out.append(receipt)
    out.sort(key=lambda r: r.created_unix)
    return out
