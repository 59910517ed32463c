"""The typed contract between the compiler and the runtime (torch-free).

`contract.spec` holds the spec schema: one pydantic model per section, with each field's
type, default, constraints and documentation defined once. The compiler binds a spec file to
these models and resolves derived values; the manifest's ``config`` is their dump. The
runtime validates that ``config`` back into the same models (`contract.run`), so a field has
exactly one definition and one default. `contract.plan` types the compiled ``plan``,
`contract.tasks` the task and verifier names both sides share.

Nothing here imports the compiler or the runtime; importing this package imports nothing.
"""
