"""LaTeX -> sympy without antlr, and a numeric/symbolic equality test.

The LaTeX subset of final answers (fractions, roots, powers, trig, pi, complex i, implicit
products) is rewritten into Python syntax with explicit ``*`` and parsed by
``sympy.parsing.sympy_parser.parse_expr`` with only the standard transformations, so a
multi-letter run like ``pq`` is ``p*q`` and nothing is guessed beyond that. This module is
imported by the sympy worker process (`runtime.rewards.sympy_worker`); calling it in
process has no deadline.
"""

from __future__ import annotations

import random
import re
from typing import Any

_FUNCS = {
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "sinh", "cosh",
    "tanh", "log", "exp", "sqrt", "Abs", "factorial", "binomial", "root",
}  # fmt: skip
_CONSTS = {"pi": "pi", "oo": "oo"}
_GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "theta", "lambda", "mu", "phi", "psi",
    "omega", "sigma", "rho", "tau", "eta", "zeta", "kappa", "nu", "xi", "chi",
}  # fmt: skip
_CMD_MAP = {
    "\\cdot": "*", "\\times": "*", "\\div": "/", "\\ast": "*", "\\pi": " pi ", "\\infty": " oo ",
    "\\arcsin": " asin ", "\\arccos": " acos ", "\\arctan": " atan ", "\\ln": " log ",
    "\\log": " log ", "\\exp": " exp ", "\\sin": " sin ", "\\cos": " cos ", "\\tan": " tan ",
    "\\cot": " cot ", "\\sec": " sec ", "\\csc": " csc ", "\\sinh": " sinh ", "\\cosh": " cosh ",
    "\\tanh": " tanh ",
}  # fmt: skip


class ConversionError(ValueError):
    pass


def _group(s: str, i: int) -> tuple[str, int]:
    """The argument starting at ``s[i]``: a brace group or a single character."""
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        raise ConversionError("missing argument")
    if s[i] != "{":
        return s[i], i + 1
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "{":
            depth += 1
        elif s[j] == "}":
            depth -= 1
            if depth == 0:
                return s[i + 1 : j], j + 1
    raise ConversionError("unbalanced braces")


def _rewrite(s: str, depth: int = 0) -> str:
    """Rewrite LaTeX constructs with arguments into function-call syntax."""
    if depth > 40:
        raise ConversionError("nesting too deep")
    out: list[str] = []
    i = 0
    while i < len(s):
        if s.startswith("\\frac", i) or s.startswith("\\binom", i):
            is_frac = s.startswith("\\frac", i)
            a, j = _group(s, i + (5 if is_frac else 6))
            b, k = _group(s, j)
            ra, rb = _rewrite(a, depth + 1), _rewrite(b, depth + 1)
            out.append(f"(({ra})/({rb}))" if is_frac else f"binomial(({ra}),({rb}))")
            i = k
        elif s.startswith("\\sqrt", i):
            j = i + 5
            n = None
            if j < len(s) and s[j] == "[":
                close = s.find("]", j)
                if close < 0:
                    raise ConversionError("unbalanced root index")
                n, j = s[j + 1 : close], close + 1
            a, k = _group(s, j)
            ra = _rewrite(a, depth + 1)
            out.append(f"sqrt({ra})" if n is None else f"(({ra})**(1/({_rewrite(n, depth + 1)})))")
            i = k
        elif s[i] == "^":
            a, k = _group(s, i + 1)
            out.append(f"**({_rewrite(a, depth + 1)})")
            i = k
        elif s[i] == "{":
            a, k = _group(s, i)
            out.append(f"({_rewrite(a, depth + 1)})")
            i = k
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


_TOKEN_RE = re.compile(r"\s*(?:(\d+\.\d*|\.\d+|\d+)|([A-Za-z]+)|(\*\*|[-+*/(),!]))")


def to_python(latex: str) -> str:
    """A Python/sympy expression string for a normalised LaTeX answer."""
    s = latex
    if len(s) > 500:
        raise ConversionError("answer too long")
    for cmd in sorted(_CMD_MAP, key=len, reverse=True):
        s = re.sub(re.escape(cmd) + r"(?![a-zA-Z])", _CMD_MAP[cmd], s)
    for g in _GREEK:
        s = re.sub(r"\\" + g + r"(?![a-zA-Z])", f" {g} ", s)
    s = s.replace("\\left", "").replace("\\right", "")
    s = _rewrite(s)
    s = s.replace("[", "(").replace("]", ")")
    if "\\" in s or "=" in s or "_" in s:
        raise ConversionError(f"unsupported LaTeX in {latex!r}")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(s):
        if s[pos:].strip() == "":
            break
        m = _TOKEN_RE.match(s, pos)
        if not m:
            raise ConversionError(f"cannot read {s[pos : pos + 10]!r}")
        pos = m.end()
        num, name, op = m.groups()
        if num:
            tokens.append(("num", num))
        elif name:
            if name in _FUNCS:
                tokens.append(("func", name))
            elif name in _CONSTS:
                tokens.append(("atom", _CONSTS[name]))
            elif name in _GREEK:
                tokens.append(("atom", f"Symbol('{name}')"))
            else:
                for ch in name:  # a run of letters is a product of one-letter symbols
                    tokens.append(("atom", "I" if ch == "i" else f"Symbol('{ch}')"))
        else:
            tokens.append(("op", op))
    # a function applied without parentheses (``\\cot x``, ``\\sin 2x``): wrap its argument
    fixed: list[tuple[str, str]] = []
    k = 0
    while k < len(tokens):
        kind, text = tokens[k]
        nxt = tokens[k + 1] if k + 1 < len(tokens) else None
        if kind == "func" and nxt is not None and nxt[0] in ("num", "atom"):
            arg = [nxt]
            j = k + 2
            while j < len(tokens) and tokens[j][0] in ("num", "atom"):
                arg.append(tokens[j])
                j += 1
            fixed += [(kind, text), ("op", "(")] + arg + [("op", ")")]
            k = j
            continue
        fixed.append((kind, text))
        k += 1
    tokens = fixed
    out: list[str] = []
    prev = ""
    for kind, text in tokens:
        value_end = prev in ("num", "atom", "close", "bang")
        starts_value = kind in ("num", "atom", "func") or text == "("
        if value_end and starts_value:
            out.append("*")
        if kind == "op" and text == "!":
            out.append("!")
            prev = "bang"
            continue
        out.append(text)
        prev = {"num": "num", "atom": "atom", "func": "func"}.get(kind, "")
        if text == ")":
            prev = "close"
    expr = "".join(out)
    # n! -> factorial(n) for a number or a parenthesised group
    expr = re.sub(r"(\d+)!", r"factorial(\1)", expr)
    if "!" in expr:
        raise ConversionError("unsupported factorial")
    return expr


_NAMESPACE: dict[str, Any] | None = None


def to_sympy(latex: str) -> Any:
    from sympy.parsing.sympy_parser import parse_expr, standard_transformations

    expr = to_python(latex)
    global _NAMESPACE
    if _NAMESPACE is None:
        ns: dict[str, Any] = {}
        exec("from sympy import *", ns)  # what parse_expr uses by default, built once
        _NAMESPACE = ns
    try:
        return parse_expr(
            expr,
            global_dict=dict(_NAMESPACE),
            local_dict={},
            transformations=standard_transformations,
        )
    except Exception as exc:
        raise ConversionError(f"sympy could not parse {expr!r}: {type(exc).__name__}") from None


def _close(x: complex, y: complex, rel_tol: float) -> bool:
    return abs(x - y) <= rel_tol * max(1.0, abs(x), abs(y))


def sympy_equal(a: str, b: str, rel_tol: float = 1e-8) -> bool:
    """Whether two normalised LaTeX answers denote the same value or expression.

    Constant expressions are compared numerically (high precision); expressions with free
    symbols are compared at several random points and, failing that, by ``simplify``.
    """
    import sympy

    ea, eb = to_sympy(a), to_sympy(b)
    if ea == eb:
        return True
    syms = sorted(ea.free_symbols | eb.free_symbols, key=lambda s: s.name)
    try:
        if not syms:
            va, vb = complex(sympy.N(ea, 30)), complex(sympy.N(eb, 30))
            return _close(va, vb, rel_tol)
        rng = random.Random(0)
        for _ in range(4):
            point = {s: sympy.Rational(rng.randint(11, 97), rng.randint(5, 13)) for s in syms}
            va = complex(sympy.N(ea.subs(point), 30))
            vb = complex(sympy.N(eb.subs(point), 30))
            if not _close(va, vb, rel_tol):
                return False
        return True
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        diff = sympy.simplify(ea - eb)
        return bool(diff == 0)
