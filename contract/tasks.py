"""Task and verifier names, declared once for the compiler and the runtime.

`TaskName` is the type of ``data.tasks[].task`` in the spec (`contract.spec.data`) and the
key of the runtime's task loaders (`runtime.data.tasks`); a named task is scored by the
verifier of the same name. `VERIFIER_SETTINGS` says which ``[rewards.*]`` table configures
each built-in verifier, so a verifier receives its typed settings by name
(`verifier_settings`), never a raw table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from contract.spec.rewards import CodeReward, IfevalReward, MathReward, RewardsSection

TaskName = Literal["gsm8k", "math", "ifeval", "code", "multiplication", "arithmetic", "addition"]
TASK_NAMES: tuple[str, ...] = get_args(TaskName)

# Built-in verifier -> the field of ``[rewards]`` holding its settings (None: it has none).
# Judge-scored verifiers are configured by ``[judging.bindings]`` instead.
RewardsTable = Literal["math", "code", "ifeval"]
VERIFIER_SETTINGS: dict[str, RewardsTable | None] = {
    "gsm8k": None,  # exact numeric match: nothing to set
    "math": "math",
    "ifeval": "ifeval",
    "code": "code",
    "multiplication": None,
    "arithmetic": None,
    "addition": None,
}


def verifier_settings(
    rewards: RewardsSection, verifier: str
) -> MathReward | CodeReward | IfevalReward | None:
    """The typed ``[rewards.*]`` settings of a built-in verifier (None: it takes none, or
    it is not a built-in one)."""
    table = VERIFIER_SETTINGS.get(verifier)
    if table == "math":
        return rewards.math
    if table == "code":
        return rewards.code
    if table == "ifeval":
        return rewards.ifeval
    return None
