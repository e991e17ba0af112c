"""A process as if on a host of its own (``resumers: {hosts: true}``).

:func:`on_own_host` wraps an argv in ``unshare``: a pid namespace of its own (with ``/proc``
mounted for it, so pids and start times read there are its own), and a UTS namespace whose
host name it sets. A library that tells a dead lock holder on *this* machine from one on
another by boot id and pid namespace (the reference library's PostgreSQL store does) then sees
each such process as another machine's: only its lease and heartbeat count, as across hosts.
The network is the machine's (the harness's proxy and stand-ins stay reachable on loopback).

:func:`hosts_unavailable` says why it cannot be done here (no ``unshare``, not root and no
user namespaces), tried once per process. Standard library only.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

__all__ = ["hosts_unavailable", "on_own_host"]

#: sets the host name (when it can), then becomes the agent: ``sh -c SCRIPT NAME ARGV...``
_SCRIPT = 'hostname "$0" 2>/dev/null || true; exec "$@"'


def _unshare_argv() -> list[str]:
    unshare = shutil.which("unshare") or "unshare"
    base = [unshare, "--pid", "--fork", "--mount-proc", "--uts"]
    if os.geteuid() != 0:  # an unprivileged user: its own user namespace, mapped to root
        base.insert(1, "--map-root-user")
    return base


@functools.cache
def hosts_unavailable() -> str | None:
    """Why a process cannot run as on a host of its own here, or None."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    if shutil.which("sh") is None:
        return "no sh on PATH"
    try:
        done = subprocess.run(
            [*_unshare_argv(), "sh", "-c", 'test "$$" = 1'],
            capture_output=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare could not be run: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return (
            "a pid namespace of its own cannot be made here (needs root or unprivileged user "
            f"namespaces): {why[-1] if why else f'unshare exited {done.returncode}'}"
        )
    return None


def on_own_host(argv: list[str], name: str) -> list[str]:
    """``argv`` run as on a host named ``name`` (see the module doc)."""
    return [*_unshare_argv(), "sh", "-c", _SCRIPT, name, *argv]
