"""The trainer's weights for publication, gathered a bucket at a time.

A sharded trainer holds only its shards; the full weights exist nowhere until gathered. The
``PublishedState`` mapping gathers on access, so a consumer that walks it in buckets (the
publishers, through ``runtime.publication.tensor.buckets``) never holds more than one bucket
of full tensors next to the shards, and a consumer that reads one tensor at a time (the
checksum) holds one. Each access is one collective op of the trainer, announced by rank 0,
so the other ranks join every gather whatever order rank 0 reads in, and an abandoned walk
leaves no rank behind. Names, shapes and sizes are known without gathering.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol

import torch


class Gatherer(Protocol):
    def gather_tensors(
        self, names: Sequence[str], *, dtype: torch.dtype | None, device: Any
    ) -> list[torch.Tensor]: ...


def clean_name(name: str) -> str:
    """OLMo-core's name of a state entry (without activation-checkpoint wrappers)."""
    return name.replace("._checkpoint_wrapped_module", "")


class PublishedState(Mapping[str, torch.Tensor]):
    """Weights under OLMo-core names, in ``dtype`` on ``device``, gathered when read."""

    def __init__(
        self,
        trainer: Gatherer,
        state: Mapping[str, torch.Tensor],
        *,
        dtype: torch.dtype | None,
        device: Any,
    ) -> None:
        self._trainer = trainer
        self.dtype = dtype
        self.device = device
        self._raw: dict[str, str] = {}
        self._nbytes: dict[str, int] = {}
        for raw, t in state.items():
            name = clean_name(raw)
            self._raw[name] = raw
            out = dtype if dtype is not None and t.is_floating_point() else t.dtype
            size = torch.empty((), dtype=out).element_size()
            self._nbytes[name] = int(t.numel()) * size  # a DTensor's numel is the full one

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.gather([name])[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def nbytes(self, name: str) -> int:
        """Bytes of the full tensor as published (no gather)."""
        return self._nbytes[name]

    def gather(self, names: Sequence[str]) -> list[torch.Tensor]:
        """The full tensors ``names``, in one collective op of the trainer."""
        raw = [self._raw[n] for n in names]
        return self._trainer.gather_tensors(raw, dtype=self.dtype, device=self.device)
