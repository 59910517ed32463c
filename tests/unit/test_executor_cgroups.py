"""Run cgroups (`runtime.executor.cgroups`) on this host: a group bounds the memory and the
tasks of a whole process tree, reports its OOM kills and is removed afterwards. Skipped, with
the host's reason, where no cgroup with memory and pids is writable."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.executor import cgroups

# Four children each try to hold 48 MiB at once: together far above the group's 64 MiB.
HOLDERS = """
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        os.closerange(0, 3)  # the test reads the first process's output only
        held = [b'\\x01' * (4 << 20) for _ in range(12)]
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
time.sleep(3)
alive = sum(os.waitpid(p, os.WNOHANG) == (0, 0) for p in kids)
print('alive', alive, flush=True)
"""


@pytest.fixture(scope="module")
def base():
    found, why = cgroups.probe(f"rlc-executor-test-{os.getpid()}")
    if found is None:
        pytest.skip(f"no writable cgroup with memory and pids on this host: {why}")
    yield found
    cgroups.remove_base(found)


def _run_in(group: cgroups.RunGroup, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=group.join,
    )


def test_a_group_bounds_the_memory_of_the_whole_tree(base):
    group = cgroups.RunGroup.create(base, "run-memory", memory_bytes=64 << 20, pids=16)
    try:
        out = _run_in(group, HOLDERS)
        assert group.oom_killed(), out
        alive = int(out.stdout.split()[-1]) if out.stdout.strip() else 0
        assert alive <= 1, out.stdout  # at most one 48 MiB holder fits in 64 MiB
    finally:
        assert group.remove()
    assert not any(os.path.exists(d) for d in group.dirs)


def test_a_group_bounds_the_tasks_of_the_whole_tree(base):
    group = cgroups.RunGroup.create(base, "run-tasks", memory_bytes=256 << 20, pids=4)
    code = (
        "import os, time\nn = 0\ntry:\n    for _ in range(16):\n"
        "        if os.fork() == 0:\n            os.closerange(0, 3)\n            time.sleep(30)\n"
        "            os._exit(0)\n"
        "        n += 1\nexcept OSError:\n    pass\nprint(n)\n"
    )
    try:
        out = _run_in(group, code)
        assert out.stdout.split() == ["3"], out  # the first process and three children
        assert not group.oom_killed()
    finally:
        assert group.remove()  # the sleeping children are killed with the group


V2_MOUNTINFO = "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
HYBRID_MOUNTINFO = (
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
)


@pytest.mark.parametrize(
    ("mountinfo", "proc_cgroup", "expected"),
    [
        # a systemd host: everything on cgroup v2
        (V2_MOUNTINFO, "0::/system.slice/rlc.service\n", {"": "system.slice/rlc.service"}),
        # a hybrid host (v1 memory and pids, v2 with no controllers)
        (
            HYBRID_MOUNTINFO,
            "8:pids:/\n4:memory:/jobs/a\n0::/\n",
            {"memory": "memory/jobs/a", "pids": "pids", "": "unified"},
        ),
    ],
)
def test_the_service_finds_its_own_groups(tmp_path, mountinfo, proc_cgroup, expected):
    (tmp_path / "mountinfo").write_text(mountinfo)
    (tmp_path / "cgroup").write_text(proc_cgroup)
    mounts = cgroups._mounts(str(tmp_path / "mountinfo"))
    own = cgroups._own_cgroups(str(tmp_path / "cgroup"))
    for key, rel in expected.items():
        assert cgroups._dir(mounts, own, key) == os.path.normpath(f"/sys/fs/cgroup/{rel}")
