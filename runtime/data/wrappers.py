"""Prompt wrappers: the instruction text put around a task's question.

``none`` leaves the question as is; ``auto`` picks the task's usual wrapper; ``boxed`` asks
for the final answer in ``\\boxed{}`` (the rlzero/SimpleRL convention the math verifier
extracts); ``open_instruct_rlzero_answer`` is the compiler's name for the rlzero-style
boxed-answer instruction (our wording); ``gsm8k`` asks for ``#### N``; ``rlzero`` is the R1-Zero style plain-text
conversation (fed without a chat template); ``code`` asks for one Python code block;
``calculator_call`` writes an arithmetic question (its trailing ``=`` dropped) as an opened
calculator call, ``<calculator>37+45``, fed without a chat template: the policy runs the
tool by closing the call (``[environment]``'s default syntax) or answers on its own.
"""

from __future__ import annotations

from typing import get_args

from contract.spec.data import PromptWrapper

BOXED_SUFFIX = "\n\nPlease reason step by step, and put your final answer within \\boxed{}."
GSM8K_SUFFIX = '\n\nLet\'s think step by step and output the final answer after "####".'
CODE_PREFIX = (
    "Complete the following Python code. Reply with the complete function in one "
    "```python code block.\n\n"
)
STDIO_PREFIX = (
    "Solve the following problem in Python. The program reads standard input and writes "
    "standard output. Reply with the program in one ```python code block.\n\n"
)
RLZERO_TEMPLATE = (
    "A conversation between User and Assistant. The User asks a question, and the "
    "Assistant solves it. The Assistant first thinks about the reasoning process and then "
    "provides the User with the answer. The final answer is enclosed within \\boxed{{}}.\n"
    "User: {question}\nAssistant:"
)

RLZERO_ANSWER_SUFFIX = (
    "\n\nThink step by step, then give your final answer at the end as \\boxed{ANSWER}."
)

# The wrapper names are declared once, in the spec contract's `PromptWrapper`.
WRAPPERS: tuple[str, ...] = get_args(PromptWrapper)

# What ``auto`` means for each task.
AUTO: dict[str, str] = {
    "gsm8k": "boxed",
    "math": "boxed",
    "ifeval": "none",
    "code": "code",
    "arithmetic": "none",
    "multiplication": "none",
    "addition": "none",
}


class UnknownWrapper(ValueError):
    pass


def resolve_wrapper(name: str | None, task: str) -> str:
    """Map ``auto``/None to the task's default; reject unknown names."""
    name = name or "auto"
    if name not in WRAPPERS:
        raise UnknownWrapper(
            f"unknown prompt_wrapper {name!r}; choose one of {', '.join(WRAPPERS)}"
        )
    return AUTO.get(task, "none") if name == "auto" else name


def wrap(question: str, wrapper: str, *, stdio: bool = False) -> tuple[str, bool]:
    """Return (prompt text, raw) where ``raw`` means: feed without a chat template."""
    if wrapper == "none":
        return question, False
    if wrapper == "boxed":
        return question + BOXED_SUFFIX, False
    if wrapper == "open_instruct_rlzero_answer":
        return question + RLZERO_ANSWER_SUFFIX, False
    if wrapper == "gsm8k":
        return question + GSM8K_SUFFIX, False
    if wrapper == "rlzero":
        return RLZERO_TEMPLATE.format(question=question), True
    if wrapper == "calculator_call":
        return "<calculator>" + question.rstrip().removesuffix("="), True
    if wrapper == "code":
        return (STDIO_PREFIX if stdio else CODE_PREFIX) + question, False
    raise UnknownWrapper(f"unknown prompt_wrapper {wrapper!r}")
