"""Number extraction shared by the GSM8K and arithmetic verifiers.

Model answers write numbers as ``1,234``, ``-5``, ``3.50``, ``$12`` or ``7.``; comparing
them as exact rationals (not floats) keeps ``0.1 + 0.2``-style noise out of rewards.
"""

from __future__ import annotations

import re
from fractions import Fraction

# A number: optional sign, digits with optional thousands commas, optional decimals; or a
# bare decimal like ``.5``. Commas only count as separators when followed by 3 digits.
NUMBER_RE = re.compile(
    r"(?<![\w.])[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\d])|(?<![\w.])[-−]?\.\d+"
)


def parse_number(text: str) -> Fraction | None:
    """Parse one number string (commas, unicode minus, ``$``, trailing ``.``) exactly."""
    s = text.strip().replace("−", "-").replace(",", "").replace("$", "").strip()
    s = s.rstrip(".")
    if s.endswith("%"):
        s = s[:-1]
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def numbers_in(text: str) -> list[str]:
    """All number literals in ``text``, in order."""
    return [m.group(0) for m in NUMBER_RE.finditer(text)]


def first_number(text: str) -> Fraction | None:
    found = numbers_in(text)
    return parse_number(found[0]) if found else None


def last_number(text: str) -> Fraction | None:
    found = numbers_in(text)
    return parse_number(found[-1]) if found else None


def format_number(value: Fraction) -> str:
    """Render an exact value the way GSM8K golds are written (integers without ``.0``)."""
    if value.denominator == 1:
        return str(value.numerator)
    return str(float(value))
