"""The shape of a ``builtin:NAME[?vocab_size=N]`` model as the runtime builds it.

``BUILTIN_MODELS`` counts each builtin at its tokenizer's vocabulary; the runtime builds
it at the ``vocab_size`` override when one is given (``runtime.models.builtin``), and the
embedding table and the LM head (untied) grow with it: ``builtin:olmo3-1b`` has 1.077B
parameters with the 704-token builtin tokenizer, 1.485B at ``vocab_size=100352``.
"""

from __future__ import annotations

from typing import Any

from contract.spec.constants import BUILTIN_MODELS

# runtime.models.tokenizer: the builtin text tokenizer's and the digit tokenizer's sizes
# (tests/unit/test_memory_estimate.py keeps them equal)
TEXT_TOKENIZER_VOCAB = 704
DIGIT_TOKENIZER_VOCAB = 26
DIGIT_BUILTINS = frozenset({"tiny-digits"})
TOOL_TOKENIZER_VOCAB = 22
TOOL_BUILTINS = frozenset({"tiny-tools"})


def tokenizer_vocab(base: str) -> int:
    """The vocabulary of the tokenizer a builtin named ``base`` is built with."""
    if base in TOOL_BUILTINS:
        return TOOL_TOKENIZER_VOCAB
    return DIGIT_TOKENIZER_VOCAB if base in DIGIT_BUILTINS else TEXT_TOKENIZER_VOCAB


def builtin_info(source: str) -> dict[str, Any]:
    """``BUILTIN_MODELS[NAME]`` with ``vocab`` and ``params`` at the vocabulary the
    runtime builds; ``{}`` for a non-builtin or unknown source."""
    if not source.startswith("builtin:"):
        return {}
    base, _, query = source.removeprefix("builtin:").partition("?")
    listed = BUILTIN_MODELS.get(base)
    if not listed:
        return {}
    info = dict(listed)
    vocab = tokenizer_vocab(base)
    for part in query.split("&"):
        key, _, val = part.partition("=")
        if key == "vocab_size" and val.isdigit():
            vocab = int(val)
        elif key in ("d_model", "n_layers", "num_experts"):
            info.pop("expert_params", None)  # another shape: the split is not known
    d, old = int(info.get("hidden", 0)), int(info.get("vocab", 0))  # type: ignore[call-overload]
    if d and old:  # embedding table + LM head
        info["params"] = int(info["params"]) + 2 * (vocab - old) * d  # type: ignore[call-overload]
    info["vocab"] = vocab
    return info
