"""A memory cgroup per attempt, for the harness's memory-exhaustion fault.

An attempt under a ``memory`` fault runs in a memory cgroup of its own, made under this process's
own memory cgroup (never anywhere else): the cgroup v1 memory hierarchy where it is mounted
(``memory.limit_in_bytes``; its ``memory.oom_control`` counts the OOM kills, ``memory.failcnt``
the allocations refused at the limit), else cgroup v2 where the unified hierarchy gives our
cgroup the memory controller (``memory.max``; ``memory.events`` counts them). The fault sets a
limit from the start or squeezes it at a chosen point, and the kernel's OOM killer ends the
agent when it allocates past it.

Layout: ``<our memory cgroup>/crashpoint-mem-<pid ns>-<pid>-<hex>/a-<n>-<hex>``. The attempt's
folder is removed when the attempt ends (:meth:`MemoryCgroup.close`, in the engine's ``finally``:
after a Ctrl-C too), the owner folder at exit; a later harness removes the owner folders of
harnesses that are gone (by their pid). Where no writable memory cgroup exists (not root, no
memory controller, a read-only cgroupfs) :func:`memory_cgroup` says why, and the fault is
skipped with that reason.

A process joins the cgroup by writing its own pid to ``cgroup.procs`` before it runs the agent
(:meth:`MemoryCgroup.wrap`: ``sh -c 'echo $$ > .../cgroup.procs && exec "$@"'``); what it
starts is in the cgroup too. The attempt's other containment (its cgroup v2 or its session) is
unchanged: on a v1 machine the two are different hierarchies. Standard library only.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import re
import secrets
import signal
import threading
import time
from dataclasses import dataclass

__all__ = ["MemoryCgroup", "MemoryUse", "memory_cgroup", "memory_cgroup_support"]

_PREFIX = "crashpoint-mem-"
_PAGE = 4096
#: what a v2 cgroup folder holds when the memory controller is enabled in it
_V2_LIMIT, _V1_LIMIT = "memory.max", "memory.limit_in_bytes"


@dataclass(frozen=True)
class MemoryUse:
    """What the kernel counted in one attempt's memory cgroup: ``oom_kills`` (processes the
    OOM killer ended there), ``failcnt`` (charges refused at the limit; v2: times it hit
    ``memory.max``), ``peak`` (the highest usage in bytes, 0 where not kept), ``limit``."""

    oom_kills: int
    failcnt: int
    peak: int
    limit: int


def _mountinfo() -> list[tuple[str, str, str, str]]:
    """(root, mount point, fstype, super options) of each mount."""
    out = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                parts, rparts = left.split(), right.split()
                if len(parts) >= 5 and len(rparts) >= 3:
                    out.append((parts[3], parts[4].replace("\\040", " "), rparts[0], rparts[2]))
    except OSError:
        pass
    return out


def _own(controller: str) -> str | None:
    """This process's cgroup path in the hierarchy of ``controller`` ("" for v2's)."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8", errors="replace") as f:
            for line in f:
                _hid, ctrls, path = line.rstrip("\n").split(":", 2)
                if (controller and controller in ctrls.split(",")) or (
                    not controller and ctrls == "" and _hid == "0"
                ):
                    return path
    except (OSError, ValueError):
        pass
    return None


def _base(mounts: list[tuple[str, str, str, str]] | None = None) -> tuple[str, str]:
    """(our memory cgroup's folder, "v1" or "v2"), or raise ValueError saying why no memory
    cgroup can be made here. ``mounts``: the mounts to look at (default: this process's)."""
    mounts = _mountinfo() if mounts is None else mounts
    v1 = [(r, m) for r, m, t, o in mounts if t == "cgroup" and "memory" in o.split(",")]
    v2 = [(r, m) for r, m, t, _o in mounts if t == "cgroup2"]
    why = []
    for kind, found, own in (("v1", v1, _own("memory")), ("v2", v2, _own(""))):
        if not found:
            why.append(
                "no cgroup v1 memory hierarchy is mounted"
                if kind == "v1"
                else "no cgroup2 hierarchy is mounted"
            )
            continue
        if own is None:
            why.append(f"this process is in no {kind} memory cgroup")
            continue
        root, mount = found[0]
        rel = os.path.relpath(own, root) if own.startswith(root) else own.lstrip("/")
        folder = os.path.normpath(os.path.join(mount, "" if rel == "." else rel))
        if kind == "v2":  # our children must get the controller: it is delegated to them
            try:
                with open(os.path.join(folder, "cgroup.subtree_control")) as f:
                    if "memory" not in f.read().split():
                        why.append(
                            f"the cgroup v2 hierarchy does not give our cgroup's children the "
                            f"memory controller ({folder}/cgroup.subtree_control lacks memory: "
                            "run in a cgroup with it delegated, e.g. a container's own root)"
                        )
                        continue
            except OSError as exc:
                why.append(f"cannot read {folder}/cgroup.subtree_control: {exc.strerror}")
                continue
        if not os.access(folder, os.W_OK):
            why.append(
                f"our {kind} memory cgroup {folder} is not writable (run as root, or delegate it)"
            )
            continue
        return folder, kind
    raise ValueError("; ".join(why) or "no memory cgroup found")


_lock = threading.Lock()
_owner: tuple[int, str, str] | None = None  # (pid, folder, version)
_count = 0


def _pid_ns() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_stale(base: str) -> None:
    """Remove the owner folders of harnesses (in our pid namespace) that are gone."""
    pat = re.compile(re.escape(_PREFIX + _pid_ns()) + r"-(\d+)-[0-9a-f]+")
    with contextlib.suppress(OSError):
        for name in os.listdir(base):
            m = pat.fullmatch(name)
            if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
                _remove_tree(os.path.join(base, name))


def _members(folder: str) -> list[int]:
    out: list[int] = []
    for dirpath, _dirs, _files in os.walk(folder):
        with (
            contextlib.suppress(OSError, ValueError),
            open(os.path.join(dirpath, "cgroup.procs"), "rb") as f,
        ):
            out.extend(int(x) for x in f.read().split())
    return out


def _remove_tree(folder: str, timeout: float = 5.0) -> bool:
    """SIGKILL what is left in ``folder`` (a cgroup of ours), then remove it and its
    sub-cgroups (rmdir only: a cgroup's files go with it). True if it is gone."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _members(folder)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for dirpath, _dirs, _files in os.walk(folder, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
        if not os.path.isdir(folder) or time.monotonic() >= deadline:
            return not os.path.isdir(folder)
        time.sleep(0.005)


def _release() -> None:
    global _owner
    if _owner is not None and _owner[0] == os.getpid():
        _remove_tree(_owner[1], 2.0)
    _owner = None


def memory_cgroup_support() -> str:
    """ "" if an attempt can have a memory cgroup here, else why not (one line)."""
    try:
        _base()
    except ValueError as exc:
        return str(exc)
    return ""


class MemoryCgroup:
    """The memory cgroup of one attempt: made by :func:`memory_cgroup`, ended by
    :meth:`close`."""

    def __init__(self, folder: str, version: str) -> None:
        os.mkdir(folder, 0o755)
        self.folder = folder
        self.version = version
        self.procs = os.path.join(folder, "cgroup.procs")
        self._limit_file = os.path.join(folder, _V1_LIMIT if version == "v1" else _V2_LIMIT)

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this cgroup: a shell joins it, then becomes the agent."""
        return [
            "/bin/sh",
            "-c",
            'echo $$ > "$0" && exec "$@"',
            self.procs,
            *argv,
        ]

    def _read(self, name: str) -> str:
        try:
            with open(os.path.join(self.folder, name), encoding="ascii", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _field(self, name: str, key: str) -> int:
        for line in self._read(name).splitlines():
            k, _, v = line.partition(" ")
            if k == key and v.strip().isdigit():
                return int(v)
        return 0

    def usage(self) -> int:
        raw = self._read("memory.usage_in_bytes" if self.version == "v1" else "memory.current")
        return int(raw) if raw.strip().isdigit() else 0

    def set_limit(self, limit: int) -> int:
        """Set the cgroup's memory limit to ``limit`` bytes (whole pages); where it already
        uses more and the kernel refuses (v1: EBUSY), the limit is put at what it uses now, so
        its next allocation that reclaim cannot cover is refused. Returns the limit set."""
        want = max(_PAGE, -(-limit // _PAGE) * _PAGE)
        for attempt in range(8):
            value = want if attempt == 0 else max(want, -(-self.usage() // _PAGE) * _PAGE)
            try:
                with open(self._limit_file, "w", encoding="ascii") as f:
                    f.write(str(value))
                return value
            except OSError as exc:
                if exc.errno != errno.EBUSY:
                    raise
        raise OSError(errno.EBUSY, f"the kernel refused a memory limit of {want} bytes")

    def use(self) -> MemoryUse:
        """What the kernel counted (see :class:`MemoryUse`)."""
        if self.version == "v1":
            raw_limit = self._read(_V1_LIMIT).strip()
            peak = self._read("memory.max_usage_in_bytes").strip()
            fail = self._read("memory.failcnt").strip()
            return MemoryUse(
                self._field("memory.oom_control", "oom_kill"),
                int(fail) if fail.isdigit() else 0,
                int(peak) if peak.isdigit() else 0,
                int(raw_limit) if raw_limit.isdigit() else 0,
            )
        raw_limit = self._read(_V2_LIMIT).strip()
        peak = self._read("memory.peak").strip()
        return MemoryUse(
            self._field("memory.events", "oom_kill"),
            self._field("memory.events", "max"),
            int(peak) if peak.isdigit() else 0,
            int(raw_limit) if raw_limit.isdigit() else 0,
        )

    def close(self) -> bool:
        """Kill what is left in it and remove it. True if it is gone."""
        return _remove_tree(self.folder)

    def __repr__(self) -> str:
        return f"<MemoryCgroup {self.folder}>"


def memory_cgroup() -> tuple[MemoryCgroup | None, str]:
    """A new, empty memory cgroup for one attempt, or None and why not."""
    global _owner, _count
    with _lock:
        if _owner is None or _owner[0] != os.getpid():
            try:
                base, version = _base()
            except ValueError as exc:
                return None, str(exc)
            _reap_stale(base)
            folder = os.path.join(
                base, f"{_PREFIX}{_pid_ns()}-{os.getpid()}-{secrets.token_hex(3)}"
            )
            try:
                os.mkdir(folder, 0o755)
                if version == "v2":  # its children get the memory controller
                    with open(os.path.join(folder, "cgroup.subtree_control"), "w") as f:
                        f.write("+memory")
            except OSError as exc:
                _remove_tree(folder, 1.0)
                return None, f"cannot create a memory cgroup under {base}: {exc.strerror}"
            if _owner is None:
                atexit.register(_release)
            _owner = (os.getpid(), folder, version)
        _count += 1
        _pid, owner, version = _owner
        folder = os.path.join(owner, f"a-{_count}-{secrets.token_hex(3)}")
    try:
        return MemoryCgroup(folder, version), ""
    except OSError as exc:
        return None, f"cannot create the attempt's memory cgroup: {exc.strerror}"
