"""The suite's own ``children`` fixture: a child's tree (what teardown kills) holds a daemon that
left both the child's tree and its session but kept its stdout pipe, and nothing that started
before the child."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import psutil
from tests.conftest import Children

DAEMON = """
    import os, sys, time
    r, w = os.pipe()
    if os.fork() == 0:            # the intermediate
        os.setsid()
        if os.fork() == 0:        # the daemon: stdout (the test's pipe) still open
            os.close(r)
            os.write(w, str(os.getpid()).encode())
            os.close(w)
            time.sleep(60)
        os._exit(0)
    os.close(w)
    print(os.read(r, 32).decode(), flush=True)
    time.sleep(60)
"""


def test_a_daemon_holding_the_pipe_is_in_the_tree_and_an_older_process_is_not(
    tmp_path: Path,
) -> None:
    older = psutil.Process(os.getppid())  # started long before the child; holds none of its pipes
    script = tmp_path / "daemon.py"
    script.write_text(textwrap.dedent(DAEMON))
    spawner = Children()
    try:
        child = spawner.python(script)
        daemon = int(child.read_line() or "0")
        assert os.getsid(daemon) not in (child.pid, os.getsid(0))  # out of the session
        found = {p.pid for p in child.tree()}
        assert child.pid in found
        assert daemon in found
        assert older.pid not in found
        spawner.reap_all()
        assert not psutil.pid_exists(daemon) or psutil.Process(daemon).status() == "zombie"
    finally:
        assert spawner.reap_all() == []
