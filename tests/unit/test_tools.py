"""The tools of multi-turn rollouts: the calculator (no eval; exact; bounded) and the python
tool run through the real sandboxed executor service."""

from __future__ import annotations

import pytest

from runtime.executor.settings import ExecutorSettings
from runtime.tools.calculator import MAX_DIGITS, CalculatorError, calculate
from runtime.tools.runners import CalculatorTool, PythonTool, ToolBox


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("37+45", "82"),
        (" 2 * (3 + 4) ", "14"),
        ("-(3-5)*2", "4"),
        ("+7", "7"),
        ("0.1+0.2", "0.3"),  # exact decimals, not 0.30000000000000004
        ("1/3", "1/3"),
        ("3/8", "0.375"),
        ("-7/4", "-1.75"),
        ("7//2", "3"),
        ("-7//2", "-4"),
        ("7%3", "1"),
        ("2**10", "1024"),
        ("2^10", "1024"),  # a caret is a power, as on a calculator
        ("2**-2", "0.25"),
        ("6×7÷2", "21"),
        ("10**200*10**199", "1" + "0" * 399),
        ("2**256", str(2**256)),
        ("((((1))))", "1"),
        ("(" * 200 + "1" + ")" * 200, "1"),  # deep but within the length limit
        ("-" * 500 + "1", "1"),
        ("1e3", "1000"),
    ],
)
def test_calculator_values(expression: str, value: str) -> None:
    assert calculate(expression) == value


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("1/0", "division by zero"),
        ("5//0", "division by zero"),
        ("5%0", "division by zero"),
        ("0**-1", "division by zero"),
        ("2**0.5", "integer exponents"),
        ("2**100000", "exponent"),
        ("10**200*10**200", f"more than {MAX_DIGITS} digits"),
        ("99**256", f"more than {MAX_DIGITS} digits"),
        ("9**256*9**256", f"more than {MAX_DIGITS} digits"),
        ("__import__('os').system('id')", "unsupported"),
        ("(lambda: 1)()", "unsupported"),
        ("x+1", "unsupported"),
        ("'a'*3", "not a number"),
        ("True+1", "not a number"),
        ("1+", "not an arithmetic expression"),
        ("1 < 2", "unsupported"),
        ("1+" * 300 + "1", "longer than"),
    ],
)
def test_calculator_refuses(expression: str, why: str) -> None:
    with pytest.raises(CalculatorError, match=why):
        calculate(expression)


def test_calculator_tool_reports_errors_as_output() -> None:
    tool = CalculatorTool()
    assert tool("37+45").text == "82" and tool("37+45").ok
    bad = tool("37+")
    assert not bad.ok and bad.text.startswith("error: not an arithmetic expression")


@pytest.fixture(scope="module")
def python_tool():
    tool = PythonTool(ExecutorSettings(workers=2), timeout_s=2.0)
    yield tool
    tool.close()


def test_python_tool_runs_in_the_sandbox(python_tool: PythonTool) -> None:
    out = python_tool("print(37 + 45)")
    assert out.ok and out.text == "82"
    # a fenced block runs without its fence; silent programs give empty output
    assert python_tool("```python\nx = 2 ** 10\nprint(x)\n```").text == "1024"
    assert python_tool("x = 1").text == "" and python_tool("x = 1").ok


def test_python_tool_errors_are_output(python_tool: PythonTool) -> None:
    out = python_tool("print('partial')\n1/0")
    assert not out.ok
    assert out.text.startswith("partial") and out.text.endswith(
        "ZeroDivisionError: division by zero"
    )
    slow = python_tool("while True:\n    pass")
    assert not slow.ok and "2.0" in slow.text  # the tool's own time limit, not the executor's


def test_python_tool_limits_come_from_the_executor_settings() -> None:
    tool = PythonTool(ExecutorSettings(time_limit_s=5.0, memory_limit_mb=256), timeout_s=30.0)
    try:
        limits = tool.payload("print(1)")["limits"]
        assert limits["wall_s"] == 5.0 and limits["memory_mb"] == 256  # the lower limit wins
        assert PythonTool(ExecutorSettings(), 2.0).payload("")["limits"]["wall_s"] == 2.0
    finally:
        tool.close()


def test_toolbox_names_its_tools() -> None:
    box = ToolBox(["calculator"], ExecutorSettings())
    assert box.run("calculator", "6*7").text == "42"
    missing = box.run("python", "print(1)")
    assert not missing.ok and "no tool named 'python'" in missing.text
    with pytest.raises(ValueError, match="unknown tool"):
        ToolBox(["search"], ExecutorSettings())
    box.close()


def test_calculator_calls_from_many_threads_with_collections_running() -> None:
    """Episodes call the tool from a thread pool. On CPython 3.11, a garbage collection
    that runs a finalizer while ``ast.parse`` builds its tree lets another thread's parse
    mix into its depth count ("SystemError: AST constructor recursion depth mismatch"):
    garbage with finalizers and a short switch interval make that near-certain here."""
    import gc
    import sys
    import threading

    class Finalized:
        def __del__(self) -> None:
            sum(range(50))

    old_interval, old_threshold = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    errors: list[BaseException] = []
    expression = "(" * 40 + "1+2*(3-4)" + ")" * 40

    def work() -> None:
        for _ in range(1500):
            cycle: list[object] = [Finalized(), Finalized()]
            cycle.append(cycle)
            del cycle
            try:
                assert calculate(expression) == "-1"
            except BaseException as exc:  # the test reports any failure, SystemError too
                errors.append(exc)
                return

    try:
        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
        gc.set_threshold(*old_threshold)
    assert errors == []
