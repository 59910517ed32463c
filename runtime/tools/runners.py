"""Tool runners: a call's argument text in, the text the policy sees back out.

A failing call (a bad expression, a Python exception, a timeout) is not a rollout error:
its message is the tool's output, marked ``ok=False`` so the error rate is a metric. Only
an executor that cannot be reached at all raises (`ToolUnavailable`), like a verifier's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from runtime.executor.client import ExecutorEndpoint, run_request
from runtime.executor.settings import ExecutorSettings
from runtime.tools.calculator import CalculatorError, calculate


class ToolUnavailable(RuntimeError):
    """The executor behind the python tool could not be reached."""


@dataclass(frozen=True)
class ToolOutput:
    text: str
    ok: bool = True


class CalculatorTool:
    name = "calculator"

    def __call__(self, arguments: str) -> ToolOutput:
        try:
            return ToolOutput(calculate(arguments))
        except CalculatorError as exc:
            return ToolOutput(f"error: {exc}", ok=False)


def _error_tail(stderr: str, limit: int = 1) -> str:
    """The last lines of a traceback: the exception, not the sandbox's frames."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return "\n".join(lines[-limit:])


class PythonTool:
    """Runs the call's code as a program in the sandboxed executor; its stdout is the
    output (stderr's last lines when it fails). Uses the executor's client API only: an
    endpoint from ``[rewards.code]``, or a local executor started on first use."""

    name = "python"

    def __init__(self, settings: ExecutorSettings, timeout_s: float) -> None:
        self.settings = settings
        self.timeout_s = timeout_s
        self._executor = ExecutorEndpoint(settings)
        self._client = httpx.Client(trust_env=False)

    @property
    def url(self) -> str:
        return self._executor.url

    def payload(self, code: str) -> dict[str, Any]:
        limits = self.settings.limits()
        limits["wall_s"] = min(float(limits["wall_s"]), self.timeout_s)
        limits["cpu_s"] = min(float(limits["cpu_s"]), self.timeout_s)
        body: dict[str, Any] = {
            "language": "python",
            "mode": "stdio",
            "code": code,
            "tests": [{"input": "", "output": ""}],
            "limits": limits,
        }
        if self.settings.network:
            body["network"] = True
        return body

    def __call__(self, arguments: str) -> ToolOutput:
        code = _strip_fence(arguments)
        try:
            data = run_request(self._client, self.url, self.payload(code), self.timeout_s + 30.0)
        except ValueError as exc:  # the executor refused the request (too large, ...)
            return ToolOutput(f"error: {exc}", ok=False)
        except httpx.HTTPError as exc:
            raise ToolUnavailable(f"python tool: executor unreachable: {exc}") from exc
        result = (data.get("results") or [{}])[0]
        status = str(result.get("status", ""))
        stdout = str(result.get("stdout", ""))
        # stdio mode compares stdout with the empty expected output: "failed" with exit 0
        # only means the program printed something
        if status == "ok" or (status == "failed" and result.get("exit_code") == 0):
            return ToolOutput(stdout.rstrip("\n"))
        detail = _error_tail(str(result.get("stderr", ""))) or str(result.get("detail", status))
        return ToolOutput((stdout + detail).strip() or status, ok=False)

    def close(self) -> None:
        self._client.close()
        self._executor.close()


def _strip_fence(code: str) -> str:
    """Code written as a fenced block inside the call runs without the fence."""
    text = code.strip("\n")
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text


class ToolBox:
    """The run's tools by name."""

    def __init__(
        self, names: Sequence[str], executor: ExecutorSettings, timeout_s: float = 10.0
    ) -> None:
        self.tools: dict[str, Any] = {}
        for name in names:
            if name == "calculator":
                self.tools[name] = CalculatorTool()
            elif name == "python":
                self.tools[name] = PythonTool(executor, timeout_s)
            else:
                raise ValueError(f"unknown tool {name!r}")

    def run(self, name: str, arguments: str) -> ToolOutput:
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutput(f"error: no tool named {name!r}", ok=False)
        result: ToolOutput = tool(arguments)
        return result

    def close(self) -> None:
        for tool in self.tools.values():
            close = getattr(tool, "close", None)
            if close is not None:
                close()
