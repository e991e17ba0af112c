"""Who writes the top-level entries of a few folders: fanotify, as root, on Linux.

The harness lists the system temporary folders before and after a trial and reports the entries
its own processes made or changed there. Owner and time cannot tell the agent from another
process of the same user (on a CI runner every job is root), so where the kernel allows it a
:class:`WriterWatch` names the writer: one fanotify group (``FAN_REPORT_DFID_NAME``, kernel 5.9+,
``CAP_SYS_ADMIN``) with an inode mark on each watched folder and on each folder directly in it.
Every create, delete, rename, write or close-after-write there arrives with the writer's pid
and the entry's name; a reader thread looks the pid up at once (``/proc/PID/stat``: its
session, group and parent chain) and files the entry under the trial whose attempt leader
(:meth:`WriterWatch.track`) it descends from. A writer already gone when its event is read
is filed as *unknown* (the caller falls back to owner and time for those entries only); a lost
event (queue overflow) makes the watch *incomplete* until the next :meth:`WriterWatch.take`.

Marks are inode marks on the watched folders only: nothing outside them is watched, and
nothing is ever written or blocked (a notification group, not a permission one). Where
fanotify is missing (not root, another kernel, a container without the capability)
:func:`writer_watch` returns None and :func:`writer_watch_unavailable` says why.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import os
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["WriterWatch", "Writers", "open_watch", "writer_watch", "writer_watch_unavailable"]

_FAN_CLOEXEC = 0x1
_FAN_REPORT_DFID_NAME = 0x400 | 0x800
_FAN_MARK_ADD = 0x1
_FAN_MARK_DONT_FOLLOW = 0x4
_FAN_MARK_ONLYDIR = 0x8
_FAN_MODIFY = 0x2
_FAN_CLOSE_WRITE = 0x8
_FAN_MOVED_FROM = 0x40
_FAN_MOVED_TO = 0x80
_FAN_CREATE = 0x100
_FAN_DELETE = 0x200
_FAN_Q_OVERFLOW = 0x4000
_FAN_EVENT_ON_CHILD = 0x08000000
_FAN_ONDIR = 0x40000000
_MASK = (
    _FAN_MODIFY
    | _FAN_CLOSE_WRITE
    | _FAN_MOVED_FROM
    | _FAN_MOVED_TO
    | _FAN_CREATE
    | _FAN_DELETE
    | _FAN_EVENT_ON_CHILD
    | _FAN_ONDIR
)
_INFO_DFID_NAME = 2
_METADATA_VERSION = 3
_META = struct.Struct("=IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_AT_FDCWD = -100
#: At most this many folders are marked (the watched folders and the folders in them).
MAX_MARKS = 4096
#: Hops up a writer's parent chain looked at to find the attempt it belongs to.
MAX_ANCESTRY = 64
#: At most this many strangers (writers no trial's) are remembered between two attempts.
MAX_STRANGERS = 4096
#: Bytes of fanotify events the reader takes at a time.
_READ_SIZE = 64 * 1024


@dataclass
class Writers:
    """What a trial's processes were seen writing in the watched folders (top-level entries,
    absolute paths): ``mine``. ``unknown``: entries changed meanwhile by a process already gone
    when its event was read (it may have been the trial's); ``seen``: every entry any process
    changed meanwhile (an entry not in it changed unseen: a write through a mapping, a folder
    not marked); ``complete``: no event was lost meanwhile."""

    mine: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    complete: bool = True


def _raw_read(fd: int, size: int, buf: ctypes.Array[ctypes.c_char] | None = None) -> bytes:
    """``read(2)`` through libc, not ``os.read``: the reader thread runs beside tests that
    replace ``os`` and ``open`` with a fake filesystem (pyfakefs), whose descriptors have the
    same numbers as real ones. ``buf`` (at least ``size`` bytes): a buffer of the caller's to
    read into, used again call after call (the reader's). Raises BlockingIOError when
    nothing is queued."""
    libc = _libc()
    if libc is None:
        return os.read(fd, size)
    if buf is None:
        buf = ctypes.create_string_buffer(size)
    n = libc.read(fd, buf, size)
    if n < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err)) if err != errno.EAGAIN else BlockingIOError()
    return ctypes.string_at(buf, n)


def _proc_file(path: str) -> bytes | None:
    """A small /proc file read through libc (see :func:`_raw_read`), or None."""
    libc = _libc()
    if libc is None:
        return None
    fd = libc.open(os.fsencode(path), os.O_RDONLY | os.O_CLOEXEC)
    if fd < 0:
        return None
    try:
        return _raw_read(fd, 4096)
    except OSError:
        return None
    finally:
        libc.close(fd)


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgrp, session) of ``pid``, or None if it is gone."""
    text = _proc_file(f"/proc/{pid}/stat")
    if not text:
        return None
    fields = text[text.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _handle(path: str) -> bytes | None:
    """The file handle of the folder at ``path`` as fanotify reports it (type + bytes)."""
    libc = _libc()
    if libc is None:
        return None
    size = 128
    buf = ctypes.create_string_buffer(8 + size)
    struct.pack_into("=Ii", buf, 0, size, 0)
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(_AT_FDCWD, os.fsencode(path), buf, ctypes.byref(mount_id), 0):
        return None
    nbytes, kind = struct.unpack_from("=Ii", buf, 0)
    return struct.pack("=i", kind) + buf.raw[8 : 8 + nbytes]


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL | None:
    global _LIBC
    if _LIBC is None:
        try:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
            lib.fanotify_init.restype = ctypes.c_int
            lib.fanotify_mark.argtypes = [
                ctypes.c_int,
                ctypes.c_uint,
                ctypes.c_uint64,
                ctypes.c_int,
                ctypes.c_char_p,
            ]
            lib.fanotify_mark.restype = ctypes.c_int
            lib.read.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
            lib.read.restype = ctypes.c_ssize_t
            lib.open.argtypes = [ctypes.c_char_p, ctypes.c_int]
            lib.open.restype = ctypes.c_int
            lib.close.argtypes = [ctypes.c_int]
            lib.close.restype = ctypes.c_int
            lib.name_to_handle_at.argtypes = [
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_int),
                ctypes.c_int,
            ]
        except (OSError, AttributeError):
            return None
        _LIBC = lib
    return _LIBC


_NETLINK_CONNECTOR = 11
_CN_IDX_PROC = 1
_PROC_CN_MCAST_LISTEN = 1
_PROC_EVENT_FORK = 1
_NLMSG = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_SO_RCVBUFFORCE = 33
#: Forks of processes not (yet) known to be a trial's, kept this long: an attempt's leader is
#: named (:meth:`WriterWatch.track`) just after it starts, and it may fork before that.
RECENT_FORKS = 5.0


def _be32(value: int) -> int:
    """``value`` as a socket filter's 32-bit load sees it in a host-order field (the
    filter loads in network byte order)."""
    return int.from_bytes(struct.pack("=I", value), "big")


#: A classic socket filter for the process connector: keep only PROC_EVENT_FORK messages of a
#: process (child pid == child tgid), drop the rest in the kernel (exec, exit, comm, uid, and
#: forks of threads: most of a busy machine's traffic, each of which woke the reader). Offsets:
#: nlmsghdr (16) + cn_msg (20) -> what (36); fork data: child pid (60), child tgid (64).
_FORK_FILTER = (
    (0x20, 0, 0, 36),  # ld  [36]          what
    (0x15, 0, 5, _be32(_PROC_EVENT_FORK)),  # jeq #FORK, else drop
    (0x20, 0, 0, 64),  # ld  [64]          child tgid
    (0x02, 0, 0, 0),  # st  M[0]
    (0x61, 0, 0, 0),  # ldx M[0]
    (0x20, 0, 0, 60),  # ld  [60]          child pid
    (0x1D, 1, 0, 0),  # jeq x -> keep
    (0x06, 0, 0, 0),  # ret #0             drop
    (0x06, 0, 0, 0xFFFFFFFF),  # ret #-1   keep whole
)
_SO_ATTACH_FILTER = 26


def _only_process_forks(sock: socket.socket) -> bool:
    """Attach :data:`_FORK_FILTER` to ``sock``; False (every message still arrives, and
    :meth:`_Lineage.pump` skips the others itself) where the kernel refuses it."""
    prog = b"".join(struct.pack("=HBBI", *ins) for ins in _FORK_FILTER)
    code = ctypes.create_string_buffer(prog, len(prog))
    fprog = struct.pack("@HP", len(_FORK_FILTER), ctypes.addressof(code))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    except OSError:
        return False
    return True


class _Lineage:
    """Who forked whom, from the kernel's process connector (netlink, as root): a process
    forked by a trial's process is the trial's, even when it has ended before its write is
    read, or has left the session (a daemon). Callers hold the watch's lock."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.members: dict[int, Hashable] = {}  # pid -> trial key
        self.recent: deque[tuple[float, int, int]] = deque(maxlen=65_536)
        self.lost = 0.0  # when a message was last lost (0: never)

    @classmethod
    def open(cls) -> _Lineage | None:
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_CONNECTOR)
        except (OSError, AttributeError):
            return None
        try:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, 8 << 20)
            sock.bind((0, _CN_IDX_PROC))
            _only_process_forks(sock)
            op = struct.pack("=I", _PROC_CN_MCAST_LISTEN)
            cn = struct.pack("=IIIIHH", _CN_IDX_PROC, 1, 0, 0, len(op), 0) + op
            sock.send(_NLMSG.pack(_NLMSG.size + len(cn), 3, 0, 0, 0) + cn)
            sock.setblocking(False)
        except OSError:
            sock.close()
            return None
        return cls(sock)

    def pump(self) -> None:
        """File every fork queued now."""
        now = time.time()
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            except InterruptedError:
                continue
            except OSError as exc:
                self.lost = now
                if exc.errno == errno.ENOBUFS:  # the kernel dropped messages: read on
                    continue
                return  # closed, or broken: nothing more will come
            off = 0
            while off + _NLMSG.size <= len(data):
                length = _NLMSG.unpack_from(data, off)[0]
                if length < _NLMSG.size:
                    break
                ev = off + _NLMSG.size + 20  # after the cn_msg header
                if length >= 52 and struct.unpack_from("=I", data, ev)[0] == _PROC_EVENT_FORK:
                    _pp, ptgid, cpid, ctgid = struct.unpack_from("=IIII", data, ev + 16)
                    if cpid == ctgid:  # a process, not a thread
                        self.fork(ptgid, ctgid, now)
                off += (length + 3) & ~3

    def fork(self, parent: int, child: int, now: float) -> None:
        key = self.members.get(parent)
        if key is not None:
            self.members[child] = key
        else:
            self.members.pop(child, None)  # a pid used again by someone else
            self.recent.append((now, parent, child))

    def adopt(self, key: Hashable, leader: int) -> None:
        """``leader`` is ``key``'s, and so is what it forked before it was named."""
        self.pump()
        self.members[leader] = key
        horizon = time.time() - RECENT_FORKS
        tail: list[tuple[int, int]] = []
        for t, parent, child in reversed(self.recent):
            if t < horizon:
                break
            tail.append((parent, child))
        for parent, child in reversed(tail):  # in the order they forked
            if self.members.get(parent) == key:
                self.members[child] = key

    def drop(self, key: Hashable) -> None:
        self.members = {p: k for p, k in self.members.items() if k != key}


class WriterWatch:
    """One fanotify group watching ``roots`` (folders) and the folders directly in them; see the
    module's text. ``skip``: name prefixes of entries never marked (the harness's own)."""

    def __init__(
        self,
        fd: int,
        roots: Iterable[str],
        skip: tuple[str, ...] = (),
        lineage: _Lineage | None = None,
    ) -> None:
        self._fd = fd
        self._lineage = lineage
        self._skip = skip
        self._lock = threading.Lock()
        self._dirs: dict[bytes, tuple[str, str]] = {}  # handle -> (folder, its top entry)
        self._roots: dict[int, Hashable] = {}  # attempt leader (its session) -> trial key
        self._found: dict[Hashable, Writers] = {}
        self._unknown: dict[str, float] = {}  # entry -> when a gone writer last changed it
        self._seen: dict[str, float] = {}  # entry -> when anyone last changed it
        # (when, pid, entry) changed by a process no trial claimed when its event was read: an
        # attempt's leader is named (track) after it starts, and a fast one's children may have
        # written and ended before; the leader's adopt() then claims them, and so their entries
        self._pending: deque[tuple[float, int, str]] = deque(maxlen=65_536)
        self._lost = 0.0  # when an event was last lost (0: never)
        # pids whose whole parent chain, up to init, is no trial's (nor their sessions and
        # groups): a stranger stays one (a process cannot move into an attempt's tree; a pid
        # used again by an attempt's process is in the lineage, looked at first) until a new
        # attempt is named (track: it may be a stranger's descendant named late). Kept only
        # with the lineage; a busy stranger's writes are not each a walk of /proc.
        self._strangers: set[int] = set()
        self._closed = False
        self._busy = threading.Lock()  # held while a batch is read and filed
        self.marks = 0
        for root in roots:
            self._mark(root, "")
            with contextlib.suppress(OSError), os.scandir(root) as it:
                for e in it:
                    if not e.name.startswith(skip) and e.is_dir(follow_symlinks=False):
                        self._mark(e.path, e.path)
        os.set_blocking(fd, False)
        self._waits = [fd] + ([lineage.sock.fileno()] if lineage is not None else [])
        self._thread = threading.Thread(target=self._read, name="crashpoint-writers", daemon=True)
        self._thread.start()

    # -- marks ---------------------------------------------------------------------------------

    def _mark(self, path: str, top: str) -> None:
        libc = _libc()
        if libc is None or self.marks >= MAX_MARKS:
            return
        h = _handle(path)
        flags = _FAN_MARK_ADD | _FAN_MARK_DONT_FOLLOW | _FAN_MARK_ONLYDIR
        if h is None or libc.fanotify_mark(self._fd, flags, _MASK, _AT_FDCWD, os.fsencode(path)):
            return
        with self._lock:
            self._dirs[h] = (path, top)
            self.marks += 1

    # -- who is who ----------------------------------------------------------------------------

    def begin(self, key: Hashable) -> None:
        """A trial (``key``) begins: what changes from now on is kept until its :meth:`take`."""
        with self._lock:
            self._found.setdefault(key, Writers())

    def track(self, key: Hashable, leader: int) -> None:
        """The attempt started as ``leader`` (in a session of its own) belongs to ``key``."""
        with self._lock:
            self._roots[leader] = key
            self._strangers.clear()
            self._found.setdefault(key, Writers())
            if self._lineage is not None:
                self._lineage.adopt(key, leader)
                self._settle()

    def _settle(self) -> None:
        """File the pending entries whose writer a trial has claimed since (its fork lineage
        now names the pid); drop those older than the forks adopt() replays. Under the lock."""
        lineage = self._lineage
        if lineage is None or not self._pending:
            return
        horizon = time.time() - RECENT_FORKS
        keep: deque[tuple[float, int, str]] = deque(maxlen=self._pending.maxlen)
        for t, pid, entry in self._pending:
            if t < horizon:
                continue
            key = lineage.members.get(pid)
            if key is not None and key in self._found:
                self._found[key].mine.add(entry)
            else:
                keep.append((t, pid, entry))
        self._pending = keep

    def take(self, key: Hashable, since: float) -> Writers:
        """What ``key``'s processes wrote (and forget it): its entries, the entries written by
        processes gone before they could be told apart since ``since`` (wall clock), and
        whether an event was lost since then. Waits briefly for events still queued."""
        self._drain()
        with self._lock:
            if self._lineage is not None:
                self._lineage.pump()
                self._settle()
            out = self._found.pop(key, Writers())
            self._roots = {pid: k for pid, k in self._roots.items() if k != key}
            lost = self._lost
            if self._lineage is not None:
                self._lineage.drop(key)
                lost = max(lost, self._lineage.lost)
            out.unknown = {p for p, t in self._unknown.items() if t >= since - 1.0}
            out.seen = {p for p, t in self._seen.items() if t >= since - 1.0}
            if not self._found:  # nobody is left to ask about what came before
                self._unknown.clear()
                self._seen.clear()
                self._pending.clear()
            out.complete = lost < since - 1.0 and not self._closed
        return out

    def forget(self, key: Hashable) -> None:
        """Drop ``key`` without asking (a trial that ended early)."""
        with self._lock:
            self._found.pop(key, None)
            self._roots = {pid: k for pid, k in self._roots.items() if k != key}
            if self._lineage is not None:
                self._lineage.drop(key)
            if not self._found:
                self._unknown.clear()
                self._seen.clear()
                self._pending.clear()

    def _owner(self, pid: int) -> Hashable | None:
        """The trial key of the attempt ``pid`` belongs to; ``...`` if it is gone and nothing
        can tell (no process connector)."""
        roots = self._roots
        lineage = self._lineage
        if lineage is not None:
            if pid in lineage.members:
                return lineage.members[pid]
            lineage.pump()  # forked since the last look
            if pid in lineage.members:
                return lineage.members[pid]
            if pid in self._strangers:
                return None
        writer = pid
        st = _stat(pid)
        if st is None:
            return ... if lineage is None else None
        for hop in range(MAX_ANCESTRY):
            if pid in roots:
                return roots[pid]
            if st[2] in roots:
                return roots[st[2]]
            if st[1] in roots:
                return roots[st[1]]
            if st[0] <= 1 and lineage is not None and len(self._strangers) < MAX_STRANGERS:
                self._strangers.add(writer)  # its whole chain seen: a stranger
            if st[0] <= 1 or hop == MAX_ANCESTRY - 1:
                return None
            pid = st[0]
            nxt = _stat(pid)
            if nxt is None:
                return None
            st = nxt
        return None

    # -- the reader ----------------------------------------------------------------------------

    def _drain(self) -> None:
        """Let the reader file what is queued now (the kernel queues an event within the call
        that caused it): wait until nothing is queued, at most a second. The reader reads and
        files under ``_busy``, so "nothing queued" seen under it means all was filed."""
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and self._thread.is_alive():
            with self._busy, contextlib.suppress(OSError, ValueError):
                if not select.select([self._fd], [], [], 0)[0]:
                    return
            time.sleep(0.002)

    def _read(self) -> None:
        space = ctypes.create_string_buffer(_READ_SIZE) if _libc() is not None else None
        while not self._closed:
            try:
                ready = select.select(self._waits, [], [], 1.0)[0]  # the reader's own thread
                with self._busy:
                    if self.closed:  # closed meanwhile: the number may be another file's now
                        break
                    if self._lineage is not None:
                        with self._lock:  # who forked whom before who wrote what
                            self._lineage.pump()
                    if self._fd not in ready:  # only forks came: no write to file
                        continue
                    buf = _raw_read(self._fd, _READ_SIZE, space)
                    if buf and not self._file(buf):
                        break  # not fanotify's: the descriptor is no longer ours
            except BlockingIOError:
                continue
            except InterruptedError:
                continue
            except (OSError, ValueError):
                break

    def _file(self, buf: bytes) -> bool:
        """File a batch of events; False (and the watch stops, every trial since incomplete)
        if it is not fanotify's."""
        off = 0
        now = time.time()
        while off + _META.size <= len(buf):
            length, vers, _r, meta_len, mask, _fd, pid = _META.unpack_from(buf, off)
            if vers != _METADATA_VERSION or meta_len != _META.size or length < _META.size:
                self._lost = float("inf")
                self._closed = True
                return False
            if mask & _FAN_Q_OVERFLOW:
                self._lost = now
            else:
                for folder, top, name in self._names(buf, off + meta_len, off + length):
                    entry = top or os.path.join(folder, name)
                    self._note(pid, entry, now)
                    if (
                        not top
                        and mask & (_FAN_CREATE | _FAN_MOVED_TO)
                        and mask & _FAN_ONDIR
                        and not name.startswith(self._skip)
                    ):
                        self._mark(entry, entry)  # a new folder: see what is made in it
            off += length
        return True

    def _names(self, buf: bytes, off: int, end: int) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        while off + 4 <= end:
            kind, _pad, size = struct.unpack_from("=BBH", buf, off)
            if size < 4:
                break
            if kind == _INFO_DFID_NAME and size > 20:
                nbytes, htype = struct.unpack_from("=Ii", buf, off + 12)
                handle = struct.pack("=i", htype) + buf[off + 20 : off + 20 + nbytes]
                raw = buf[off + 20 + nbytes : off + size].split(b"\0", 1)[0]
                where = self._dirs.get(handle)
                if where is not None and raw not in (b"", b".", b".."):
                    out.append((where[0], where[1], os.fsdecode(raw)))
            off += size
        return out

    def _note(self, pid: int, entry: str, now: float) -> None:
        with self._lock:
            if not self._found:
                return  # no trial runs: nobody will ask
            self._seen[entry] = now
            key = self._owner(pid)
            if key is ...:
                self._unknown[entry] = now
            elif key is not None:
                self._found.setdefault(key, Writers()).mine.add(entry)
            elif self._lineage is not None:
                self._pending.append((now, pid, entry))

    @property
    def closed(self) -> bool:
        """Stopped (:meth:`close`, or its descriptor turned out not to be fanotify's)."""
        return self._closed

    def close(self) -> None:
        """Stop watching (the reader ends with the descriptor)."""
        with self._busy:  # never while the reader reads: it must not read a reused number
            self._closed = True
            libc = _libc()
            if libc is not None:
                libc.close(self._fd)
            if self._lineage is not None:
                self._lineage.sock.close()


_WATCH: WriterWatch | None = None
_WHY: str | None = None
_START = threading.Lock()


def open_watch(
    roots: Iterable[str], skip: tuple[str, ...] = (), lineage: bool = True
) -> tuple[WriterWatch | None, str]:
    """A new :class:`WriterWatch` over ``roots`` (with the process connector where it opens,
    unless ``lineage`` is False), or (None, why not)."""
    roots = [r for r in roots if os.path.isdir(r) and not os.path.islink(r)]
    libc = _libc()
    if libc is None or not hasattr(libc, "fanotify_init"):
        return None, "fanotify is not available on this system"
    fd = libc.fanotify_init(_FAN_CLOEXEC | _FAN_REPORT_DFID_NAME, os.O_RDONLY)
    if fd < 0:
        err = ctypes.get_errno()
        if err in (errno.EPERM, errno.EACCES):
            return None, "fanotify needs root (CAP_SYS_ADMIN)"
        return None, f"fanotify_init failed: {os.strerror(err)}"
    watch = WriterWatch(fd, roots, skip, _Lineage.open() if lineage else None)
    if not any(folder == r for r in roots for folder, _t in watch._dirs.values()):
        watch.close()
        return None, "fanotify cannot mark the temporary folders here (no file handles?)"
    return watch, ""


def writer_watch(roots: Iterable[str], skip: tuple[str, ...] = ()) -> WriterWatch | None:
    """This process's :class:`WriterWatch` over ``roots`` (started on first use and kept), or
    None where fanotify cannot name writers here (:func:`writer_watch_unavailable` says why;
    ``CRASHPOINT_NO_FANOTIFY=1`` switches it off)."""
    global _WATCH, _WHY
    with _START:
        if _WATCH is not None or _WHY is not None:
            return _WATCH
        if os.environ.get("CRASHPOINT_NO_FANOTIFY", "").lower() not in ("", "0", "false", "no"):
            _WHY = "CRASHPOINT_NO_FANOTIFY is set"
            return None
        _WATCH, why = open_watch(roots, skip)
        _WHY = why or None
        if _WATCH is not None:  # its descriptor and socket are closed, not left to the GC
            atexit.register(_WATCH.close)
        return _WATCH


def writer_watch_unavailable() -> str | None:
    """Why :func:`writer_watch` returned None (None if it did not, or was not called)."""
    return _WHY
