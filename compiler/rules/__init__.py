"""The rule language of rlc (`schemas/rules/*.rules`) and its evaluation engine.

    rule trainer-parallelism
      area "MoE training"
      when trainer.tensor_parallel > 1 or trainer.pipeline_parallel > 1
      error "trainer parallelism {trainer.tensor_parallel} is not supported"
      at trainer.tensor_parallel, trainer.pipeline_parallel
      help "scale with expert parallelism"
      why "..."          # optional
      doc "docs/support.md#moe-training"   # optional

See `compiler.rules.expr` for the evaluation semantics (missing values never crash).
"""

from compiler.rules.engine import (
    ConfigView,
    Finding,
    MappingView,
    evaluate,
    evaluate_rule,
    format_rule,
    function_table,
    render_message,
    rules_mentioning,
)
from compiler.rules.expr import UNSET, format_value, is_missing
from compiler.rules.functions import FUNCTIONS, register_function
from compiler.rules.loader import (
    Rule,
    RuleSet,
    check_fields,
    load_rules,
    parse_rules_text,
    rules_digest,
)
from compiler.rules.reference import language_reference

__all__ = [
    "FUNCTIONS",
    "UNSET",
    "ConfigView",
    "Finding",
    "MappingView",
    "Rule",
    "RuleSet",
    "check_fields",
    "evaluate",
    "evaluate_rule",
    "format_rule",
    "format_value",
    "function_table",
    "is_missing",
    "language_reference",
    "load_rules",
    "parse_rules_text",
    "register_function",
    "render_message",
    "rules_digest",
    "rules_mentioning",
]
