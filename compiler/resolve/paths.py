"""The run directory layout (``manifest.paths``), a pure function of the resolved config.

One definition for the compiler (which writes it into the manifest) and for `rlc lint`
(which recomputes it to catch a hand-edited path).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any


def derived_paths(config: Mapping[str, Any]) -> dict[str, str]:
    """Where the runtime writes: every path under ``output.root`` (metrics as configured)."""
    root = str(config["output"]["root"])
    return {
        "root": root,
        "checkpoints": posixpath.join(root, "checkpoints"),
        "metrics": str(config["tracking"]["metrics_path"]),
        "rollouts": posixpath.join(root, "rollouts"),
        "export_hf": posixpath.join(root, "export-hf"),
        "engine_weights": posixpath.join(root, "publish"),
        "prepared": posixpath.join(root, "prepared"),
        "eval_snapshots": posixpath.join(root, "eval-snapshots"),
    }
