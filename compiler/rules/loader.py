"""Parse `*.rules` files into `Rule`s, with positioned diagnostics for every mistake.

Parse trees come from lark's LALR parser for `grammar.lark` (`compiler.derive.lalr`); this module
turns them into expression nodes (`compiler.rules.expr`), checks clauses, function names
and arities, rule-id uniqueness and (when given) field paths against the known fields.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path
from typing import Any, Literal

from compiler.diagnostics import Diagnostic, DiagnosticError, SourceMap, Span, did_you_mean
from compiler.rules import expr as ex
from compiler.rules import records
from compiler.rules.functions import FUNCTIONS

RuleSeverity = Literal["error", "warning"]

CLAUSES = ("area", "when", "error", "warning", "at", "help", "why", "doc")
_CLAUSE_TERMINALS = {c.upper() for c in CLAUSES} | {"RULE"}

_TERMINAL_TEXT = {
    "$END": "end of file",
    "RULE": "`rule`",
    "RULE_ID": "a rule id (lower-case words joined by '-')",
    "NAME": "a field name",
    "STRING": 'a string ("...")',
    "INT": "a number",
    "FLOAT": "a number",
    "COMP_OP": "a comparison",
    "ADD_OP": "`+` or `-`",
    "MUL_OP": "`*`, `/`, `//` or `%`",
    "NEG_OP": "`-`",
    "LPAR": "`(`",
    "RPAR": "`)`",
    "LSQB": "`[`",
    "RSQB": "`]`",
    "COMMA": "`,`",
    "DOT": "`.`",
}


@dataclass(frozen=True, eq=False)
class Rule:
    """One rule. `message` is the template as written; `condition` the canonical `when`."""

    id: str
    area: str
    severity: RuleSeverity
    message: str
    condition: str
    at: tuple[str, ...]
    help: str | None
    why: str | None
    doc: str | None
    fields_mentioned: tuple[str, ...]
    span: Span
    when: ex.Node = field(repr=False)
    template: tuple[str | ex.Node, ...] = field(repr=False)
    path_refs: tuple[ex.PathRef, ...] = field(repr=False)
    # `help` with its {expr} parts parsed like the message's (empty: no help)
    help_template: tuple[str | ex.Node, ...] = field(default=(), repr=False)

    @property
    def source(self) -> str:
        return self.span.source

    @cached_property
    def check(self) -> Callable[[Any], bool]:
        """`when` compiled to closures (built on first use): true when the rule fires."""
        from compiler.rules.compile import compile_condition

        return compile_condition(self.when)


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    digest: str
    files: tuple[str, ...]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def get(self, rule_id: str) -> Rule | None:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        return None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.rules)


GRAMMAR = Path(__file__).resolve().parent / "grammar.lark"
START = ["start", "expr"]


@cache
def _parser() -> Any:
    from compiler.derive.lalr import parser

    return parser(GRAMMAR, START)


def _sa() -> Any:
    """lark's parser runtime (`compiler.derive.lalr`), loaded on first parse (a cached rule file
    never needs it)."""
    from compiler.derive.lalr import runtime

    return runtime()


def _span(source: str, tok: Any) -> Span:
    return Span(source, tok.line, tok.column, tok.end_line, tok.end_column)


def _join(a: Span, b: Span) -> Span:
    return Span(a.source, a.line, a.col, b.end_line, b.end_col)


def _decode_string(tok: Any) -> str:
    return str(json.loads(str(tok)))


class _Errors:
    def __init__(self) -> None:
        self.items: list[Diagnostic] = []

    def add(
        self,
        code: str,
        message: str,
        span: Span | None,
        help: Iterable[str] = (),
        secondary: tuple[tuple[Span, str], ...] = (),
    ) -> None:
        self.items.append(Diagnostic("error", code, message, span, secondary, tuple(help)))


def _syntax_diagnostic(source: str, err: Exception) -> Diagnostic:
    sa = _sa()
    if isinstance(err, sa.UnexpectedToken):
        tok = err.token
        expected = set(err.accepts or err.expected)
        if tok.type == "$END":
            line, col = getattr(err, "line", 1), getattr(err, "column", 1)
            span = Span(source, max(line, 1), max(col, 1), max(line, 1), max(col, 1) + 1)
            return Diagnostic(
                "error",
                "rules-syntax",
                "unexpected end of file; expected " + _expected_text(expected),
                span,
            )
        span = _span(source, tok)
        word = str(tok)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", word) and expected & _CLAUSE_TERMINALS:
            if "RULE" in expected and not (expected & {c.upper() for c in CLAUSES}):
                msg = f"expected `rule`, found {word!r}"
            else:
                msg = f"unknown keyword {word!r}; a rule's clauses are " + ", ".join(CLAUSES)
            return Diagnostic(
                "error",
                "rules-unknown-keyword",
                msg,
                span,
                help=did_you_mean(word, [*CLAUSES, "rule"]),
            )
        return Diagnostic(
            "error",
            "rules-syntax",
            f"unexpected {word!r}; expected " + _expected_text(expected),
            span,
        )
    if isinstance(err, sa.UnexpectedCharacters):
        line, col = err.line, err.column
        char = err.char if hasattr(err, "char") else "?"
        return Diagnostic(
            "error",
            "rules-syntax",
            f"unexpected character {char!r}",
            Span(source, line, col, line, col + 1),
            help=('strings use double quotes: "..."',) if char == "'" else (),
        )
    if isinstance(err, sa.UnexpectedEOF):
        return Diagnostic("error", "rules-syntax", "unexpected end of file", None)
    return Diagnostic("error", "rules-syntax", str(err), None)


def _expected_text(expected: set[str]) -> str:
    words = sorted({_TERMINAL_TEXT.get(t, f"`{t.lower()}`") for t in expected})
    if len(words) > 8:
        words = words[:8] + ["..."]
    return ", ".join(words) if words else "something else"


class _Builder:
    """Turns one file's parse tree into `Rule`s, collecting errors instead of stopping."""

    def __init__(self, source: str, errors: _Errors):
        self.source = source
        self.errors = errors

    # -- expressions -------------------------------------------------------------------
    def expr(self, t: Any) -> ex.Node:
        kind = t.data
        c = [x for x in t.children if x is not None]
        if kind == "path":
            names = [str(tok) for tok in c]
            return ex.PathRef(
                ".".join(names), _join(_span(self.source, c[0]), _span(self.source, c[-1]))
            )
        if kind == "int_lit":
            return ex.Literal(int(str(c[0])))
        if kind == "float_lit":
            return ex.Literal(float(str(c[0])))
        if kind == "str_lit":
            return ex.Literal(_decode_string(c[0]))
        if kind == "true_lit":
            return ex.Literal(True)
        if kind == "false_lit":
            return ex.Literal(False)
        if kind == "null_lit":
            return ex.Literal(None)
        if kind == "list":
            return ex.ListExpr([self.expr(x) for x in c])
        if kind == "group":
            return ex.Group(self.expr(c[1]))
        if kind == "neg":
            return ex.Neg(self.expr(c[1]))
        if kind == "not_op":
            return ex.Not(self.expr(c[0]))
        if kind in ("and_op", "or_op"):
            return ex.BoolOp("and" if kind == "and_op" else "or", self.expr(c[0]), self.expr(c[1]))
        if kind == "compare":
            return ex.Compare(str(c[1]), self.expr(c[0]), self.expr(c[2]))
        if kind == "arith":
            return ex.Arith(str(c[1]), self.expr(c[0]), self.expr(c[2]))
        if kind in ("in_op", "not_in_op"):
            return ex.In(self.expr(c[0]), self.expr(c[1]), negate=kind == "not_in_op")
        if kind in ("is_set", "is_not_set"):
            target = self.expr(c[0])
            assert isinstance(target, ex.PathRef)
            return ex.IsSet(target, negate=kind == "is_not_set")
        if kind == "call":
            return self.call(c)
        raise TypeError(f"unknown expression node {kind}")  # pragma: no cover

    def call(self, c: list[Any]) -> ex.Node:
        name_tok, args = c[0], [self.expr(x) for x in c[1:]]
        name = str(name_tok)
        span = _span(self.source, name_tok)
        fn = FUNCTIONS.get(name)
        if fn is None:
            self.errors.add(
                "rules-unknown-function",
                f"unknown function {name!r}; functions are " + ", ".join(sorted(FUNCTIONS)),
                span,
                did_you_mean(name, FUNCTIONS),
            )
            return ex.Literal(None)
        if len(args) < fn.min_args or (fn.max_args is not None and len(args) > fn.max_args):
            self.errors.add(
                "rules-arity",
                f"{name}() takes {fn.arity_text()} argument(s), got {len(args)}",
                span,
                (fn.doc,) if fn.doc else (),
            )
        return ex.Call(fn, args, span)

    # -- messages ----------------------------------------------------------------------
    def template(self, text: str, span: Span) -> tuple[str | ex.Node, ...]:
        parts: list[str | ex.Node] = []
        buf: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            if ch in "{}" and text[i : i + 2] in ("{{", "}}"):
                buf.append(ch)
                i += 2
                continue
            if ch == "}":
                self.errors.add("rules-bad-message", "unmatched '}' in message (write '}}')", span)
                i += 1
                continue
            if ch == "{":
                end = text.find("}", i + 1)
                if end < 0:
                    self.errors.add(
                        "rules-bad-message", "unmatched '{' in message (write '{{')", span
                    )
                    break
                inner = text[i + 1 : end].strip()
                if buf:
                    parts.append("".join(buf))
                    buf = []
                parts.append(self.interpolation(inner, span))
                i = end + 1
                continue
            buf.append(ch)
            i += 1
        if buf:
            parts.append("".join(buf))
        return tuple(parts)

    def interpolation(self, inner: str, span: Span) -> ex.Node:
        try:
            tree = _parser().parse(inner, start="expr")
        except _sa().LarkError as err:
            self.errors.add(
                "rules-bad-message",
                f"cannot read the interpolation {{{inner}}} in the message: "
                + _syntax_diagnostic("<message>", err).message,
                span,
            )
            return ex.Literal(None)
        node = self.expr(tree)
        # The paths sit inside the string; point at the string.
        for ref in ex.paths_in(node):
            ref.span = span
        return node

    # -- rules -------------------------------------------------------------------------
    def rule(self, t: Any) -> Rule | None:
        id_tok, clauses = t.children[0], t.children[1:]
        rule_id = str(id_tok)
        id_span = _span(self.source, id_tok)
        seen: dict[str, Span] = {}
        values: dict[str, Any] = {}
        severity: RuleSeverity | None = None
        message = ""
        message_span = id_span
        for clause in clauses:
            kw = clause.children[0]
            word = str(kw)
            kw_span = _span(self.source, kw)
            key = "severity" if word in ("error", "warning") else word
            if key in seen:
                self.errors.add(
                    "rules-duplicate-clause",
                    f"rule {rule_id!r} has more than one "
                    + ("severity (`error`/`warning`)" if key == "severity" else f"`{word}`"),
                    kw_span,
                    secondary=((seen[key], "first given here"),),
                )
                continue
            seen[key] = kw_span
            rest = clause.children[1:]
            if key == "when":
                values["when"] = self.expr(rest[0])
            elif key == "at":
                values["at"] = [self.expr(p) for p in rest]
            elif key == "severity":
                severity = "error" if word == "error" else "warning"
                message = _decode_string(rest[0])
                message_span = _span(self.source, rest[0])
            else:
                values[key] = _decode_string(rest[0])
        missing = [
            name
            for name, present in (("when", "when" in values), ("error", severity is not None))
            if not present
        ]
        for name in missing:
            what = (
                "a `when` condition"
                if name == "when"
                else "a severity (`error` or `warning` + message)"
            )
            self.errors.add("rules-missing-clause", f"rule {rule_id!r} lacks {what}", id_span)
        if missing or severity is None:
            return None
        if not message.strip():
            self.errors.add(
                "rules-bad-message", f"rule {rule_id!r} has an empty message", message_span
            )
        template = self.template(message, message_span)
        help_template = self.template(values["help"], id_span) if values.get("help") else ()
        when: ex.Node = values["when"]
        at_refs: list[ex.PathRef] = values.get("at", [])
        refs = ex.paths_in(when) + list(at_refs)
        for part in (*template, *help_template):
            if isinstance(part, ex.Node):
                refs.extend(ex.paths_in(part))
        mentioned = tuple(dict.fromkeys(r.path for r in refs))
        return Rule(
            id=rule_id,
            area=values.get("area", "general"),
            severity=severity,
            message=message,
            condition=when.render(),
            at=tuple(r.path for r in at_refs),
            help=values.get("help"),
            why=values.get("why"),
            doc=values.get("doc"),
            fields_mentioned=mentioned,
            span=id_span,
            when=when,
            template=template,
            path_refs=tuple(refs),
            help_template=help_template,
        )


def parse_rules_text(text: str, source: str) -> tuple[list[Rule], list[Diagnostic]]:
    """Parse one file's text; return its rules and any diagnostics (no cross-file checks)."""
    errors = _Errors()
    try:
        tree = _parser().parse(text, start="start")
    except _sa().LarkError as err:
        return [], [_syntax_diagnostic(source, err)]
    builder = _Builder(source, errors)
    rules = [r for r in (builder.rule(t) for t in tree.children) if r is not None]
    return rules, errors.items


def _rule_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.glob("*.rules"), key=lambda p: p.name)
    return [path]


def rules_digest(files: Iterable[tuple[str, bytes]]) -> str:
    """sha256 over (name, bytes) of each file, sorted by name: the rules digest of a manifest."""
    h = hashlib.sha256()
    for name, data in sorted(files):
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _known_prefixes(known: set[str] | frozenset[str]) -> frozenset[str]:
    out: set[str] = set(known)
    for k in known:
        parts = k.split(".")
        for i in range(1, len(parts)):
            out.add(".".join(parts[:i]))
    return frozenset(out)


def check_fields(
    rules: Iterable[Rule], known_fields: set[str] | frozenset[str]
) -> list[Diagnostic]:
    """Unknown field paths in rules, as positioned errors with did-you-mean."""
    ok = _known_prefixes(known_fields)
    out: list[Diagnostic] = []
    for rule in rules:
        for ref in rule.path_refs:
            if ref.path not in ok:
                out.append(
                    Diagnostic(
                        "error",
                        "rules-unknown-field",
                        f"rule {rule.id!r} names unknown field {ref.path!r}",
                        ref.span,
                        help=did_you_mean(ref.path, known_fields),
                    )
                )
    return out


def load_rules(path: str | Path, known_fields: set[str] | frozenset[str] | None = None) -> RuleSet:
    """Load one `.rules` file or every `*.rules` file of a directory.

    Raises `DiagnosticError` with every problem found (syntax, clauses, functions,
    duplicate ids, unknown fields); the error carries a `sources` SourceMap for rendering.
    """
    path = Path(path)
    sources = SourceMap()
    diagnostics: list[Diagnostic] = []
    rules: list[Rule] = []
    blobs: list[tuple[str, bytes]] = []
    if not path.exists():
        raise DiagnosticError(
            Diagnostic("error", "rules-io", f"rules path {str(path)!r} does not exist")
        )
    files = _rule_files(path)
    for f in files:
        data = f.read_bytes()
        blobs.append((f.name, data))
        source = str(f)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            diagnostics.append(
                Diagnostic("error", "rules-io", f"{source} is not UTF-8 text: {err.reason}")
            )
            continue
        sources.add(source, text)
        file_rules, file_diags = _parse_cached(text, source)
        rules.extend(file_rules)
        diagnostics.extend(file_diags)
    first: dict[str, Rule] = {}
    for rule in rules:
        if rule.id in first:
            diagnostics.append(
                Diagnostic(
                    "error",
                    "rules-duplicate-id",
                    f"rule id {rule.id!r} is defined more than once",
                    rule.span,
                    secondary=((first[rule.id].span, "first defined here"),),
                )
            )
        else:
            first[rule.id] = rule
    if known_fields is not None:
        diagnostics.extend(check_fields(rules, known_fields))
    if diagnostics:
        failure = DiagnosticError(diagnostics)
        failure.sources = sources  # type: ignore[attr-defined]
        raise failure
    return RuleSet(tuple(rules), rules_digest(blobs), tuple(str(f) for f in files))


_PARSE_CACHE: dict[tuple[str, str], tuple[list[Rule], list[Diagnostic]]] = {}


def rule_to_record(rule: Rule) -> dict[str, Any]:
    """A JSON-able form of a parsed rule (for the on-disk parse cache)."""
    s = rule.span
    return {
        "id": rule.id,
        "area": rule.area,
        "severity": rule.severity,
        "message": rule.message,
        "condition": rule.condition,
        "at": list(rule.at),
        "help": rule.help,
        "why": rule.why,
        "doc": rule.doc,
        "fields_mentioned": list(rule.fields_mentioned),
        "span": [s.line, s.col, s.end_line, s.end_col],
        "when": records.node_to_data(rule.when),
        "template": [
            p if isinstance(p, str) else {"node": records.node_to_data(p)} for p in rule.template
        ],
        "path_refs": [records.node_to_data(r) for r in rule.path_refs],
        "help_template": [
            p if isinstance(p, str) else {"node": records.node_to_data(p)}
            for p in rule.help_template
        ],
    }


def rule_from_record(d: dict[str, Any], source: str) -> Rule:
    refs = [records.node_from_data(r, source) for r in d["path_refs"]]
    return Rule(
        id=d["id"],
        area=d["area"],
        severity=d["severity"],
        message=d["message"],
        condition=d["condition"],
        at=tuple(d["at"]),
        help=d["help"],
        why=d["why"],
        doc=d["doc"],
        fields_mentioned=tuple(d["fields_mentioned"]),
        span=Span(source, *d["span"]),
        when=records.node_from_data(d["when"], source),
        template=tuple(
            p if isinstance(p, str) else records.node_from_data(p["node"], source)
            for p in d["template"]
        ),
        path_refs=tuple(r for r in refs if isinstance(r, ex.PathRef)),
        help_template=tuple(
            p if isinstance(p, str) else records.node_from_data(p["node"], source)
            for p in d.get("help_template", ())
        ),
    )


def _parse_cached(text: str, source: str) -> tuple[list[Rule], list[Diagnostic]]:
    """Parse with two caches: in-process, then the derived-artifact cache (`compiler.derive.derived`;
    a file with mistakes is parsed every time, so its diagnostics are always reported)."""
    key = (source, hashlib.sha256(text.encode()).hexdigest())
    hit = _PARSE_CACHE.get(key)
    if hit is None:
        from compiler.derive.derived import NotCached, derived

        def build() -> bytes:
            rules, diags = parse_rules_text(text, source)
            if diags:
                raise NotCached((rules, diags))
            return json.dumps([rule_to_record(r) for r in rules]).encode()

        def load(payload: bytes) -> tuple[list[Rule], list[Diagnostic]]:
            return [rule_from_record(r, source) for r in json.loads(payload)], []

        here = Path(__file__).resolve().parent
        hit = derived(
            "rules",
            [
                source,
                text,
                GRAMMAR,
                here / "loader.py",
                here / "records.py",
                here / "expr.py",
                here / "functions.py",
            ],
            build,
            load,
            libs=("lark",),
        )
        if len(_PARSE_CACHE) > 256:
            _PARSE_CACHE.clear()
        _PARSE_CACHE[key] = hit
    return list(hit[0]), list(hit[1])
