"""The JSON every benchmark script writes: its rows, what it measured, and where and when
(machine, cores, date), so a result read later says what produced it.

Scripts run as ``python benchmarks/NAME.py`` import it as ``from results_file import
write_results`` (their own directory is first on the path)."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any


def write_results(out: Path, rows: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """Write ``fields``, the machine, its cores, ``rows`` and today's date (UTC) to ``out``."""
    result = {
        **fields,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "rows": rows,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result
