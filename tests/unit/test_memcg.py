"""The memory cgroups of the ``memory`` fault (``crashpoint._proc._memcg``) on paper: where one
can be made and why not, how an attempt joins it, and that a later harness removes only the
folders of harnesses that are gone (never anything else)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from crashpoint._proc import _memcg


def test_without_a_memory_hierarchy_it_says_why() -> None:
    with pytest.raises(ValueError, match="no cgroup v1 memory hierarchy is mounted"):
        _memcg._base([])
    mounts = [("/", "/nonexistent/cg2", "cgroup2", "rw")]
    with pytest.raises(ValueError, match="cannot read") as info:
        _memcg._base(mounts)
    assert "no cgroup v1 memory hierarchy is mounted" in str(info.value)
    # ours is found in /proc/self/cgroup, but the folder has no subtree_control to read
    assert "cannot read /nonexistent/cg2" in str(info.value)


def test_an_attempt_joins_its_cgroup_before_the_agent_runs(tmp_path: Path) -> None:
    cg = object.__new__(_memcg.MemoryCgroup)
    cg.procs = str(tmp_path / "cgroup.procs")
    argv = cg.wrap(["/bin/sh", "-c", "echo $$ > " + str(tmp_path / "agent.pid")])
    out = subprocess.run(argv, check=True, timeout=10)
    assert out.returncode == 0
    joined = (tmp_path / "cgroup.procs").read_text().split()
    # the shell wrote its own pid, then exec'd the agent: the same process
    assert joined == (tmp_path / "agent.pid").read_text().split()


def test_stale_owner_folders_of_gone_harnesses_are_removed_and_nothing_else(
    tmp_path: Path,
) -> None:
    ns = _memcg._pid_ns()
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"{_memcg._PREFIX}{ns}-{gone.pid}-abc123"
    (dead / "a-1-def456").mkdir(parents=True)
    mine = tmp_path / f"{_memcg._PREFIX}{ns}-{os.getpid()}-abc123"
    mine.mkdir()
    other_ns = tmp_path / f"{_memcg._PREFIX}1-{gone.pid}-abc123"
    other_ns.mkdir()
    foreign = tmp_path / "someone-else"
    foreign.mkdir()
    _memcg._reap_stale(str(tmp_path))
    assert not dead.exists()
    assert mine.exists()
    assert other_ns.exists()  # another pid namespace: its pid means nothing here
    assert foreign.exists()


@pytest.mark.skipif(bool(_memcg.memory_cgroup_support()), reason="no writable memory cgroup")
def test_a_cgroup_is_made_under_ours_and_removed() -> None:
    base, _version = _memcg._base()
    cg, why = _memcg.memory_cgroup()
    assert cg is not None, why
    assert cg.folder.startswith(base + os.sep)
    assert cg.set_limit(64 << 20) == 64 << 20
    assert cg.use().limit == 64 << 20
    assert cg.close()
    assert not os.path.exists(cg.folder)
