"""The ``[environment]`` of a multi-turn rollout: turns, tools, call syntax, stop condition.

Read from the manifest's ``config.environment`` (defaults are the spec's). A call is the
text between ``call_open`` and ``call_close`` (``{tool}`` in them is the tool's name); the
engines stop generating at a closing tag, the tool runs on the text in between, and its
output, written through ``result_template``, is appended to the SAME sequence before the
next turn, so the next request is the previous prompt + response + tool output and the
engine's prefix cache reuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from contract.defaults import default_of
from contract.spec.environment import EnvironmentSection

TOOLS = ("calculator", "python")
STOPS = ("no_tool_call", "final_answer")
TRAILING_CHARS = 3  # a BPE token may end a few characters after a closing tag


@dataclass(frozen=True)
class ToolCall:
    tool: str
    arguments: str


def _spec(name: str) -> Any:
    default = default_of(EnvironmentSection, name)
    return tuple(default) if isinstance(default, list) else default


@dataclass(frozen=True)
class Environment:
    """``[environment]`` (defaults are the spec's, `contract.defaults`)."""

    max_turns: int = _spec("max_turns")
    tools: tuple[str, ...] = _spec("tools")
    call_open: str = _spec("call_open")
    call_close: str = _spec("call_close")
    result_template: str = _spec("result_template")
    stop: str = _spec("stop")
    final_answer_pattern: str | None = _spec("final_answer_pattern")
    max_tool_output_chars: int = _spec("max_tool_output_chars")
    tool_timeout_s: float = _spec("tool_timeout_s")

    def __post_init__(self) -> None:
        unknown = [t for t in self.tools if t not in TOOLS]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; known: {', '.join(TOOLS)}")
        if self.stop not in STOPS:
            raise ValueError(f"environment.stop must be one of {STOPS}, got {self.stop!r}")
        if self.stop == "final_answer" and not self.final_answer_pattern:
            raise ValueError('environment.stop = "final_answer" needs final_answer_pattern')
        if self.max_turns < 1:
            raise ValueError("environment.max_turns must be at least 1")
        if "{output}" not in self.result_template:
            raise ValueError("environment.result_template must contain {output}")

    @classmethod
    def from_contract(cls, env: EnvironmentSection) -> Environment:
        """The run's environment, each field read from the contract's section (a missing
        ``[environment]`` is the single-turn default section)."""
        return cls(
            max_turns=env.max_turns,
            tools=tuple(env.tools),
            call_open=env.call_open,
            call_close=env.call_close,
            result_template=env.result_template,
            stop=env.stop,
            final_answer_pattern=env.final_answer_pattern,
            max_tool_output_chars=env.max_tool_output_chars,
            tool_timeout_s=env.tool_timeout_s,
        )

    @property
    def multi_turn(self) -> bool:
        """Whether rollouts continue after a tool call (otherwise the single-turn path)."""
        return self.max_turns > 1 and bool(self.tools)

    def opening(self, tool: str) -> str:
        return self.call_open.replace("{tool}", tool)

    def closing(self, tool: str) -> str:
        return self.call_close.replace("{tool}", tool)

    def stop_strings(self) -> list[str]:
        """Where the engines stop a turn: every tool's closing tag (deduplicated)."""
        return list(dict.fromkeys(self.closing(t) for t in self.tools))

    def find_call(self, text: str) -> ToolCall | None:
        """The call ``text`` ends with: its last closing tag, and the last opening tag of
        the same tool before it. After the closing tag only whitespace and at most
        ``TRAILING_CHARS`` other characters may follow: the rest of the token that completed
        the tag (the engines stop there)."""
        stripped = text.rstrip()
        best: ToolCall | None = None
        best_end = -1
        for tool in self.tools:
            close = self.closing(tool)
            end = stripped.rfind(close)
            if end < 0 or len(stripped) - end - len(close) > TRAILING_CHARS:
                continue
            start = stripped.rfind(self.opening(tool), 0, end)
            if start < 0 or end <= best_end:
                continue
            best = ToolCall(tool, stripped[start + len(self.opening(tool)) : end])
            best_end = end
        return best

    def is_final(self, text: str) -> bool:
        """``stop = "final_answer"``: the turn gave the final answer."""
        return bool(
            self.stop == "final_answer"
            and self.final_answer_pattern
            and re.search(self.final_answer_pattern, text)
        )

    def render_result(self, output: str) -> str:
        """The tool-result text inserted into the context (output cut to the limit)."""
        cap = self.max_tool_output_chars
        if len(output) > cap:
            output = output[:cap] + "..."
        return self.result_template.replace("{output}", output)
