"""Each example spec compiles to exactly its committed manifest and Beaker YAML."""

from __future__ import annotations

import difflib

import pytest
from golden import EXAMPLES, SNAPSHOTS, render


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_snapshot(spec):
    expected_dir = SNAPSHOTS / spec.stem
    assert expected_dir.is_dir(), (
        f"no snapshot for {spec.name}: run tests/golden/golden.py --update"
    )
    actual = render(spec)
    expected = {p.name: p.read_text(encoding="utf-8") for p in expected_dir.iterdir()}
    assert sorted(actual) == sorted(expected)
    for name, text in actual.items():
        if text != expected[name]:
            diff = "\n".join(
                list(
                    difflib.unified_diff(
                        expected[name].splitlines(), text.splitlines(), lineterm=""
                    )
                )[:40]
            )
            pytest.fail(
                f"{spec.stem}/{name} differs from its snapshot "
                f"(update with `.venv/bin/python tests/golden/golden.py --update`):\n{diff}"
            )
