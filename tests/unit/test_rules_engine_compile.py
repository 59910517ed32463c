"""Compiled rule conditions (`compiler.rules.compile`) agree with the tree interpreter."""

from __future__ import annotations

import random
from typing import Any

import pytest

from compiler.resources import rules_dir
from compiler.rules import UNSET, MappingView, evaluate, load_rules, parse_rules_text
from compiler.rules import expr as ex
from compiler.rules.compile import compile_condition, compile_node
from compiler.rules.engine import _Memo

POOL: list[Any] = [
    UNSET,
    None,
    True,
    False,
    0,
    1,
    2,
    -1,
    7,
    8,
    64,
    0.0,
    0.5,
    1.0,
    2.0,
    -0.5,
    1e-8,
    "",
    "none",
    "tis",
    "barrier",
    "colocated",
    "background",
    "builtin",
    "builtin:tiny",
    "/weka/oe-training-default/x",
    "/weka",
    [],
    [1, 2],
    ["a", "b"],
    ["/weka/a", "/weka/b/c"],
    ["/weka"],
    {},
    {"a": 1},
]


class _RandomView:
    """Every field gets a random value from POOL (fixed per path for one view)."""

    def __init__(self, rng: random.Random, explicit_share: float = 0.5):
        self.rng = rng
        self.values: dict[str, Any] = {}
        self.explicit: dict[str, bool] = {}
        self.share = explicit_share

    def get(self, path: str) -> Any:
        if path not in self.values:
            self.values[path] = self.rng.choice(POOL)
        return self.values[path]

    def is_set(self, path: str) -> bool:
        if path not in self.explicit:
            self.explicit[path] = self.rng.random() < self.share
        return self.explicit[path]

    def span(self, path: str) -> None:
        return None


@pytest.fixture(scope="module")
def shipped():
    return load_rules(rules_dir())


def test_every_shipped_rule_agrees_on_random_configs(shipped):
    rng = random.Random(1234)
    fired = 0
    for _ in range(400):
        view = _RandomView(rng)
        memo = _Memo(view)
        for rule in shipped:
            expected = ex.truthy(rule.when.eval(memo))
            assert rule.check(memo) is expected, (rule.id, view.values)
            fired += expected
    assert fired > 0  # the random configs do make rules fire


def test_every_node_kind_agrees():
    text = """
rule all-kinds
  when (a + b > 2 or -a < 0 or a * 2 == 4 or a / b >= 1 or a // b <= 1 or a % 2 != 0)
    and (s in ["x", "y"] or s not in "xyz" or s == null or t != null or x is set
    or y is not set or not z or len(l) > 1 or max(l) == 2 or min(a, b) < 1
    or divides(a, b) or startswith(s, "x") or any_startswith(l, "x")
    or all_under(p, ["/w"]) or abs(a) == 1 or [a, b] == [1, 2] or l + l == [1, 1]
    or s + t == "xy" or a == true or 1 < a or "x" == s or 2.5 > a)
  error "m"
"""
    (rule,), errors = parse_rules_text(text, "t.rules")
    assert not errors
    rng = random.Random(5)
    names = ["a", "b", "s", "t", "x", "y", "z", "l", "p"]
    for _ in range(3000):
        data = {n: rng.choice(POOL) for n in names}
        data = {k: v for k, v in data.items() if v is not UNSET}
        view = MappingView(data, explicit={n for n in names if rng.random() < 0.5})
        memo = _Memo(view)
        assert rule.check(memo) is ex.truthy(rule.when.eval(memo)), data
        # every sub-expression, not only the whole condition
        for node in rule.when.walk():
            got, want = compile_node(node)(memo), node.eval(memo)
            assert type(got) is type(want) and got == want, (node.render(), data)
            assert compile_condition(node)(memo) is ex.truthy(want)


def test_evaluate_uses_the_compiled_form_with_the_same_findings(shipped):
    data = {"trainer": {"tensor_parallel": 2, "pipeline_parallel": 1}}
    view = MappingView(data, explicit={"trainer.tensor_parallel"})
    found = {f.code for f in evaluate(shipped, view)}
    memo = _Memo(view)
    by_tree = {r.id for r in shipped if ex.truthy(r.when.eval(memo))}
    assert found == by_tree and "trainer-parallelism" in found
