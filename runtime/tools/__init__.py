"""Tools a policy may call during a multi-turn rollout (``[environment]``).

`calculator` evaluates arithmetic without ``eval``; `python` runs code in the sandboxed
executor service through its client API; `runners` builds them from the manifest.
"""
