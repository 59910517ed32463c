"""The prompt record every task loader produces and every consumer reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Prompt:
    """One prompt of the pool.

    ``messages`` are chat messages (``{"role", "content"}``); ``target`` is whatever the
    named ``verifier`` needs (a gold string, IFEval instruction list, code tests).
    ``metadata["raw"]`` marks prompts that are fed as plain text, without a chat template
    (the arithmetic tasks for tiny models).
    """

    id: str
    task: str
    messages: list[dict[str, str]]
    target: Any
    verifier: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The concatenated message contents (for raw prompts: the prompt itself)."""
        return "\n".join(m["content"] for m in self.messages)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "messages": self.messages,
            "target": self.target,
            "verifier": self.verifier,
            "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Prompt:
        return cls(
            id=str(obj["id"]),
            task=str(obj["task"]),
            messages=[dict(m) for m in obj["messages"]],
            target=obj.get("target"),
            verifier=str(obj["verifier"]),
            metadata=dict(obj.get("metadata") or {}),
        )
