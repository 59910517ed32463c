"""Decoding of TOML scalars: strings with escapes, and bare values (ATOM tokens).

The lexer hands every bare value over as one ATOM token; here strict regexes taken from
the TOML 1.0 ABNF decide what it is. Problems raise `ScalarIssue` with an offset into the
token so the builder can point at the exact character.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta, timezone
from typing import Any

from compiler.parse.document import ScalarKind

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class ScalarIssue(Exception):
    """A problem in a scalar; ``offset`` and ``length`` are relative to the token text."""

    def __init__(
        self, message: str, offset: int = 0, length: int = 0, help: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.length = length
        self.help = help


_DEC_INT = re.compile(r"[+-]?(?:0|[1-9](?:_?[0-9])*)")
_PREFIXED_INT = re.compile(r"0x[0-9A-Fa-f](?:_?[0-9A-Fa-f])*|0o[0-7](?:_?[0-7])*|0b[01](?:_?[01])*")
_FLOAT = re.compile(
    r"[+-]?(?:0|[1-9](?:_?[0-9])*)"
    r"(?:\.[0-9](?:_?[0-9])*(?:[eE][+-]?[0-9](?:_?[0-9])*)?|[eE][+-]?[0-9](?:_?[0-9])*)"
)
_SPECIAL_FLOAT = re.compile(r"[+-]?(?:inf|nan)")
_DATE_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))?)?"
)
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?")
_LOOKS_NUMERIC = re.compile(r"[+-]?[0-9.]")
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_HEX8 = re.compile(r"[0-9A-Fa-f]{8}")

_SIMPLE_ESCAPES = {
    "b": "\b",
    "t": "\t",
    "n": "\n",
    "f": "\f",
    "r": "\r",
    '"': '"',
    "\\": "\\",
}


def _micros(fraction: str | None) -> int:
    # tomllib keeps microseconds and truncates further digits; so do we.
    return int(fraction[:6].ljust(6, "0")) if fraction else 0


def _offset(sign: str, hours: str, minutes: str, text: str) -> timezone:
    if int(hours) > 23 or int(minutes) > 59:
        raise ScalarIssue(f"invalid UTC offset in {text!r}", 0, len(text))
    delta = timedelta(hours=int(hours), minutes=int(minutes))
    return timezone(-delta if sign == "-" else delta)


def _date_time(text: str) -> tuple[Any, ScalarKind] | None:
    m = _DATE_TIME.fullmatch(text)
    if m is not None:
        year, month, day, hour, minute, second, frac, zulu, sign, oh, om = m.groups()
        try:
            if hour is None:
                return date(int(year), int(month), int(day)), "date"
            tz: timezone | None = None
            if zulu:
                tz = UTC
            elif sign:
                tz = _offset(sign, oh, om, text)
            value = datetime(
                int(year),
                int(month),
                int(day),
                int(hour),
                int(minute),
                int(second),
                _micros(frac),
                tzinfo=tz,
            )
        except ValueError as exc:
            raise ScalarIssue(f"invalid date-time {text!r}: {exc}", 0, len(text)) from None
        return value, ("datetime" if tz is not None else "datetime-local")
    m = _TIME.fullmatch(text)
    if m is not None:
        hour, minute, second, frac = m.groups()
        try:
            return time(int(hour), int(minute), int(second), _micros(frac)), "time"
        except ValueError as exc:
            raise ScalarIssue(f"invalid time {text!r}: {exc}", 0, len(text)) from None
    return None


def atom_value(text: str) -> tuple[Any, ScalarKind]:
    """The value and kind of a bare TOML value (number, boolean, date/time)."""
    if text == "true":
        return True, "bool"
    if text == "false":
        return False, "bool"
    if _DEC_INT.fullmatch(text) or _PREFIXED_INT.fullmatch(text):
        clean = text.replace("_", "")
        prefixed = clean[:2] in ("0x", "0o", "0b")
        # never convert thousands of digits (slow, and refused by int() past 4300 digits):
        # 64 binary digits, or 20 decimal ones, already exceed 64 bits
        digits = clean[2:].lstrip("0") if prefixed else clean.lstrip("+-")
        too_long = len(digits) > (64 if prefixed else 20)
        value = 0 if too_long else int(clean, 0) if prefixed else int(clean)
        if too_long or not INT64_MIN <= value <= INT64_MAX:
            raise ScalarIssue(
                f"integer {text if len(text) <= 40 else text[:20] + '...'} does not fit in 64 bits",
                0,
                len(text),
                ("TOML integers range from -2^63 to 2^63-1; use a float or a string",),
            )
        return value, "integer"
    if _FLOAT.fullmatch(text) or _SPECIAL_FLOAT.fullmatch(text):
        return float(text.replace("_", "")), "float"
    if ":" in text or (len(text) >= 10 and text[4:5] == "-"):
        found = _date_time(text)
        if found is not None:
            return found
    raise _describe_bad_atom(text)


def _describe_bad_atom(text: str) -> ScalarIssue:
    low = text.lower()
    if low in ("true", "false"):
        return ScalarIssue(
            f"invalid boolean {text!r}", 0, len(text), ("booleans are lower case: true, false",)
        )
    if _LOOKS_NUMERIC.match(text) or low.lstrip("+-") in ("inf", "nan"):
        help_: tuple[str, ...] = ()
        digits = text.lstrip("+-")
        if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
            help_ = ("leading zeros are not allowed in decimal numbers",)
        elif "_" in text:
            help_ = ("an underscore must sit between two digits",)
        elif text.startswith(("+0x", "-0x", "+0o", "-0o", "+0b", "-0b")):
            help_ = ("hexadecimal, octal and binary integers take no sign",)
        elif low.lstrip("+-") in ("inf", "nan"):
            help_ = ("inf and nan are lower case",)
        return ScalarIssue(f"invalid number or date {text!r}", 0, len(text), help_)
    return ScalarIssue(
        f"invalid value {text!r}",
        0,
        len(text),
        (f'strings need quotes: "{text}"',),
    )


def decode_basic(body: str, multiline: bool) -> str:
    """Resolve escapes in the body of a basic string (offsets in errors are into ``body``)."""
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    n = len(body)
    while True:
        j = body.find("\\", i)
        if j < 0:
            out.append(body[i:])
            return "".join(out)
        out.append(body[i:j])
        c = body[j + 1 : j + 2]
        simple = _SIMPLE_ESCAPES.get(c)
        if simple is not None:
            out.append(simple)
            i = j + 2
        elif c in ("u", "U"):
            width = 4 if c == "u" else 8
            digits = body[j + 2 : j + 2 + width]
            if not (_HEX4 if width == 4 else _HEX8).fullmatch(digits):
                raise ScalarIssue(
                    f"\\{c} must be followed by {width} hexadecimal digits",
                    j,
                    2 + len(digits.split('"')[0]),
                )
            code = int(digits, 16)
            if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
                raise ScalarIssue(f"\\{c}{digits} is not a Unicode scalar value", j, 2 + width)
            out.append(chr(code))
            i = j + 2 + width
        elif multiline and c in (" ", "\t", "\n"):
            k = j + 1
            while k < n and body[k] in " \t":
                k += 1
            if k >= n or body[k] != "\n":
                raise ScalarIssue(
                    "a line-ending backslash may only be followed by whitespace and a newline",
                    j,
                    1,
                )
            while k < n and body[k] in " \t\n":
                k += 1
            i = k
        else:
            shown = c if c.isprintable() and c else repr(c)
            raise ScalarIssue(
                f"invalid escape sequence \\{shown}",
                j,
                2,
                ('valid escapes: \\b \\t \\n \\f \\r \\" \\\\ \\uXXXX \\UXXXXXXXX',),
            )
