"""A safe arithmetic evaluator: the ``calculator`` tool.

Why not ``eval``: the expression is text a policy wrote. It is parsed with `ast` and only
numbers, parentheses, ``+ - * / // % **`` and unary signs are evaluated, exactly (integers
and fractions), with bounds on the expression size, the exponent and the result, so no
input can run code, allocate without bound or take long.
"""

from __future__ import annotations

import ast
import math
import threading
from collections.abc import Callable
from fractions import Fraction

MAX_EXPRESSION_CHARS = 512
MAX_EXPONENT = 256
MAX_DIGITS = 400  # |result| and every intermediate value stay below 10**MAX_DIGITS
_LIMIT = 10**MAX_DIGITS


# CPython 3.11 keeps ``ast.parse``'s depth count for building the tree's Python objects in
# one per-interpreter field: when a garbage collection during that build runs a finalizer
# and the thread switches to another parse, both counts mix and one parse fails with
# "SystemError: AST constructor recursion depth mismatch". Multi-turn episodes call the
# tool from a pool of threads, so parses take turns (each is microseconds).
_PARSE_LOCK = threading.Lock()


class CalculatorError(ValueError):
    """The expression is not arithmetic this calculator evaluates (the message says why)."""


def _check(value: Fraction) -> Fraction:
    if abs(value.numerator) >= _LIMIT or value.denominator >= _LIMIT:
        raise CalculatorError(f"result has more than {MAX_DIGITS} digits")
    return value


def _power(base: Fraction, exp: Fraction) -> Fraction:
    if exp.denominator != 1:
        raise CalculatorError("only integer exponents")
    if abs(exp) > MAX_EXPONENT:
        raise CalculatorError(f"exponent larger than {MAX_EXPONENT}")
    if base == 0 and exp < 0:
        raise CalculatorError("division by zero")
    return base ** int(exp)


def _floordiv(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("division by zero")
    return Fraction(a // b)


def _mod(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("division by zero")
    return a % b


def _div(a: Fraction, b: Fraction) -> Fraction:
    if b == 0:
        raise CalculatorError("division by zero")
    return a / b


_BINARY: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: _div,
    ast.FloorDiv: _floordiv,
    ast.Mod: _mod,
    ast.Pow: _power,
}


def _number(node: ast.Constant) -> Fraction:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"not a number: {value!r}")
    if isinstance(value, float):
        return Fraction(str(value))  # the decimal as written, not its binary approximation
    return Fraction(value)


def _refuse_huge(op: ast.operator, left: Fraction, right: Fraction) -> None:
    """Refuse a product or power whose result would be too large, before it is computed."""
    size = 0.0
    if isinstance(op, ast.Mult) and left and right:
        size = len(str(abs(left.numerator))) + len(str(abs(right.numerator))) - 1.0
    elif isinstance(op, ast.Pow) and right.denominator == 1 and abs(right) <= MAX_EXPONENT:
        base = max(math.log10(abs(left.numerator) or 1), math.log10(left.denominator))
        size = base * abs(int(right))
    if size > MAX_DIGITS:
        raise CalculatorError(f"result has more than {MAX_DIGITS} digits")


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant):
        return _check(_number(node))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _eval(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        _refuse_huge(node.op, left, right)
        return _check(_BINARY[type(node.op)](left, right))
    raise CalculatorError(f"unsupported expression element: {type(node).__name__}")


def _terminates(denominator: int) -> bool:
    for p in (2, 5):
        while denominator % p == 0:
            denominator //= p
    return denominator == 1


def format_number(value: Fraction) -> str:
    """Integers as integers, terminating decimals exactly (``0.3``), other values as the
    fraction ``p/q`` if short, else a decimal with 12 significant digits."""
    if value.denominator == 1:
        return str(value.numerator)
    if _terminates(value.denominator) and value.denominator <= 10**12:
        places = len(str(value.denominator)) - 1
        while 10**places % value.denominator:
            places += 1
        sign = "-" if value < 0 else ""
        whole, frac = divmod(abs(value.numerator) * 10**places // value.denominator, 10**places)
        return f"{sign}{whole}.{str(frac).zfill(places).rstrip('0')}"
    text = f"{value.numerator}/{value.denominator}"
    if len(text) <= 24:
        return text
    return f"{float(value):.12g}"


def calculate(expression: str) -> str:
    """The value of an arithmetic ``expression`` as text; `CalculatorError` otherwise."""
    text = expression.strip().replace("^", "**").replace("×", "*").replace("÷", "/")
    if not text:
        raise CalculatorError("empty expression")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        with _PARSE_LOCK:
            tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise CalculatorError(f"not an arithmetic expression: {expression.strip()!r}") from None
    except (ValueError, RecursionError, MemoryError):
        raise CalculatorError("expression too deeply nested") from None
    try:
        return format_number(_eval(tree))
    except RecursionError:
        raise CalculatorError("expression too deeply nested") from None
