"""Credential-looking values anywhere a spec writes a string.

Every config value reaches the manifest, the Beaker YAML or an engine's argv, all stored in
plain text; a credential there is leaked. Names are not enough (a token can sit under any
key), so values are judged: known token prefixes, credentials in URLs (``user:pass@``,
``?api_key=``), private keys, JWTs and long high-entropy strings. Credential-named native
options (``native.sglang.api_key``) are refused whatever their value. Diagnostics never
repeat the value, and the compiler masks it in the source it shows (`mask_sources`).

Not detected: a 40-hex W&B key looks like a git revision and is not flagged by value
(``WANDB_API_KEY`` is flagged by name in ``launch.env``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

from compiler.diagnostics import Diagnostic, SourceMap, Span

_PREFIXES = re.compile(
    r"(?<![A-Za-z0-9])("
    r"gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}"
    r"|sk-[A-Za-z0-9_-]{20,}|sk_(live|test)_[A-Za-z0-9]{16,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|(AKIA|ASIA)[A-Z0-9]{16}|AIza[0-9A-Za-z_-]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{40,}"
    r")"
)
# Userinfo is looked for from each ``://`` (one pass; a scheme-first pattern retried the
# scheme characters from every start and took quadratic time on long words).
_SCHEME_SEP = re.compile(r"://")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_USERINFO = re.compile(r"[^/\s?#@]+@")
_URL_QUERY_KEY = re.compile(
    r"[?&;](api[_-]?key|apikey|access[_-]?token|auth[_-]?token|auth|token|key|secret"
    r"|client[_-]?secret|password|passwd|pwd|sig|signature|x-amz-signature"
    r"|x-amz-credential|x-goog-signature|sv|se)=[^&#\s]+",
    re.IGNORECASE,
)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----")
# A token starts where a run of base64url characters starts: without the look-behind the
# search restarted inside every ``eyJ`` of a long run (quadratic).
_JWT = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}")
_SEGMENT = re.compile(r"[A-Za-z0-9+/=]{20,}")
# option names that end in a credential word: `api_key`, `ssl_keyfile_password` (not
# `bucket_time_to_first_token`, a list of latency buckets)
_CREDENTIAL_OPTION = re.compile(
    r"(?:^|[_-])(?:key|password|passwd|secret|credentials?|auth_token|access_token|api_token)$",
    re.IGNORECASE,
)


def _entropy(s: str) -> float:
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def _high_entropy(value: str) -> bool:
    """A long run of base64 characters mixing cases and digits with ~random spread.

    Paths split it at ``/``-free segments only when the segment itself is random-looking;
    hex-only strings (revisions, digests) are exempt.
    """
    for m in _SEGMENT.finditer(value):
        seg = m.group(0)
        if "/" in seg and any(len(p) < 20 for p in seg.split("/")):
            continue
        if re.fullmatch(r"[0-9a-fA-F]+", seg):
            continue
        kinds = sum(
            (
                any(c.islower() for c in seg),
                any(c.isupper() for c in seg),
                any(c.isdigit() for c in seg),
            )
        )
        if kinds == 3 and _entropy(seg) >= 3.8:
            return True
    return False


def _url_with_userinfo(value: str) -> bool:
    """``scheme://user:pass@host`` anywhere in ``value``, in time linear in its length."""
    for sep in _SCHEME_SEP.finditer(value):
        i = sep.start()
        has_letter = False
        while i > 0 and value[i - 1] in _SCHEME_CHARS:
            i -= 1
            has_letter = has_letter or value[i].isalpha()
        if has_letter and _USERINFO.match(value, sep.end()):
            return True
    return False


def credential_reason(value: str) -> str | None:
    """Why ``value`` looks like a credential, or None."""
    if _PREFIXES.search(value):
        return "it has the prefix of a known access token"
    if _PRIVATE_KEY.search(value):
        return "it holds a private key"
    if _url_with_userinfo(value):
        return "the URL carries credentials (user:password@)"
    m = _URL_QUERY_KEY.search(value)
    if m:
        return f"the URL carries a credential in its query (`{m.group(1)}=`)"
    if _JWT.search(value):
        return "it is a JSON Web Token"
    if _high_entropy(value):
        return "it is a long high-entropy string, like a key or token"
    return None


def _strings(node: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, (*path, i))


def _dotted(path: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in path)


def scan(data: dict[str, Any], span_of: Any) -> tuple[list[Diagnostic], list[str]]:
    """(diagnostics, the offending values) for a merged spec. ``span_of(path)`` -> Span."""
    out: list[Diagnostic] = []
    values: list[str] = []
    native = data.get("native")
    if isinstance(native, dict):
        for tool, options in native.items():
            if not isinstance(options, dict):
                continue
            for key, value in options.items():
                if _CREDENTIAL_OPTION.search(str(key)):
                    if isinstance(value, str):
                        values.append(value)
                    out.append(
                        Diagnostic(
                            "error",
                            "secret-in-spec",
                            f"`native.{tool}.{key}` is a credential; native options are written "
                            "to the manifest and the engine's command line in plain text",
                            span_of(("native", tool, key)),
                            help=(
                                "leave it unset; put credentials in Beaker secrets "
                                '(`[launch.secrets] NAME = "<secret name>"`)',
                            ),
                        )
                    )
    for path, value in _strings(data, ()):
        if path[:1] == ("native",) and len(path) >= 3 and _CREDENTIAL_OPTION.search(str(path[2])):
            continue
        reason = credential_reason(value)
        if reason is None:
            continue
        values.append(value)
        where = _dotted(path)
        if path[:2] == ("launch", "secrets"):
            message = (
                f"`{where}` must be the NAME of a Beaker secret, but its value looks like the "
                f"secret itself ({reason})"
            )
            help_ = (
                'write `NAME = "<beaker secret name>"`; store the value with `beaker secret write`'
            )
        else:
            message = (
                f"`{where}` looks like a credential ({reason}); spec values are stored in plain "
                "text in the manifest, the Beaker spec and command lines"
            )
            help_ = (
                "store it as a Beaker secret and name it in `[launch.secrets]`; the value is "
                "masked here"
            )
        out.append(Diagnostic("error", "secret-in-spec", message, span_of(path), help=(help_,)))
    return out, values


def mask_sources(sources: SourceMap, values: list[str]) -> None:
    """Replace each offending value in the shown sources with asterisks (same width)."""
    for value in sorted(set(values), key=len, reverse=True):
        if len(value) < 4:
            continue
        for name, text in sources.texts.items():
            if value in text:
                sources.texts[name] = text.replace(value, "*" * len(value))


def mask_message(diagnostics: list[Diagnostic], values: list[str]) -> list[Diagnostic]:
    """The diagnostics with each offending value masked in their messages (``got "..."``)."""
    from dataclasses import replace

    out = []
    for d in diagnostics:
        message = d.message
        for value in values:
            if len(value) >= 4 and value in message:
                message = message.replace(value, "*" * len(value))
        out.append(d if message == d.message else replace(d, message=message))
    return out


def bound_span(bound: Any) -> Any:
    """``span_of`` for a `compiler.spec.bind.Bound`: the value span of the layer that wrote it."""

    def span_of(path: tuple[str | int, ...]) -> Span | None:
        found = bound.writer(path) or bound.locate(path)
        return found[1].value.span if found else None

    return span_of
