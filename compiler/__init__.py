"""rlc compiler: TOML spec -> checked, content-hashed launch manifest.

The compiler never imports torch or the runtime; it must stay fast on a laptop. Its packages
are the stages of the pipeline, in order (`pipeline` drives them):

    text      -> document      parse/     TOML front end with spans; ``--set`` overrides
    document  -> typed spec    spec/      bind to the models of `contract.spec`; native
                                          options, secrets
    spec      -> resolved      resolve/   values with provenance, placement, memory, argv
    resolved  -> checked       rules/     the rule language and its engine (schemas/rules)
    checked   -> manifest      manifest/  build, write, load; trust, lint, diff, explain
    manifest  -> artifacts     emit/      Beaker YAML, generated docs and schemas
    (runtime)                  runtime/   reads the manifest as the typed `contract`;
                                          imports only `compiler.manifest.trust` (to verify
                                          it once per run) and `compiler.diagnostics`

Beside them: `derive/` (artifacts built from our own sources on first use and cached:
parser tables, fast validators, the compile cache), `diagnostics` (the one error type every
stage reports), `resources` (where templates, schemas, recipes and the runtime lock are).
"""

__version__ = "0.1.0"
