"""[native.sglang], [native.olmo_core]: pass-through options, checked against pinned tables."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from contract.spec._base import Section


class NativeSection(Section):
    sglang: dict[str, Any] = Field(
        default={}, description="extra SGLang server options (underscored names)"
    )
    olmo_core: dict[str, Any] = Field(
        default={},
        description="OLMo-core train-module options: checked against the pinned table, then refused (the trainer reads none of them)",
    )
