"""Run a command to its end in a session of its own, and kill that whole session after it.

``subprocess.run(..., timeout=...)`` kills only the direct child on a timeout: a gate's agents,
a browser's renderers or a script's background jobs would outlive the test. :func:`run_reaped`
starts the command with ``start_new_session=True`` and, on a timeout and after every run,
SIGKILLs its process group, so nothing it started outlives it (a timeout is re-raised).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def run_reaped(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end (text output captured), its whole session killed after it."""
    p = subprocess.Popen(
        [str(a) for a in argv],
        cwd=Path(cwd) if cwd is not None else None,
        env=dict(env) if env is not None else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_session(p.pid)
        out, err = p.communicate()
        raise subprocess.TimeoutExpired(p.args, timeout, out, err) from None
    finally:
        _kill_session(p.pid)  # whatever it left running in its session
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def _kill_session(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
