"""The runtime image recipe and runtime.lock.json agree: the Dockerfile's default versions
are the lock's, the build script tags the lock's image names, and the runtime extra pins the
same torch and sglang-router."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCK = json.loads((ROOT / "runtime.lock.json").read_text())
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()

ARG_FOR_SOURCE = {
    "torch": "TORCH_VERSION",
    "olmo_core": "OLMO_CORE_VERSION",
    "sglang": "SGLANG_VERSION",
    "sglang_router": "SGLANG_ROUTER_VERSION",
}


def _arg_defaults(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, flags=re.M))


def test_every_locked_source_is_a_dockerfile_default() -> None:
    defaults = _arg_defaults(DOCKERFILE)
    assert set(LOCK["sources"]) == set(ARG_FOR_SOURCE), "a new locked source needs its ARG"
    for source, arg in ARG_FOR_SOURCE.items():
        assert defaults.get(arg) == LOCK["sources"][source]["version"], (source, arg)


def test_each_locked_package_is_installed_at_its_arg() -> None:
    for source, arg in ARG_FOR_SOURCE.items():
        package = LOCK["sources"][source]["package"]
        assert f'"{package}=={"${" + arg + "}"}"' in DOCKERFILE, package
    assert "/opt/rlc" in DOCKERFILE  # where the Beaker task script runs the runtime
    from compiler.emit.beaker import CODE_DIR

    assert f"COPY . {CODE_DIR}" in DOCKERFILE


def test_runtime_extra_pins_the_locked_versions() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    for source in ("torch", "sglang_router", "olmo_core"):
        entry = LOCK["sources"][source]
        assert f'"{entry["package"]}=={entry["version"]}"' in text, source


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_build_script_tags_the_locked_names() -> None:
    out = subprocess.run(
        ["bash", "docker/build.sh", "--print"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    out = [line.strip() for line in out]
    build, push, upload = out
    assert build.startswith("docker build -f docker/Dockerfile")
    assert build.endswith(f"-t {LOCK['image']['docker']} .")
    for source, arg in ARG_FOR_SOURCE.items():
        assert f"--build-arg {arg}={LOCK['sources'][source]['version']}" in build
    assert push == f"docker push {LOCK['image']['docker']}"
    beaker_name = LOCK["image"]["beaker"].split("/", 1)[1]
    assert upload == f"beaker image create --name {beaker_name} {LOCK['image']['docker']}"
