"""rlc compiler: TOML spec -> checked, content-hashed launch manifest.

The compiler never imports torch or the runtime; it must stay fast on a laptop.
"""

__version__ = "0.1.0"
