"""Stage 2, document -> typed spec: the checks that bind a document to the spec schema.

The schema itself (schema_version = 1, one pydantic model per section) lives in the typed
contract, `contract.spec`, because the runtime reads the very same models from a compiled
manifest; this package re-exports ``Spec`` and the section tables lazily.
``Spec`` is the root; ``SECTIONS`` maps section names to their models. Aliases and derived
formulas live in each field's ``json_schema_extra`` (see ``_base.fld``); docs, the JSON
Schema and ``rlc explain`` are generated from these models. Beside the models: `bind`
(layers a recipe and the spec, validates, maps errors to spans), `native_options` (checks
``[native.*]`` against the pinned option tables), `secrets` (refuses credential-looking
values), `model_source` (what a readable ``model.source`` says) and `consumers` (what makes
each field take effect).

Where the manifest deviates from / extends briefs/contract.md (`contract.plan` and
`contract.run` type the rest of the manifest):

* Paths (``output.root``, ``model.source`` dirs, task paths, ``paths.*``) are joined to the
  spec's directory *as the spec path was given* and normalized, so they are cwd-relative
  when ``rlc compile`` got a relative spec path (see compiler/resolve/resolve.py and
  docs/support.md "Paths in manifests"); absolute only when the spec path or value is.
* ``commands.trainer_argv`` is ``python -m runtime.entrypoints.execute {manifest}``; ``{manifest}`` and
  ``{host:N}`` (engine URLs on other nodes in ``router_argv``) are placeholders.
  ``commands`` also has ``engine_env`` (one per engine), ``teacher_env``, ``evaluator_argv``
  (background evaluation), ``judges`` (managed judge name -> ``{argv, env}``) and
  ``trainer_rank`` (``{argv, env}`` of a follower rank, whose run-time values are the
  placeholders listed in ``runtime.node.launch_argv``).
* ``plan.placement`` also has ``judges``, ``replicas``, ``gpus_per_replica``,
  ``allocated_gpus``, ``used_gpus``, ``unused_gpus``, ``policy_gpus``, ``judge_gpus``,
  ``widest_node``; engines carry ``device``; ``trainer`` carries ``world_size`` and
  ``device``. ``plan`` also has ``scoring_pass`` and ``evaluation``.
* Extra top-level keys: ``facts`` (aggregates the rules read, so lint can re-check),
  ``warnings`` (the compile's advisories), ``source.recipe`` / ``source.recipe_sha256``,
  ``paths.prepared`` / ``paths.eval_snapshots``.
* A CPU trainer (``trainer.gpus = 0``) has ``trainer.cpu_processes`` gloo ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contract.spec.root import (
        MAP_SECTIONS,
        SCHEMA_VERSION,
        SECTIONS,
        TOP_LEVEL,
        Judge,
        Section,
        Spec,
    )

__all__ = [
    "MAP_SECTIONS",
    "SCHEMA_VERSION",
    "SECTIONS",
    "TOP_LEVEL",
    "Judge",
    "Section",
    "Spec",
]


def __getattr__(name: str) -> Any:
    """Load the pydantic models on first use: a compile that the generated fast validator
    (``compiler/spec/_fast.py``) accepts never imports pydantic."""
    if name in __all__:
        from contract.spec import root

        return getattr(root, name)
    raise AttributeError(f"module 'compiler.spec' has no attribute {name!r}")
