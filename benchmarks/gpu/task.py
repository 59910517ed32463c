"""The shared end-to-end task: the same prompts, reward and lengths for rlc and TRL.

Prompts are synthetic GSM8K-style word problems (about 100-130 builtin-tokenizer tokens;
no data set travels to the device). The reward is a cheap text function with spread
inside a group (share of digit characters in the completion), so advantages are non-zero
and both sides do real backward passes; it stands in for a verifier, whose cost is
measured separately (benchmarks/verifiers.py).
"""

from __future__ import annotations

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis"]
ITEMS = ["clips", "apples", "stamps", "books", "pencils", "cookies", "marbles", "cards"]


def prompts(n: int) -> list[str]:
    out = []
    for i in range(n):
        name, item = NAMES[i % len(NAMES)], ITEMS[(i * 3) % len(ITEMS)]
        a, b, c = 12 + 7 * i, 3 + (i % 5), 2 + (i % 4)
        out.append(
            f"Question: {name} had {a} {item} on Monday. On Tuesday {name} bought {b} times as "
            f"many {item} as on Monday, then gave {c} {item} to each of {b + c} friends. On "
            f"Wednesday {name} sold half of what was left and bought {a // 2} more. How many "
            f"{item} does {name} have at the end of Wednesday? Think step by step, then write "
            "the final answer after '####'.\nAnswer:"
        )
    return out


def reward(text: str) -> float:
    """Share of digits in the completion (a stand-in verifier with in-group spread)."""
    if not text:
        return 0.0
    return sum(ch.isdigit() for ch in text) / len(text)
