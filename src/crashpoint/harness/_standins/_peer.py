"""Which attempt sent a loopback HTTP request that does not say so: found by its socket.

An unmodified SDK sends no ``X-Crashpoint-Attempt`` header. While one attempt runs, its requests
are that attempt's; while two run at once (``resumers``), the ledger asks :func:`attempt_of`:
the client's TCP port names a socket in ``/proc/net/tcp`` (its inode), and the process holding
that socket belongs to one attempt's session or process group (each attempt is started in its
own). Linux only, standard library only; None when it cannot tell (another user's process, no
``/proc``), and the request then goes to the attempt started last, as before.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping

__all__ = ["attempt_of"]


def _socket_inode(client_port: int, server_port: int) -> str | None:
    """The inode of the loopback socket whose local port is ``client_port`` and whose peer
    port is ``server_port`` (the client side of a connection to us), or None."""
    want_local, want_remote = f"{client_port:04X}", f"{server_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii", errors="replace") as fh:
                next(fh, None)  # the header line
                for line in fh:
                    cols = line.split()
                    if len(cols) < 10:
                        continue
                    local, remote = cols[1].rsplit(":", 1), cols[2].rsplit(":", 1)
                    if local[-1] == want_local and remote[-1] == want_remote and cols[9] != "0":
                        return cols[9]
        except OSError:
            continue
    return None


def _group_and_session(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) "
    try:
        return int(fields[2]), int(fields[3])  # pgrp, session
    except (IndexError, ValueError):
        return None


def _holds(pid: int, target: str) -> bool:
    folder = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(folder)
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"{folder}/{fd}") == target:
                return True
    return False


def attempt_of(client_port: int, server_port: int, groups: Mapping[int, int]) -> int | None:
    """The attempt (a key of ``groups``: attempt -> the process group/session it was started
    in) whose process holds the client end of the loopback connection from ``client_port`` to
    ``server_port``; None if none can be found."""
    inode = _socket_inode(client_port, server_port)
    if inode is None or not groups:
        return None
    by_group = {g: a for a, g in groups.items()}
    target = f"socket:[{inode}]"
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    for pid in pids:
        ids = _group_and_session(pid)
        if ids is None:
            continue
        attempt = by_group.get(ids[0], by_group.get(ids[1]))
        if attempt is not None and _holds(pid, target):
            return attempt
    return None
