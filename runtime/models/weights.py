"""Weight files and checksums shared by the trainer, publication and the engines.

The checksum is the basis of the startup weight audit: trainer and engines must agree on it
bit for bit, so it hashes names, dtypes, shapes and raw bytes in sorted-name order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def _raw_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().to("cpu").contiguous()
    # view as bytes keeps bf16 etc. exact (numpy has no bf16)
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def state_checksum(state_dict: Mapping[str, torch.Tensor]) -> str:
    """Deterministic ``sha256:<hex>`` over sorted names, dtype, shape and tensor bytes."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name]
        h.update(name.encode())
        h.update(b"\0")
        h.update(str(t.dtype).removeprefix("torch.").encode())
        h.update(b"\0")
        h.update(json.dumps(list(t.shape)).encode())
        h.update(b"\0")
        h.update(_raw_bytes(t))
    return "sha256:" + h.hexdigest()


def _dedup_shared(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses aliased storage (tied embeddings): give each entry its own copy."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, t in state_dict.items():
        t = t.detach().to("cpu")
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(ptr)
        out[name] = t.contiguous()
    return out


def save_safetensors(
    state_dict: Mapping[str, torch.Tensor],
    out_dir: str | Path,
    *,
    filename: str = WEIGHTS_FILE,
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write one safetensors file (atomically: tmp name then rename). Returns its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / filename
    tmp = out / (filename + ".tmp")
    save_file(_dedup_shared(state_dict), str(tmp), metadata=metadata or {"format": "pt"})
    tmp.replace(path)
    return path


def load_safetensors(path: str | Path, *, device: str = "cpu") -> dict[str, torch.Tensor]:
    """Load every ``*.safetensors`` file of a directory (or one file) into one state dict."""
    p = Path(path)
    files = [p] if p.is_file() else sorted(p.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors files in {p}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        part = load_file(str(f), device=device)
        dup = state.keys() & part.keys()
        if dup:
            raise ValueError(f"tensor {sorted(dup)[0]!r} appears in two safetensors files")
        state.update(part)
    return state
