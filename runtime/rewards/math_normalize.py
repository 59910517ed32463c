"""Math answers as strings: extraction from responses and LaTeX normalisation.

Everything here is plain string work (fast, no sympy): find the final answer of a
response, rewrite LaTeX spellings of the same value to one canonical spelling, and split
compound answers (tuples, intervals, lists, sets, unions, matrices, ``\\pm``) into parts
that `runtime.rewards.math_answer` compares element by element.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

# --- extraction ------------------------------------------------------------------------


def _braced(text: str, start: int) -> tuple[str, int] | None:
    """The contents of the brace group opening at ``text[start] == '{'`` and its end."""
    if start >= len(text) or text[start] != "{":
        return None
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
            continue
        if c == "{" and not (i > 0 and text[i - 1] == "\\"):
            depth += 1
        elif c == "}" and not (i > 0 and text[i - 1] == "\\"):
            depth -= 1
            if depth == 0:
                return text[start + 1 : i], i + 1
    return None


_BOX_RE = re.compile(r"\\(?:boxed|fbox|framebox)\b\s*")


def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces), in order.

    ``\\boxed 5`` (no braces) takes the token up to whitespace or ``$``.
    """
    out: list[str] = []
    for m in _BOX_RE.finditer(text):
        pos = m.end()
        if pos < len(text) and text[pos] == "{":
            got = _braced(text, pos)
            if got is not None:
                out.append(got[0])
        else:
            tok = re.match(r"[^\s$]+", text[pos:])
            if tok:
                out.append(tok.group(0))
    return out


_FINAL_RE = re.compile(r"(?:final answer|the answer)\s*(?:is|:)?\s*[:\s]*(.+)", re.IGNORECASE)
_ANSWER_LINE_RE = re.compile(r"^\s*\**answer\**\s*:\s*(.+)$", re.IGNORECASE | re.MULTILINE)


def _clean_sentence(ans: str) -> str:
    ans = ans.strip()
    ans = re.sub(r"\s*I hope it is correct\.?\s*$", "", ans, flags=re.IGNORECASE)
    ans = ans.strip().rstrip(".").strip()
    if ans.startswith("$") and ans.count("$") >= 2:
        inner = ans.strip("$")
        if "$" not in inner:
            return inner.strip()
    maths = re.findall(r"\$([^$]+)\$", ans)
    if maths:
        return maths[-1].strip()
    return ans.strip("$ ").strip()


def extract_answer(response: str) -> str | None:
    """The final answer of a response: last boxed, "final answer is", "Answer:", last line."""
    boxed = boxed_contents(response)
    if boxed:
        return boxed[-1].strip()
    finals = _FINAL_RE.findall(response)
    if finals:
        return _clean_sentence(finals[-1].split("\n")[0])
    lines = _ANSWER_LINE_RE.findall(response)
    if lines:
        return _clean_sentence(lines[-1])
    for line in reversed(response.strip().splitlines()):
        if line.strip():
            return _clean_sentence(line)
    return None


def gold_answer(target: str) -> str:
    """A gold answer, or the last boxed answer of a full reference solution."""
    boxed = boxed_contents(target)
    return boxed[-1] if boxed else target


# --- normalisation ---------------------------------------------------------------------

_TEXT_CMDS = (
    r"(?:text|textbf|textit|textrm|mbox|mathrm|mathbf|mathit|operatorname|boldsymbol|mathsf)"
)
_UNIT_TAIL_RE = re.compile(
    r"\\" + _TEXT_CMDS + r"\{\s*(?:[a-zA-Z]+\.?\s*)+\}\s*(?:\^\{?\d\}?)?\s*$"
)
_UNIT_WORDS = (
    "degrees|degree|cents|cent|dollars|dollar|units|unit|square|sq|cubic|inches|inch|feet|foot|"
    "ft|meters|meter|m|cm|mm|km|miles|mile|mph|hours|hour|minutes|minute|seconds|second|days|day|"
    "years|year|pounds|lbs|ounces|oz|grams|g|kg|liters|l|ml|gallons|percent|points|ways|people|"
    "students|marbles|cubes"
)
_UNIT_WORD_TAIL_RE = re.compile(
    r"(?<=[\d}).])\s+(?:(?:" + _UNIT_WORDS + r")\b\.?\s*)+(?:\^\{?\d\}?)?\s*$", re.IGNORECASE
)


def _unwrap_command(s: str, names: str) -> str:
    """Replace ``\\name{X}`` by ``X`` (nested braces respected) for the given names."""
    pat = re.compile(r"\\" + names + r"\s*\{")
    for _ in range(50):
        m = pat.search(s)
        if not m:
            break
        got = _braced(s, m.end() - 1)
        if got is None:
            break
        s = s[: m.start()] + got[0] + s[got[1] :]
    return s


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac9{19}``, ``\\frac{270}7``, ``\\frac ab``."""
    s = re.sub(r"\\frac\s*([0-9a-zA-Z])\s*([0-9a-zA-Z])", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\s*([0-9a-zA-Z])\s*\{", r"\\frac{\1}{", s)
    out = []
    i = 0
    while True:
        j = s.find("\\frac{", i)
        if j < 0:
            out.append(s[i:])
            break
        got = _braced(s, j + 5)
        if got is None:
            out.append(s[i:])
            break
        num, end = got
        rest = s[end:].lstrip()
        skipped = len(s[end:]) - len(rest)
        if rest and rest[0] != "{":
            m = re.match(r"[0-9a-zA-Z]", rest)
            if m:
                out.append(s[i:j] + "\\frac{" + num + "}{" + m.group(0) + "}")
                i = end + skipped + 1
                continue
        out.append(s[i:end])
        i = end
    return "".join(out)


def _fix_sqrt(s: str) -> str:
    return re.sub(r"\\sqrt\s*([0-9a-zA-Z])", r"\\sqrt{\1}", s)


def normalize(answer: str) -> str:
    """Canonical spelling of a LaTeX answer (same value -> same string where cheap)."""
    s = answer.strip()
    s = s.replace("\n", " ").replace("\\\\", "\x01")  # protect matrix row breaks
    s = s.replace("\\$", "").replace("$", "")
    s = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])", "", s)
    s = re.sub(r"\\[!,;:>]", "", s)
    s = re.sub(r"\\q?quad", " ", s)
    s = s.replace("\\ ", " ").replace("~", " ")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\cfrac", "\\frac")
    s = s.replace("\\displaystyle", "")
    s = re.sub(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree|°", "", s)
    s = s.replace("\\%", "").replace("%", "")
    # units: a trailing \text{ unit} after a value, and bare unit words after a number
    for _ in range(3):
        t = _UNIT_TAIL_RE.sub("", s).strip()
        if t and t != s:
            s = t
        t = _UNIT_WORD_TAIL_RE.sub("", s).strip()
        if t and t != s:
            s = t
    s = _unwrap_command(s, _TEXT_CMDS)
    s = s.strip()
    # an "x =" / "x \in" prefix with a one-letter left side
    m = re.match(r"^([a-zA-Z]|\\[a-zA-Z]+)\s*(?:=|\\in(?![a-zA-Z]))\s*(.+)$", s)
    if m and "=" not in m.group(2):
        s = m.group(2)
    s = _fix_fracs(s)
    s = _fix_sqrt(s)
    s = re.sub(r"_\{\s*(\w+)\s*\}", r"_\1", s)
    # spaces: keep one after a command that is followed by a letter, drop the rest
    s = re.sub(r"(\\[a-zA-Z]+)\s+(?=[a-zA-Z])", "\\1\x00", s)
    s = re.sub(r"\s+", "", s).replace("\x00", " ")
    s = s.rstrip(".")
    s = re.sub(r"(?<![\d.])\.(\d)", r"0.\1", s)
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", s):
        s = s.replace(",", "")
    # plain decimals: drop trailing zeros (2.50 -> 2.5, 3.0 -> 3)
    if re.fullmatch(r"-?\d+\.\d+", s):
        s = s.rstrip("0").rstrip(".")
    if s.startswith("+"):
        s = s[1:]
    return s.replace("\x01", "\\\\")


# --- exact numbers ---------------------------------------------------------------------

_INT_OR_DEC = r"-?(?:\d+(?:\.\d*)?|\.\d+)"


def exact_number(s: str) -> Fraction | None:
    """Value of a normalised plain number: int, decimal, ``\\frac{a}{b}``, mixed ``1\\frac{4}{5}``."""
    if re.fullmatch(_INT_OR_DEC, s):
        return Fraction(s)
    m = re.fullmatch(r"(-?)\\frac\{(-?\d+)\}\{(-?\d+)\}", s)
    if m and int(m.group(3)) != 0:
        v = Fraction(int(m.group(2)), int(m.group(3)))
        return -v if m.group(1) else v
    m = re.fullmatch(r"(-?)(\d+)\\frac\{(\d+)\}\{(\d+)\}", s)
    if m and int(m.group(4)) != 0:
        v = int(m.group(2)) + Fraction(int(m.group(3)), int(m.group(4)))
        return -v if m.group(1) else v
    m = re.fullmatch(r"(-?\d+)/(\d+)", s)
    if m and int(m.group(2)) != 0:
        return Fraction(int(m.group(1)), int(m.group(2)))
    return None


def mixed_to_sum(s: str) -> str:
    """``137\\frac{1}{2}`` (a mixed number) -> ``(137+\\frac{1}{2})`` for symbolic use."""
    return re.sub(r"^(-?)(\d+)(\\frac\{\d+\}\{\d+\})$", r"\1(\2+\3)", s)


# --- structure -------------------------------------------------------------------------


@dataclass(frozen=True)
class Structure:
    """A compound answer: ``kind`` is atom, seq (ordered, with brackets), bag (unordered
    list/set/union/``\\pm`` expansion) or matrix (rows of atoms)."""

    kind: str
    items: tuple[Structure, ...] = ()
    text: str = ""
    brackets: str = ""


def _split_top(s: str, sep: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth, i = 0, 0
    while i < len(s):
        if s.startswith(sep, i) and depth == 0:
            parts.append("".join(cur))
            cur = []
            i += len(sep)
            continue
        c = s[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _outer_group(s: str) -> bool:
    """True when the first bracket of ``s`` closes at its last character."""
    depth = 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0 and i != len(s) - 1:
                return False
    return depth == 0


def _flat(items: Iterable[Structure]) -> tuple[Structure, ...]:
    """Members of a list or set; a ``\\pm`` inside one contributes both of its values."""
    out: list[Structure] = []
    for it in items:
        if it.kind == "bag" and it.brackets == "pm":
            out.extend(it.items)
        else:
            out.append(it)
    return tuple(out)


def parse_structure(s: str, _depth: int = 0) -> Structure:
    """Split a normalised answer into its parts (see `Structure`)."""
    if _depth > 6:
        return Structure("atom", text=s)
    m = re.fullmatch(r"\\begin\{[pbvBV]?matrix\}(.*)\\end\{[pbvBV]?matrix\}", s)
    if m:
        rows = [r for r in m.group(1).split("\\\\") if r.strip()]
        return Structure(
            "matrix",
            tuple(
                Structure(
                    "seq", tuple(Structure("atom", text=c) for c in r.split("&")), brackets="row"
                )
                for r in rows
            ),
        )
    if "\\cup" in s:
        parts = _split_top(s, "\\cup")
        if len(parts) > 1:
            return Structure(
                "bag", tuple(parse_structure(p, _depth + 1) for p in parts), brackets="cup"
            )
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2]
        return Structure(
            "bag", _flat(parse_structure(p, _depth + 1) for p in _split_top(inner, ","))
        )
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _outer_group(s):
        inner = s[1:-1]
        parts = _split_top(inner, ",")
        if len(parts) > 1:
            return Structure(
                "seq", tuple(parse_structure(p, _depth + 1) for p in parts), brackets=s[0] + s[-1]
            )
    parts = _split_top(s, ",")
    if len(parts) > 1 and all(p for p in parts):
        return Structure("bag", _flat(parse_structure(p, _depth + 1) for p in parts))
    pm = _split_top(s, "\\pm")
    if len(pm) == 2 and pm[1]:
        a, b = pm
        if a:
            pair = (Structure("atom", text=f"{a}+{b}"), Structure("atom", text=f"{a}-{b}"))
        else:
            pair = (Structure("atom", text=b), Structure("atom", text=f"-{b}"))
        return Structure("bag", pair, brackets="pm")
    return Structure("atom", text=s)
