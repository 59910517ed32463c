"""The wheel carries templates, schemas and recipes: rlc works from outside the checkout."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_wheel_install_runs_outside_the_checkout(tmp_path):
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if built.returncode != 0 and "hatchling" in (built.stderr + built.stdout):
        pytest.skip(f"cannot fetch the build backend here: {built.stderr[-300:]}")
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("rlc-*.whl")

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    # dependencies come from the test environment; the rlc code itself only from the wheel
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = [p for p in site.getsitepackages() if Path(p).exists()]
    Path(purelib, "_rlc_test_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    spec = outside / "quickstart.toml"
    shutil.copy(ROOT / "specs" / "examples" / "quickstart.toml", spec)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["RLC_CACHE_DIR"] = str(tmp_path / "cache")
    rlc = env_dir / "bin" / "rlc"

    where = subprocess.run(
        [
            str(py),
            "-c",
            "import compiler, compiler.resources as r; print(compiler.__file__); print(r.templates_dir())",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert where[0].startswith(str(env_dir)), f"compiler imported from {where[0]}, not the wheel"
    assert "_data" in where[1] and Path(where[1]).is_dir()

    version = subprocess.run(
        [str(rlc), "--version"], cwd=outside, env=env, capture_output=True, text=True
    )
    assert version.returncode == 0 and "0.1.0" in version.stdout
    for args in (
        ["validate", str(spec)],
        ["compile", str(spec), "-o", str(outside / "build")],
        ["recipes"],
    ):
        r = subprocess.run(
            [str(rlc), *args], cwd=outside, env=env, capture_output=True, text=True, timeout=120
        )
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    assert list((outside / "build").glob("*/beaker/train.yaml"))
