"""Sandboxed code executor service (``python -m runtime.executor``).

`sandbox` runs one program under OS limits, `protocol` defines ``POST /run``, `server` is
the aiohttp service, `client` starts or reaches one from the reward code.
"""
