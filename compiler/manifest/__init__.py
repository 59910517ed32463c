"""Stage 4, resolved config -> checked, content-hashed manifest, and the tools over it.

* `manifest` - build, write and load the immutable manifest; `canonical` - its JSON form;
* `trust` - the manifest contract: what the runtime imports to load a manifest it may carry
  out (every lint check, then every derived field re-derived);
* `lint` (with `lint_schema` and `schema_check`, its fast JSON Schema check) - ``rlc lint``;
* `diff` - ``rlc diff``; `explain` - ``rlc explain``.

Importing this package imports nothing (the runtime reaches `trust` through it); import the
module you need.
"""
