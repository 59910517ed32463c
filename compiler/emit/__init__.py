"""Emitters: Beaker experiment specs (validated by `beaker_model`), docs, schemas."""
