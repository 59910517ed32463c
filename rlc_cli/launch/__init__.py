"""Launching compiled manifests on Beaker (`rlc launch`), and the receipts every launch
leaves behind (`rlc status`). No torch here: both run on a laptop.
"""
