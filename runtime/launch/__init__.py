"""Launching compiled manifests on Beaker, and the receipts every launch leaves behind.

No torch here: `rlc launch` and `rlc status` run on a laptop.
"""
