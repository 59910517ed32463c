"""One module per CLI command; each exposes ``command`` (a click command or group).

Modules import their heavy dependencies inside the command body so ``rlc --help`` stays fast.
"""
