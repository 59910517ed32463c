"""The rule language's reference text (markdown), for the generated docs and `rlc explain`."""

from __future__ import annotations

from compiler.rules.engine import function_table

_TEXT = """\
### The rule language

Rules live in `schemas/rules/*.rules`; `#` starts a comment. Each rule:

```
rule ID                      # lower-case words joined by '-', unique across all files
  area "AREA"                # optional (default "general"): groups rules in the docs
  when EXPRESSION            # required: the rule fires when this is true
  error "MESSAGE"            # required: `error` or `warning`, exactly one
  at FIELD, FIELD            # optional: where the diagnostic points (first with a span)
  help "TEXT"                # optional
  why "TEXT"                 # optional: the reason, shown as a note
  doc "docs/page.md#anchor"  # optional
```

Messages interpolate values: `"{trainer.gpus} GPUs"`, `"{trainer.gpus * 2}"`; write
`{{` / `}}` for literal braces.

Expressions: dotted field paths (`trainer.expert_parallel`, `plan.batch.x`, `facts.y`),
literals (`1`, `0.5`, `1e-6`, `"text"`, `true`, `false`, `null`, `[1, 2]`), comparisons
`== != < <= > >=`, `and or not`, arithmetic `+ - * / // %` and unary `-`,
`X in [..]` / `X not in [..]` (also substring of a string), `FIELD is set` /
`FIELD is not set` (given by the user: spec, `--set` or recipe; not a default or derived
value), parentheses and function calls.

Missing values never crash a rule: a field the configuration lacks is *unset*;
comparisons (including `!=`) with an unset or null operand, or between values of different
kinds, are false; arithmetic and functions on them give null. Compare with `null` or use
`is set` to test presence.

| function | arguments | meaning |
|---|---|---|
"""


def language_reference() -> str:
    rows = [f"| `{name}` | {arity} | {doc} |" for name, arity, doc in function_table()]
    return _TEXT + "\n".join(rows) + "\n"
