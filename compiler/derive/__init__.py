"""Derived artifacts: what the compiler builds from its own sources on first use and caches.

* `derived` - the one mechanism: ``derived(kind, sources, build, load)``, keyed by the
  sources' bytes, stored under the user cache;
* `lalr` - LALR parsers for our grammars (lark's standalone runtime and tables);
* `fastgen` - pydantic-free validators generated from the spec and Beaker models, with
  `fast_runtime` (their shared helpers) and `fastpath` (makes and loads them, and the
  plain-data tables derived from the spec models);
* `compile_cache` - whole ``rlc compile`` results per spec, keyed the same way.

Importing this package imports nothing; import the module you need.
"""
