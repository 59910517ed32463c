"""Compile a rule condition's expression tree into nested Python closures, once per rule.

`rlc lint` re-runs every rule on every manifest; walking the node tree (a method call and
an attribute lookup per node, the operator re-dispatched on each visit) was a quarter of a
lint. A closure binds the operator, the callee and the constant decisions (is an operand
the literal `null`?) when the rule is loaded, so evaluation is just the calls that compute
the value.

The closures implement exactly the semantics of `compiler.rules.expr` (see its docstring);
`tests/unit/test_rules_compile.py` checks them against the tree interpreter on every rule
shipped and on randomised contexts. They take a memo that maps a field path to its value
(a dict whose missing keys are fetched from the view) and answers `is_set`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from compiler.rules import expr as ex

UNSET = ex.UNSET
_comparable = ex._comparable
_is_number = ex._is_number


class Memo(Protocol):
    """Field values by path (`memo[path]`, fetched once) and the view's `is_set`."""

    def __getitem__(self, path: str) -> Any: ...

    def is_set(self, path: str) -> bool: ...


Compiled = Callable[[Memo], Any]


def compile_condition(node: ex.Node) -> Callable[[Memo], bool]:
    """A function computing `truthy(node.eval(ctx))`."""
    if isinstance(node, ex.Group):
        return compile_condition(node.inner)
    if isinstance(node, ex.PathRef):  # a bool field used as a condition: `when async.enabled`
        path = node.path

        def field_truthy(m: Memo) -> bool:
            v = m[path]
            return False if v is None or v is UNSET else bool(v)

        return field_truthy
    f = compile_node(node)
    if isinstance(node, ex.Compare | ex.In | ex.IsSet | ex.Not | ex.BoolOp):
        return f  # these already return a bool
    return lambda m: _truthy(f(m))


def _truthy(value: Any) -> bool:
    return False if value is None or value is UNSET else bool(value)


def compile_node(node: ex.Node) -> Compiled:  # noqa: C901 - one branch per node type
    """A function computing `node.eval(ctx)`."""
    if isinstance(node, ex.PathRef):
        return _path(node.path)
    if isinstance(node, ex.Literal):
        return _const(node.value)
    if isinstance(node, ex.Group):
        return compile_node(node.inner)
    if isinstance(node, ex.ListExpr):
        if all(isinstance(i, ex.Literal) for i in node.items):
            values = [i.value for i in node.items]  # type: ignore[attr-defined]
            return lambda m: list(values)  # a fresh list, as evaluating the items gives
        return _list([compile_node(i) for i in node.items])
    if isinstance(node, ex.Call):
        return _call(node.func.fn, node.func.null_ok, [compile_node(a) for a in node.args])
    if isinstance(node, ex.Arith):
        return _arith(node.op, compile_node(node.left), compile_node(node.right))
    if isinstance(node, ex.Neg):
        return _neg(compile_node(node.operand))
    if isinstance(node, ex.Compare):
        against_null = ex._is_null_literal(node.left) or ex._is_null_literal(node.right)
        if not against_null and isinstance(node.right, ex.Literal):
            left = compile_node(node.left)
            general = _compare(node.op, False, left, compile_node(node.right))
            path = node.left.path if isinstance(node.left, ex.PathRef) else None
            return _compare_literal(node.op, left, path, node.right.value, general)
        return _compare(node.op, against_null, compile_node(node.left), compile_node(node.right))
    if isinstance(node, ex.In):
        return _in(node.negate, compile_node(node.left), compile_node(node.right))
    if isinstance(node, ex.IsSet):
        return _is_set(node.target.path, node.negate)
    if isinstance(node, ex.Not):
        return _not(compile_condition(node.operand))
    if isinstance(node, ex.BoolOp):
        left, right = compile_condition(node.left), compile_condition(node.right)
        if node.op == "and":
            return lambda m: left(m) and right(m)
        return lambda m: left(m) or right(m)
    raise TypeError(f"cannot compile {type(node).__name__}")


def _path(path: str) -> Compiled:
    return lambda m: m[path]


def _const(value: Any) -> Compiled:
    return lambda m: value


def _list(items: list[Compiled]) -> Compiled:
    return lambda m: [f(m) for f in items]


def _call(fn: Callable[..., Any], null_ok: bool, args: list[Compiled]) -> Compiled:
    if len(args) == 1 and not null_ok:
        (arg,) = args

        def call1(m: Memo) -> Any:
            v = arg(m)
            if v is None or v is UNSET:
                return None
            try:
                return fn(v)
            except Exception:  # noqa: BLE001 - a rule must never crash evaluation
                return None

        return call1
    if len(args) == 2 and not null_ok:
        first, second = args

        def call2(m: Memo) -> Any:
            a, b = first(m), second(m)
            if a is None or a is UNSET or b is None or b is UNSET:
                return None
            try:
                return fn(a, b)
            except Exception:  # noqa: BLE001 - a rule must never crash evaluation
                return None

        return call2

    def call(m: Memo) -> Any:
        values = [a(m) for a in args]
        if not null_ok:
            for v in values:
                if v is None or v is UNSET:
                    return None
        try:
            return fn(*values)
        except Exception:  # noqa: BLE001 - a rule must never crash evaluation
            return None

    return call


def _arith(op: str, left: Compiled, right: Compiled) -> Compiled:
    opf = ex._ARITH[op]
    joins = op == "+"

    def arith(m: Memo) -> Any:
        a, b = left(m), right(m)
        if a is None or a is UNSET or b is None or b is UNSET:
            return None
        if not (_is_number(a) and _is_number(b)) and not (
            joins and type(a) is type(b) and isinstance(a, str | list)
        ):
            return None
        try:
            out = opf(a, b)
        except (ArithmeticError, TypeError, ValueError):
            return None
        if isinstance(out, float) and not math.isfinite(out):
            return None
        return out

    return arith


def _neg(operand: Compiled) -> Compiled:
    def neg(m: Memo) -> Any:
        v = operand(m)
        return -v if _is_number(v) else None

    return neg


def _compare(op: str, against_null: bool, left: Compiled, right: Compiled) -> Compiled:
    if op in ("==", "!="):
        want = op == "=="
        if against_null:

            def null_eq(m: Memo) -> bool:
                a, b = left(m), right(m)
                equal = (a is None or a is UNSET) and (b is None or b is UNSET)
                return equal if want else not equal

            return null_eq

        def eq(m: Memo) -> bool:
            a, b = left(m), right(m)
            if a is None or a is UNSET or b is None or b is UNSET:
                return False
            ta, tb = type(a), type(b)
            if ta is tb and (ta is str or ta is int or ta is float or ta is bool):
                equal = a == b  # the common cases of `_comparable`, decided by type alone
            else:
                equal = _comparable(a, b) and a == b
            return equal if want else not equal

        return eq

    order = ex._ORDER[op]

    def ordered(m: Memo) -> bool:
        a, b = left(m), right(m)
        ta, tb = type(a), type(b)
        if (ta is int or ta is float) and (tb is int or tb is float):
            return bool(order(a, b))  # two plain numbers: comparable, and never a TypeError
        if a is None or a is UNSET or b is None or b is UNSET or not _comparable(a, b):
            return False
        try:
            return bool(order(a, b))
        except TypeError:
            return False

    return ordered


def _compare_literal(
    op: str, left: Compiled, path: str | None, value: Any, general: Compiled
) -> Compiled:
    """`X OP literal`, the commonest condition: the type of X's value alone decides the
    usual cases (a number against a number, a string or bool against one of its kind);
    anything else goes through the general comparison (which re-reads X: fields are
    memoised and expressions have no side effects). ``path``: X is that field (read from
    the memo directly, one call fewer)."""
    kind = type(value)
    if op in ("==", "!="):
        if kind not in (str, int, float, bool):
            return general
        want = op == "=="
        if path is not None:

            def eq_field(m: Memo) -> bool:
                a = m[path]
                if type(a) is kind:
                    return (a == value) is want
                return bool(general(m))

            return eq_field

        def eq_literal(m: Memo) -> bool:
            a = left(m)
            if type(a) is kind:
                return (a == value) is want
            return bool(general(m))

        return eq_literal
    if kind not in (int, float):
        return general
    order = ex._ORDER[op]
    if path is not None:

        def order_field(m: Memo) -> bool:
            a = m[path]
            ta = type(a)
            if ta is int or ta is float:
                return bool(order(a, value))
            return bool(general(m))

        return order_field

    def order_literal(m: Memo) -> bool:
        a = left(m)
        ta = type(a)
        if ta is int or ta is float:
            return bool(order(a, value))
        return bool(general(m))

    return order_literal


def _in(negate: bool, left: Compiled, right: Compiled) -> Compiled:
    def contains(m: Memo) -> bool:
        a, b = left(m), right(m)
        if a is None or a is UNSET or b is None or b is UNSET:
            return False
        if isinstance(b, str):
            if not isinstance(a, str):
                return False
            found = a in b
        elif isinstance(b, list | tuple | dict | set | frozenset):
            found = any(_comparable(a, item) and a == item for item in b)
        else:
            return False
        return not found if negate else found

    return contains


def _is_set(path: str, negate: bool) -> Compiled:
    if negate:
        return lambda m: not m.is_set(path)
    return lambda m: bool(m.is_set(path))


def _not(operand: Callable[[Memo], bool]) -> Compiled:
    return lambda m: not operand(m)
