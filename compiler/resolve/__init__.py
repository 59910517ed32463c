"""Stage 3, typed spec -> resolved config: every field's value with its provenance, and the plan.

* `resolve` - relative paths, derived values in dependency order, then placement and plan;
* `provenance` - where each value came from (spec, override, recipe, default, derivation);
* `placement` - which node and GPU runs each trainer rank, engine and judge;
* `memory` - the plan's per-GPU memory estimate; `builtin_shape` - a builtin model's shape;
* `paths` - the run directory layout; `argv` - the command lines the runtime starts.

Importing this package imports nothing; import the module you need.
"""
