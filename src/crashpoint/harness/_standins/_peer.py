"""Who is on the other end of a loopback connection: the trial's own process, or not.

The stand-in services listen on ``127.0.0.1``, where every local user can connect. What admits
a request is where it comes from, not a secret in the URL (a URL is in the agent's command line,
and ``/proc/*/cmdline`` is readable by everyone): the client's TCP port names its socket in
the kernel's socket table (its inode and the uid that opened it: one ``sock_diag`` netlink
lookup, else ``/proc/net/tcp``), and the process holding that socket belongs to one of the
trial's attempts when it descends from the attempt's leader (found cheaply, walking down the
trial's own process tree), or, looked for across the machine when that fails, runs in that
attempt's session or process group (each attempt is started in its own; its children inherit
both) or has a parent chain that reaches one that does.

:func:`identify` answers with a :class:`Peer`: ``attempt`` (the trial's, or None), ``uid``
(the socket owner's, None when unknown), ``known`` (False when the machine cannot tell: no
``/proc``, the socket already gone). Linux only, standard library only.

:func:`attempt_of` is the old question (which attempt, if any) for attribution while two
attempts run at once (``resumers``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
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


_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_LOOPBACK = socket.inet_aton("127.0.0.1")


def _diag_owner(client_port: int, server_port: int) -> tuple[str, int] | None:
    """(inode, uid) of the IPv4 loopback socket 127.0.0.1:client_port -> :server_port, asked
    of the kernel by netlink (``sock_diag``: one exact lookup, where reading /proc/net/tcp
    walks every socket of the machine). None if there is no such socket; OSError if the
    kernel does not answer this way."""
    sockid = (
        struct.pack(">HH", client_port, server_port)
        + _LOOPBACK
        + bytes(12)
        + _LOOPBACK
        + bytes(12)
        + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF)  # any interface, no cookie
    )
    req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0) + req
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG) as nl:
        nl.settimeout(2.0)
        nl.sendto(msg, (0, 0))
        data = nl.recv(8192)
    if len(data) < 16:
        raise OSError("short netlink reply")
    kind = struct.unpack_from("=H", data, 4)[0]
    if kind != _SOCK_DIAG_BY_FAMILY:  # NLMSG_ERROR: -ENOENT when there is no such socket
        err = struct.unpack_from("=i", data, 16)[0] if len(data) >= 20 else -1
        if err == -2:
            return None
        raise OSError(-err, "sock_diag refused the lookup")
    # nlmsghdr (16), then inet_diag_msg: family..retrans (4), sockid (48), expires, rqueue,
    # wqueue (12), uid, inode
    uid, inode = struct.unpack_from("=II", data, 16 + 4 + 48 + 12)
    return (str(inode), uid) if inode else None


def socket_owner(client_port: int, server_port: int) -> tuple[str, int] | None:
    """(inode, uid) of the loopback socket whose local port is ``client_port`` and whose peer
    port is ``server_port`` (the client side of a connection to us), or None."""
    with contextlib.suppress(OSError, ValueError, struct.error):
        return _diag_owner(client_port, server_port)
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


def _children(pid: int) -> list[int]:
    """The children of every thread of ``pid`` (a child belongs to the thread that made it)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        with (
            contextlib.suppress(OSError, ValueError),
            open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh,
        ):
            out += [int(x) for x in fh.read().split()]
    return out


def _in_trees(inode: str, groups: Mapping[int, int]) -> tuple[int | None, int | None]:
    """(attempt, pid) found by walking down from each attempt's leader (started in a session
    of its own: its pid is the group's and the session's id): the processes of the trial only,
    not the machine's. Misses a process whose parent chain to the leader is broken (an orphan)."""
    target = f"socket:[{inode}]"
    for attempt, root in groups.items():
        st = _stat(root)
        if st is None or st[2] != root:  # gone, or a pid reused by something else
            continue
        seen: set[int] = set()
        frontier = [root]
        while frontier and len(seen) < 4096:
            pid = frontier.pop()
            if pid in seen:
                continue
            seen.add(pid)
            if _holds(pid, target):
                return attempt, pid
            frontier += _children(pid)
    return None, None


def _find(inode: str, groups: Mapping[int, int], ancestry: bool) -> tuple[int | None, int | None]:
    """(attempt, pid holding the socket): first among the descendants of each attempt's
    leader (cheap); with ``ancestry``, then among every process of ``groups``' sessions and
    process groups, and any process (of this user) whose parent chain reaches one of them.
    That costs one ``stat`` read per process of the machine."""
    found = _in_trees(inode, groups)
    if found[0] is not None or not ancestry:
        return found
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
    return _find(owner[0], groups, ancestry=True)[0]
