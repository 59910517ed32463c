"""The ``POST /run`` request and response shapes, validated without a schema library.

Request::

    {"language": "python", "code": "...", "mode": "function" | "stdio",
     "tests": <function: HumanEval test code (str) or [{"code": str, "entry_point": str}]
              | stdio: [{"input": str, "output": str}]>,
     "entry_point": "name"          # function mode, when tests is a string
     "context": "..."               # function mode: trusted code the tests may use (the
                                    # prompt: helpers such as HumanEval's ``poly``)
     "network": false               # only where the executor allows network
     "limits": {"wall_s", "cpu_s", "memory_mb", "max_processes", "output_bytes",
                "file_bytes", "open_files", "disk_mb"},
     "stop_on_failure": false}

Response::

    {"results": [{"passed", "status", "stdout", "stderr", "wall_s", "exit_code", "detail"}],
     "passed": int, "total": int, "status": "ok" | <first non-ok status>, "isolation": {...}}
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from runtime.executor.sandbox import JudgeSpec, Limits, RunOutcome

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_CODE_BYTES = 1_000_000
MAX_TESTS = 512


class RequestError(ValueError):
    """A malformed request (answered with HTTP 400)."""


@dataclass(frozen=True)
class TestCase:
    """One sandboxed run: the program and, for stdio, its input and expected output, or,
    for a function test, what the judge runs against it."""

    program: str
    stdin: str | None = None
    expected: str | None = None
    judge: JudgeSpec | None = None


@dataclass(frozen=True)
class RunRequest:
    mode: str
    cases: tuple[TestCase, ...]
    limits: Limits
    stop_on_failure: bool
    network: bool = False


def parse_request(body: Any, ceiling: Limits | None = None) -> RunRequest:
    """Validate a decoded JSON body; raises `RequestError` with a readable message."""
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    language = body.get("language", "python")
    if language != "python":
        raise RequestError(f"unsupported language {language!r}; only 'python'")
    code = body.get("code")
    if not isinstance(code, str):
        raise RequestError("'code' must be a string")
    if len(code.encode("utf-8", "replace")) > MAX_CODE_BYTES:
        raise RequestError(f"'code' is larger than {MAX_CODE_BYTES} bytes")
    mode = body.get("mode", "function")
    tests = body.get("tests")
    context = body.get("context") or ""
    if not isinstance(context, str):
        raise RequestError("'context' must be a string")
    network = body.get("network", False)
    if not isinstance(network, bool):
        raise RequestError("'network' must be true or false")
    cases: list[TestCase] = []
    if mode == "function":
        if isinstance(tests, str):
            tests = [{"code": tests, "entry_point": body.get("entry_point")}]
        if not isinstance(tests, list) or not tests:
            raise RequestError(
                "function mode needs 'tests': test code or a list of {code, entry_point}"
            )
        for i, t in enumerate(tests):
            if not isinstance(t, dict) or not isinstance(t.get("code"), str):
                raise RequestError(f"tests[{i}] must be an object with a 'code' string")
            entry = t.get("entry_point") or body.get("entry_point")
            if not isinstance(entry, str) or not _IDENT.match(entry):
                raise RequestError(f"tests[{i}]: 'entry_point' must be a Python identifier")
            cases.append(TestCase(code, judge=JudgeSpec(t["code"], entry, context)))
    elif mode == "stdio":
        if not isinstance(tests, list) or not tests:
            raise RequestError("stdio mode needs 'tests': a list of {input, output}")
        for i, t in enumerate(tests):
            if (
                not isinstance(t, dict)
                or not isinstance(t.get("input", ""), str)
                or not isinstance(t.get("output"), str)
            ):
                raise RequestError(
                    f"tests[{i}] must be an object with 'input' and 'output' strings"
                )
            cases.append(TestCase(code, stdin=t.get("input", ""), expected=t["output"]))
    else:
        raise RequestError(f"unknown mode {mode!r}; expected 'function' or 'stdio'")
    if len(cases) > MAX_TESTS:
        raise RequestError(f"at most {MAX_TESTS} tests per request")
    try:
        limits = Limits.from_request(body.get("limits"), ceiling)
    except ValueError as exc:
        raise RequestError(str(exc)) from None
    stop = bool(body.get("stop_on_failure", False))
    return RunRequest(mode, tuple(cases), limits, stop, network)


def normalize_output(text: str) -> str:
    """Compare stdio output ignoring trailing whitespace on lines and trailing blank lines."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def same_output(actual: str, expected: str) -> bool:
    return normalize_output(actual) == normalize_output(expected)


def case_result(case: TestCase, outcome: RunOutcome, stream_cap: int) -> dict[str, Any]:
    """The JSON result of one test; stdio output is compared here."""
    status, detail = outcome.status, outcome.detail
    expected = case.expected
    if status == "ok" and expected is not None and not same_output(outcome.stdout, expected):
        status, detail = "failed", "output differs from the expected output"
    return {
        "passed": status == "ok",
        "status": status,
        "stdout": outcome.stdout[:stream_cap],
        "stderr": outcome.stderr[-stream_cap:],
        "wall_s": outcome.wall_s,
        "exit_code": outcome.exit_code,
        "detail": detail,
    }


def skipped_result() -> dict[str, Any]:
    return {
        "passed": False,
        "status": "failed",
        "stdout": "",
        "stderr": "",
        "wall_s": 0.0,
        "exit_code": None,
        "detail": "skipped after an earlier failure",
    }
