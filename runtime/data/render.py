"""Turn prompts into token ids through a duck-typed tokenizer, and check length budgets.

The tokenizer needs ``encode(text) -> list[int]`` and, for chat prompts,
``apply_chat_template(messages, ...)`` returning ids or text. Prompts longer than the
budget are reported (count and ids) and either dropped with that report or rejected; they
are never truncated, because a truncated question has a different answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from runtime.data.records import Prompt

OverflowPolicy = Literal["drop", "error"]


def render_ids(prompt: Prompt, tokenizer: Any, chat_template: bool | None = None) -> list[int]:
    """Token ids of a prompt as the engine receives it.

    ``chat_template=None`` applies the template when the tokenizer has one and the prompt
    is not marked raw.
    """
    use_template = chat_template
    if use_template is None:
        use_template = not prompt.metadata.get("raw") and hasattr(tokenizer, "apply_chat_template")
    if use_template:
        try:
            out = tokenizer.apply_chat_template(prompt.messages, add_generation_prompt=True)
        except TypeError:
            out = tokenizer.apply_chat_template(prompt.messages)
        if isinstance(out, str):
            return list(tokenizer.encode(out))
        if isinstance(out, dict) and "input_ids" in out:  # HF BatchEncoding-like
            return list(out["input_ids"])
        return [int(t) for t in out]
    return list(tokenizer.encode(prompt.text))


@dataclass
class LengthReport:
    """Prompts over the budget: how many, which, and the longest length seen."""

    budget: int
    checked: int = 0
    over_ids: list[str] = field(default_factory=list)
    max_length: int = 0

    @property
    def over_count(self) -> int:
        return len(self.over_ids)

    def summary(self, limit: int = 10) -> str:
        shown = ", ".join(self.over_ids[:limit])
        more = f" (+{self.over_count - limit} more)" if self.over_count > limit else ""
        return (
            f"{self.over_count} of {self.checked} prompts exceed max_prompt_length="
            f"{self.budget} (longest {self.max_length} tokens): {shown}{more}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "checked": self.checked,
            "over_count": self.over_count,
            "over_ids": self.over_ids,
            "max_length": self.max_length,
        }


class PromptTooLong(ValueError):
    def __init__(self, report: LengthReport) -> None:
        super().__init__(report.summary())
        self.report = report


def check_prompt_lengths(
    prompts: Sequence[Prompt],
    tokenizer: Any,
    max_prompt_length: int,
    on_overflow: OverflowPolicy = "drop",
    chat_template: bool | None = None,
) -> tuple[list[Prompt], LengthReport]:
    """Keep prompts within budget; ``error`` raises `PromptTooLong` if any is over."""
    if on_overflow not in ("drop", "error"):
        raise ValueError(f"on_overflow must be 'drop' or 'error', got {on_overflow!r}")
    report = LengthReport(budget=max_prompt_length)
    kept: list[Prompt] = []
    for p in prompts:
        n = len(render_ids(p, tokenizer, chat_template))
        report.checked += 1
        report.max_length = max(report.max_length, n)
        if n > max_prompt_length:
            report.over_ids.append(p.id)
        else:
            kept.append(p)
    if report.over_ids and on_overflow == "error":
        raise PromptTooLong(report)
    return kept, report
