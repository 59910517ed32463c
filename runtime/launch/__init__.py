"""Jobs the runtime starts itself: local node processes and background evaluator jobs.

Submitting a compiled manifest (`rlc launch`) is the command line's job (`rlc_cli.launch`).
"""
