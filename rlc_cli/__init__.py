"""The ``rlc`` command line: the layer on top that uses both the compiler and the runtime.

Nothing below imports it: the compiler never imports the runtime or this package, and the
runtime reaches the compiler only through the manifest contract (``compiler.manifest.trust``).
"""
