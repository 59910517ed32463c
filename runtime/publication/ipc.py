"""Tensor handles for ``/update_weights_from_tensor``: share memory, not bytes.

``serialize_named_tensors`` pickles ``[(name, tensor), ...]`` with torch's multiprocessing
reductions (as SGLang's ``MultiprocessingSerializer`` does) and base64-encodes it for JSON:
a CUDA tensor becomes a CUDA IPC handle, a CPU tensor a shared-memory file name
(``file_system`` strategy: the default ``file_descriptor`` strategy hands fds over a socket
that only the parent's children may use). The engine maps the same memory; nothing is
copied until it copies into its own parameters.

``deserialize_named_tensors`` unpickles with an allowlist of torch's rebuild functions and
classes: a request body must not be able to run arbitrary code in the engine.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import io
import pickle
from collections.abc import Iterator, Sequence
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
import torch.multiprocessing as torch_mp

NamedTensors = list[tuple[str, torch.Tensor]]

_REBUILDERS = {
    "rebuild_tensor",
    "rebuild_cuda_tensor",
    "rebuild_typed_storage",
    "rebuild_typed_storage_child",
    "rebuild_storage_filename",
    "rebuild_storage_empty",
    "rebuild_parameter",
    "rebuild_parameter_with_state",
}
_CLASSES = {
    ("torch", "Tensor"),
    ("torch", "Size"),
    ("torch._tensor", "Tensor"),
    ("torch.storage", "UntypedStorage"),
    ("torch.storage", "TypedStorage"),
    ("torch.nn.parameter", "Parameter"),
    ("collections", "OrderedDict"),
}


class PayloadError(ValueError):
    """A ``serialized_named_tensors`` entry that is not a list of named tensors we accept."""


@contextlib.contextmanager
def _file_system_sharing() -> Iterator[None]:
    old = torch_mp.get_sharing_strategy()
    torch_mp.set_sharing_strategy("file_system")
    try:
        yield
    finally:
        torch_mp.set_sharing_strategy(old)


def serialize_named_tensors(named: Sequence[tuple[str, torch.Tensor]]) -> str:
    """Base64 text of the pickled handles; the tensors must stay alive until the engine acks."""
    items = [(str(n), t.detach()) for n, t in named]
    buf = io.BytesIO()
    with _file_system_sharing():
        ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(items)
    return base64.b64encode(buf.getvalue()).decode("ascii")


class _TensorUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == "torch.multiprocessing.reductions" and name in _REBUILDERS:
            return super().find_class(module, name)
        if (module, name) in _CLASSES:
            return super().find_class(module, name)
        if module == "torch" and (
            isinstance(getattr(torch, name, None), torch.dtype) or name.endswith("Storage")
        ):
            return super().find_class(module, name)
        if name == "rebuild_storage_fd":
            raise PayloadError(
                "tensors were shared with the file_descriptor strategy, which only works "
                "between a parent and its children; serialize with "
                "runtime.publication.ipc.serialize_named_tensors (file_system strategy)"
            )
        raise PayloadError(
            f"serialized_named_tensors refers to {module}.{name}, which is not allowed"
        )


def deserialize_named_tensors(data: object) -> NamedTensors:
    """Rebuild ``[(name, tensor), ...]`` from one ``serialized_named_tensors`` entry."""
    if not isinstance(data, str):
        raise PayloadError(
            f"serialized_named_tensors entries must be base64 strings, got {type(data).__name__}"
        )
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise PayloadError(f"serialized_named_tensors entry is not valid base64: {exc}") from exc
    try:
        obj = _TensorUnpickler(io.BytesIO(raw)).load()
    except PayloadError:
        raise
    except Exception as exc:  # truncated pickle, stale shared-memory handle, ...
        raise PayloadError(
            f"could not rebuild the shared tensors ({type(exc).__name__}: {exc}); "
            "the sender must keep them alive until the engine answers"
        ) from exc
    if isinstance(obj, dict):
        obj = list(obj.items())
    if not isinstance(obj, list) or not all(
        isinstance(x, tuple)
        and len(x) == 2
        and isinstance(x[0], str)
        and isinstance(x[1], torch.Tensor)
        for x in obj
    ):
        raise PayloadError("serialized_named_tensors must hold a list of (name, tensor) pairs")
    return [(n, t) for n, t in obj]
