"""Who is on the other end of a loopback connection: the trial's own process, or not.

The stand-in services listen on ``127.0.0.1``, where every local user can connect. What admits
a request is where it comes from, not a secret in the URL (a URL is in the agent's command line,
and ``/proc/*/cmdline`` is readable by everyone): the client's TCP port names its socket in
``/proc/net/tcp`` (its inode and the uid that opened it), and the process holding that socket
belongs to one of the trial's attempts when it runs in that attempt's session or process group
(each attempt is started in its own; its children inherit both), or descends from a process
that does (a child that started a session of its own).

:func:`identify` answers with a :class:`Peer`: ``attempt`` (the trial's, or None), ``uid``
(the socket owner's, None when unknown), ``known`` (False when the machine cannot tell: no
``/proc``, the socket already gone). Linux only, standard library only.

:func:`attempt_of` is the old question (which attempt, if any) for attribution while two
attempts run at once (``resumers``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["Peer", "attempt_of", "identify", "socket_owner"]

#: How far up the parent chain a process is followed to find one of the trial's attempts.
MAX_ANCESTRY = 64


@dataclass(frozen=True)
class Peer:
    """What :func:`identify` found about the client end of a loopback connection."""

    #: the trial's attempt whose process holds it (None: not the trial's, or unknown)
    attempt: int | None = None
    #: the uid that opened the client socket (None: unknown)
    uid: int | None = None
    #: the client socket was found in /proc/net/tcp (False: nothing can be told)
    known: bool = False
    #: the pid holding the client socket, when it was looked for and found
    pid: int | None = None

    @property
    def other_user(self) -> bool:
        """The client socket belongs to another user than this process's."""
        return self.uid is not None and self.uid != os.geteuid()

    def describe(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else "a process"
        if not self.known:
            return "a client the machine cannot identify (no /proc/net/tcp entry)"
        if self.other_user:
            return f"{who} of another user (uid {self.uid})"
        if self.attempt is not None:
            return f"{who} of attempt {self.attempt}"
        return f"{who} outside the trial (uid {self.uid})"


def socket_owner(client_port: int, server_port: int) -> tuple[str, int] | None:
    """(inode, uid) of the loopback socket whose local port is ``client_port`` and whose peer
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
                        try:
                            return cols[9], int(cols[7])
                        except ValueError:
                            return None
        except OSError:
            continue
    return None


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgrp, session) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) "
    try:
        return int(fields[1]), int(fields[2]), int(fields[3])
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


def _pids() -> list[int]:
    try:
        return [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []


def _find(inode: str, groups: Mapping[int, int], ancestry: bool) -> tuple[int | None, int | None]:
    """(attempt, pid holding the socket) among the processes of ``groups``' sessions and
    process groups; with ``ancestry``, also any process (of this user) whose parent chain
    reaches one of them (a child that left the session). Costs one ``stat`` read per process,
    and a look at the descriptors of the candidates only."""
    by_group = {g: a for a, g in groups.items()}
    target = f"socket:[{inode}]"
    stats: dict[int, tuple[int, int, int]] = {}
    for pid in _pids():
        st = _stat(pid)
        if st is None:
            continue
        stats[pid] = st
        attempt = by_group.get(st[1], by_group.get(st[2]))
        if attempt is not None and _holds(pid, target):
            return attempt, pid
    if not ancestry:
        return None, None
    me = os.geteuid()
    for pid, st in stats.items():
        if by_group.get(st[1], by_group.get(st[2])) is not None:
            continue  # looked at above
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{pid}").st_uid != me:
                continue
        if not _holds(pid, target):
            continue
        parent, hops = st[0], 0
        while parent > 1 and hops < MAX_ANCESTRY:
            pst = stats.get(parent) or _stat(parent)
            if pst is None:
                break
            attempt = by_group.get(pst[1], by_group.get(pst[2]))
            if attempt is not None:
                return attempt, pid
            parent, hops = pst[0], hops + 1
        return None, pid
    return None, None


def identify(
    client_port: int, server_port: int, groups: Mapping[int, int], *, ancestry: bool = False
) -> Peer:
    """Who holds the client end of the loopback connection from ``client_port`` to
    ``server_port``: an attempt of ``groups`` (attempt -> the process group/session it was
    started in), another user, or a process outside the trial. ``ancestry`` also follows the
    parent chain of this user's processes (slower: for a connection not found otherwise)."""
    owner = socket_owner(client_port, server_port)
    if owner is None:
        return Peer()
    inode, uid = owner
    if uid != os.geteuid() or not groups:
        return Peer(uid=uid, known=True)
    attempt, pid = _find(inode, groups, ancestry)
    return Peer(attempt=attempt, uid=uid, known=True, pid=pid)


def attempt_of(client_port: int, server_port: int, groups: Mapping[int, int]) -> int | None:
    """The attempt (a key of ``groups``: attempt -> the process group/session it was started
    in) whose process holds the client end of the loopback connection from ``client_port`` to
    ``server_port``; None if none can be found."""
    owner = socket_owner(client_port, server_port)
    if owner is None or not groups:
        return None
    return _find(owner[0], groups, ancestry=False)[0]
