"""Expression nodes of the rule language and their evaluation semantics.

Semantics, chosen so that a rule can never crash a compile:

* A field that the configuration does not have evaluates to `UNSET`; both `UNSET` and
  `null` count as *missing*.
* Ordering comparisons (`< <= > >=`) and `==` / `!=` with a missing operand are **false**
  (so `x != 1` is false while `x` is unset). Compare with the literal `null`
  (`x == null`, `x != null`) or use `x is set` to test presence.
* Comparisons between values of different kinds (a string with a number, say) are false;
  `==` between them is false and `!=` true. Booleans are not numbers.
* Arithmetic, `-x` and function calls with a missing operand, or that raise (a type
  error, division by zero), give null, which then makes any comparison false.
* `a in b` / `a not in b` are false when `a` or `b` is missing or `b` is not a list/string.
* `and`, `or`, `not` use truthiness; missing is falsy.
* `x is set` asks the view whether the user gave `x` (spec, override or recipe), not
  whether it has a value (defaults and derived values are not "set").
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from compiler.diagnostics import Span
from compiler.rules.functions import Function


class _Unset:
    """The value of a field the configuration does not hold."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()


def is_missing(value: Any) -> bool:
    return value is None or value is UNSET


class Context(Protocol):
    def get(self, path: str) -> Any: ...

    def is_set(self, path: str) -> bool: ...


class Node:
    """An expression node: `eval` against a context, `render` back to canonical text."""

    def eval(self, ctx: Context) -> Any:
        raise NotImplementedError

    def render(self) -> str:
        raise NotImplementedError

    def children(self) -> Sequence[Node]:
        return ()

    def walk(self) -> Iterator[Node]:
        yield self
        for child in self.children():
            yield from child.walk()


@dataclass(eq=False)
class PathRef(Node):
    path: str
    span: Span

    def eval(self, ctx: Context) -> Any:
        return ctx.get(self.path)

    def render(self) -> str:
        return self.path


@dataclass(eq=False)
class Literal(Node):
    value: Any

    def eval(self, ctx: Context) -> Any:
        return self.value

    def render(self) -> str:
        return render_literal(self.value)


@dataclass(eq=False)
class ListExpr(Node):
    items: list[Node]

    def eval(self, ctx: Context) -> Any:
        return [item.eval(ctx) for item in self.items]

    def render(self) -> str:
        return "[" + ", ".join(i.render() for i in self.items) + "]"

    def children(self) -> Sequence[Node]:
        return self.items


@dataclass(eq=False)
class Group(Node):
    inner: Node

    def eval(self, ctx: Context) -> Any:
        return self.inner.eval(ctx)

    def render(self) -> str:
        return f"({self.inner.render()})"

    def children(self) -> Sequence[Node]:
        return (self.inner,)


@dataclass(eq=False)
class Call(Node):
    func: Function
    args: list[Node]
    span: Span

    def eval(self, ctx: Context) -> Any:
        values = [a.eval(ctx) for a in self.args]
        if not self.func.null_ok and any(is_missing(v) for v in values):
            return None
        try:
            return self.func.fn(*values)
        except Exception:  # noqa: BLE001 - a rule must never crash evaluation
            return None

    def render(self) -> str:
        return f"{self.func.name}(" + ", ".join(a.render() for a in self.args) + ")"

    def children(self) -> Sequence[Node]:
        return self.args


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _floordiv(a: Any, b: Any) -> Any:
    return a // b


_ARITH: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": _floordiv,
    "%": operator.mod,
}


@dataclass(eq=False)
class Arith(Node):
    op: str
    left: Node
    right: Node

    def eval(self, ctx: Context) -> Any:
        a, b = self.left.eval(ctx), self.right.eval(ctx)
        if is_missing(a) or is_missing(b):
            return None
        numeric = _is_number(a) and _is_number(b)
        # `+` also joins two strings or two lists; everything else is numeric only.
        if not numeric and not (
            self.op == "+" and type(a) is type(b) and isinstance(a, str | list)
        ):
            return None
        try:
            out = _ARITH[self.op](a, b)
        except (ArithmeticError, TypeError, ValueError):
            return None
        if isinstance(out, float) and not math.isfinite(out):
            return None
        return out

    def render(self) -> str:
        return f"{self.left.render()} {self.op} {self.right.render()}"

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)


@dataclass(eq=False)
class Neg(Node):
    operand: Node

    def eval(self, ctx: Context) -> Any:
        v = self.operand.eval(ctx)
        return -v if _is_number(v) else None

    def render(self) -> str:
        return f"-{self.operand.render()}"

    def children(self) -> Sequence[Node]:
        return (self.operand,)


def _comparable(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return True
    if isinstance(a, bool) and isinstance(b, bool):
        return True
    return type(a) is type(b) and isinstance(a, str | list)


_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(eq=False)
class Compare(Node):
    op: str
    left: Node
    right: Node

    def eval(self, ctx: Context) -> bool:
        a, b = self.left.eval(ctx), self.right.eval(ctx)
        if self.op in ("==", "!="):
            against_null = _is_null_literal(self.left) or _is_null_literal(self.right)
            if against_null:
                equal = is_missing(a) and is_missing(b)
                return equal if self.op == "==" else not equal
            if is_missing(a) or is_missing(b):
                return False
            equal = _comparable(a, b) and a == b
            return equal if self.op == "==" else not equal
        if is_missing(a) or is_missing(b) or not _comparable(a, b):
            return False
        try:
            return bool(_ORDER[self.op](a, b))
        except TypeError:
            return False

    def render(self) -> str:
        return f"{self.left.render()} {self.op} {self.right.render()}"

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)


def _is_null_literal(node: Node) -> bool:
    return isinstance(node, Literal) and node.value is None


@dataclass(eq=False)
class In(Node):
    left: Node
    right: Node
    negate: bool

    def eval(self, ctx: Context) -> bool:
        a, b = self.left.eval(ctx), self.right.eval(ctx)
        if is_missing(a) or is_missing(b):
            return False
        if isinstance(b, str):
            if not isinstance(a, str):
                return False
            found = a in b
        elif isinstance(b, list | tuple | dict | set | frozenset):
            found = any(_comparable(a, item) and a == item for item in b)
        else:
            return False
        return not found if self.negate else found

    def render(self) -> str:
        word = "not in" if self.negate else "in"
        return f"{self.left.render()} {word} {self.right.render()}"

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)


@dataclass(eq=False)
class IsSet(Node):
    target: PathRef
    negate: bool

    def eval(self, ctx: Context) -> bool:
        found = bool(ctx.is_set(self.target.path))
        return not found if self.negate else found

    def render(self) -> str:
        word = "is not set" if self.negate else "is set"
        return f"{self.target.render()} {word}"

    def children(self) -> Sequence[Node]:
        return (self.target,)


@dataclass(eq=False)
class Not(Node):
    operand: Node

    def eval(self, ctx: Context) -> bool:
        return not truthy(self.operand.eval(ctx))

    def render(self) -> str:
        return f"not {self.operand.render()}"

    def children(self) -> Sequence[Node]:
        return (self.operand,)


@dataclass(eq=False)
class BoolOp(Node):
    op: str  # "and" | "or"
    left: Node
    right: Node

    def eval(self, ctx: Context) -> bool:
        if self.op == "and":
            return truthy(self.left.eval(ctx)) and truthy(self.right.eval(ctx))
        return truthy(self.left.eval(ctx)) or truthy(self.right.eval(ctx))

    def render(self) -> str:
        return f"{self.left.render()} {self.op} {self.right.render()}"

    def children(self) -> Sequence[Node]:
        return (self.left, self.right)


def truthy(value: Any) -> bool:
    if is_missing(value):
        return False
    return bool(value)


def render_literal(value: Any) -> str:
    """A literal as the rule language spells it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return repr(value)


def format_value(value: Any, nested: bool = False) -> str:
    """A runtime value for a message: TOML-like, strings bare at the top level."""
    if value is UNSET:
        return "<unset>"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return render_literal(value) if nested else value
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v, True) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {format_value(v, True)}" for k, v in value.items())
        return "{" + inner + "}"
    return str(value)


def paths_in(node: Node) -> list[PathRef]:
    return [n for n in node.walk() if isinstance(n, PathRef)]
