"""[environment]: multi-turn, tool-using rollouts (turns, tools, call syntax, stop)."""

from __future__ import annotations

from typing import Literal

from contract.spec._base import Section, fld

ToolName = Literal["calculator", "python"]


class EnvironmentSection(Section):
    max_turns: int = fld(
        1,
        description="generation turns per sample; 1 is the single-turn rollout (no tools run)",
        note="A turn that ends with a tool call gets the tool's output appended and the "
        "same sequence continues (the next request is prompt + response + tool output, so "
        "the engine's prefix cache reuses it); inference.max_response_length bounds the "
        "whole trajectory, tool output included. Tool-output tokens carry no loss.",
        ge=1,
        le=64,
    )
    tools: list[ToolName] = fld(
        [],
        description="tools the policy may call: calculator (exact arithmetic, no eval) and "
        "python (a program run in the sandboxed code executor of [rewards.code])",
        max_length=2,
    )
    call_open: str = fld(
        "<{tool}>",
        description="text that opens a tool call; {tool} is the tool's name",
        min_length=1,
        max_length=64,
    )
    call_close: str = fld(
        "</{tool}>",
        description="text that closes a tool call; the engines stop a turn there",
        min_length=1,
        max_length=64,
    )
    result_template: str = fld(
        "<output>{output}</output>",
        description="the tool-result text appended after a call; {output} is the tool's output",
        min_length=1,
        max_length=256,
    )
    stop: Literal["no_tool_call", "final_answer"] = fld(
        "no_tool_call",
        description="what ends an episode before max_turns: a turn without a tool call, or "
        "also a turn whose text matches final_answer_pattern",
    )
    final_answer_pattern: str | None = fld(
        None,
        description='regular expression of a final answer (stop = "final_answer")',
        min_length=1,
    )
    max_tool_output_chars: int = fld(
        256, description="tool output longer than this is cut (with ...)", ge=1, le=65536
    )
    tool_timeout_s: float = fld(
        10.0,
        description="time limit of one python tool call (at most rewards.code.time_limit_s)",
        gt=0.0,
        le=120.0,
    )
