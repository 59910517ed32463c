"""The spec schema (schema_version = 1): one pydantic model per section (``root.Spec`` is
the whole spec). `compiler.spec` re-exports it lazily so a compile the fast validator
accepts never imports pydantic; the runtime validates a manifest's ``config`` with it."""
