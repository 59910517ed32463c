"""The manifest JSON Schema check of `rlc lint`: a fast yes/no predicate, then fastjsonschema.

Both are Python code generated from schemas/manifest.schema.json and made by
`compiler.derive.derived` (keyed by the schema's bytes, the generator's source and the
fastjsonschema version), so a later process loads the compiled code instead of
regenerating it (~50 ms for the predicate, seconds for fastjsonschema).
`compiler.manifest.schema_check` says why the predicate's "valid" can be trusted; anything else goes
to fastjsonschema, which is authoritative and writes the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any


def _schema_bytes() -> bytes:
    from compiler.resources import schemas_dir

    return (schemas_dir() / "manifest.schema.json").read_bytes()


def _generated(
    kind: str, sources: list[bytes | Path], generate: Callable[[], str], libs: tuple[str, ...]
) -> dict[str, Any]:
    """The namespace of a generated module, through the derived-artifact cache."""
    from compiler.derive.derived import generated_module

    return vars(generated_module(kind, sources, generate, libs=libs))


@cache
def validator() -> Any:
    """fastjsonschema's validator (raises `JsonSchemaException` with a message)."""
    import fastjsonschema

    raw = _schema_bytes()
    namespace = _generated(
        "fastjsonschema-manifest",
        [raw],
        lambda: str(fastjsonschema.compile_to_code(json.loads(raw))),
        ("fastjsonschema",),
    )
    return namespace["validate_https___rlc_dev_schemas_manifest_schema_json"]


@cache
def fast_check() -> Callable[[Any], bool] | None:
    """The yes/no predicate, or None when the schema uses something it does not compile."""
    from compiler.manifest import schema_check

    raw = _schema_bytes()
    try:
        namespace = _generated(
            "schema-check-manifest",
            [raw, Path(schema_check.__file__)],  # the generator too
            lambda: schema_check.build_source(json.loads(raw)),
            (),
        )
    except schema_check.Unsupported:
        return None
    fn: Callable[[Any], bool] = namespace["valid"]
    return fn


def schema_errors(manifest: dict[str, Any]) -> list[str]:
    """Why ``manifest`` does not match the manifest JSON Schema (empty: it does).

    fastjsonschema fills defaults into the object it validates; the predicate declines any
    document where that would happen, so the object the rules see is the same either way.
    """
    import fastjsonschema

    fast = fast_check()
    try:
        if fast is not None and fast(manifest):
            return []
    except (RecursionError, TypeError, ValueError):
        pass  # "cannot tell": the full validator decides
    try:
        validator()(manifest)
    except fastjsonschema.JsonSchemaException as exc:
        return [str(getattr(exc, "message", exc))]
    return []
