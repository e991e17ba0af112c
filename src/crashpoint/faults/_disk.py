"""Disk faults for a real child: a small tmpfs in a private mount namespace, RLIMIT_FSIZE,
or failpoint-injected ENOSPC/EIO in the reference library. Chosen by what the machine supports.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import NamedTuple

from crashpoint._proc import LIVE, kill_tree, shielded
from crashpoint.errors import InvalidArgument

__all__ = [
    "PAGE",
    "DiskCapability",
    "TmpfsNamespace",
    "TmpfsUsage",
    "UsageSample",
    "UsageSampler",
    "capabilities",
    "tmpfs_bytes_for",
]


@dataclass(frozen=True, slots=True)
class DiskCapability:
    """What this machine allows for a full disk: a tmpfs in a private mount namespace, an
    ``RLIMIT_FSIZE``, each with the reason when it does not (probed once per process)."""

    tmpfs: bool
    tmpfs_reason: str
    rlimit: bool
    rlimit_reason: str


@functools.lru_cache(maxsize=1)
def capabilities() -> DiskCapability:
    """Probe once what disk faults this machine can inject into a real child."""
    tmpfs, why = False, ""
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        why = "unshare/nsenter (util-linux) not on PATH"
    else:
        with shielded():
            d = tempfile.mkdtemp(prefix="cp-probe-")
            LIVE.add_folder(d)
        try:
            r = subprocess.run(
                [
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    f"mount -t tmpfs -o size=8k tmpfs '{d}' && echo ok",
                ],
                capture_output=True,
                timeout=10,
                check=False,
            )
            tmpfs = r.returncode == 0 and b"ok" in r.stdout
            why = (
                ""
                if tmpfs
                else (
                    "cannot mount a tmpfs in a private mount namespace "
                    f"(needs root: CAP_SYS_ADMIN): "
                    f"{r.stderr.decode(errors='replace').strip()[:200]}"
                )
            )
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"unshare failed: {exc}"
        finally:
            with contextlib.suppress(OSError):
                os.rmdir(d)
            if not os.path.lexists(d):
                LIVE.drop_folder(d)
    try:
        import resource

        resource.getrlimit(resource.RLIMIT_FSIZE)
        rl, rl_why = True, ""
    except (ImportError, AttributeError, OSError) as exc:
        rl, rl_why = False, f"RLIMIT_FSIZE unavailable: {exc}"
    return DiskCapability(tmpfs, why, rl, rl_why)


@functools.lru_cache(maxsize=1)
def _nsenter_wdns() -> bool:
    """Whether nsenter has ``--wdns`` (a working folder resolved inside the namespace)."""
    try:
        r = subprocess.run(["nsenter", "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return b"--wdns" in r.stdout


PAGE = 4096


def tmpfs_bytes_for(folder: str) -> int:
    """What ``folder``'s files occupy on a tmpfs: whole pages per file."""
    total = 0
    for _dp, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                size = os.lstat(os.path.join(_dp, name)).st_size
                total += -(-size // PAGE) * PAGE
    return total


class TmpfsUsage(NamedTuple):
    """A tmpfs namespace's space, read from outside: its size, what the folder's files take
    (whole pages, the ballast not counted), and what is free."""

    size: int
    used: int
    free: int


#: The holder of a fixed-capacity namespace: the tmpfs mounted straight over the folder.
_CAPACITY_SCRIPT = (
    'set -e; mount --bind "$1" "$2"; '
    'mount -t tmpfs -o size="$3",mode=0700 tmpfs "$1"; '
    'cp -a "$2"/. "$1"/; echo ready; exec sleep 100000'
)
#: The holder of an exact-free-space namespace: the tmpfs is mounted on a second side folder,
#: the content copied into its sub-folder ``state``, the tmpfs shrunk to content + one ballast
#: page + ``free`` and the ballast written (a size of 0 would mean "unlimited"), then
#: ``state`` bound over the folder: the agent sees its files, never the ballast.
_FREE_SCRIPT = (
    'set -e; folder="$1"; side="$2"; mnt="$3"; free="$5"; '
    'mount --bind "$folder" "$side"; '
    'mount -t tmpfs -o size="$4",mode=0700 tmpfs "$mnt"; '
    'mkdir "$mnt/state"; cp -a "$side"/. "$mnt/state"/; '
    "set -- $(stat -f -c '%b %f %S' \"$mnt\"); bs=$3; used=$(( ($1 - $2) * bs )); "
    'mount -o remount,size=$(( used + bs + free )) "$mnt"; '
    'head -c "$bs" /dev/zero > "$mnt/ballast"; '
    'mount --bind "$mnt/state" "$folder"; '
    'echo "ready $used $bs"; exec sleep 100000'
)


class TmpfsNamespace:
    """A private mount namespace in which ``folder`` is a tmpfs holding a copy of the folder's
    content. Run commands in it with :meth:`wrap`; :meth:`close` copies the tmpfs back into
    the real folder (space is "freed": later attempts run on the real disk). If the copy in
    fails, nothing is ever copied back.

    Two ways to size it (give exactly one):

    - ``capacity``: a tmpfs of ``capacity`` bytes; if the content needs more, the tmpfs holds it
      plus one page (state already on disk is never cut to fit).
    - ``free``: exactly ``free`` bytes (rounded up to whole 4 KiB pages) of free space on top
      of the content, whatever the content takes: the write points of
      :mod:`crashpoint.faults._writes`. ``free=0`` is a full disk: a ballast file (one page,
      outside the folder, invisible to the agent) holds the tmpfs at its size, which is never
      0 (a tmpfs of size 0 is unlimited). Checked after mounting: :meth:`usage` must read
      ``free``, else ``OSError``.

    :meth:`usage` reads the space from outside the namespace (``statvfs`` through
    ``/proc/<holder>/root``); :class:`UsageSampler` samples it while an attempt runs.
    """

    def __init__(
        self, folder: str, capacity: int | None = None, *, free: int | None = None
    ) -> None:
        if (capacity is None) == (free is None):
            raise InvalidArgument(
                "TmpfsNamespace needs exactly one of capacity (the tmpfs size) or "
                "free (the free space above the content)"
            )
        if (capacity is not None and capacity <= 0) or (free is not None and free < 0):
            raise InvalidArgument(
                f"tmpfs capacity must be > 0 and free >= 0 bytes, got "
                f"capacity={capacity}, free={free}"
            )
        self.folder = os.path.abspath(folder)
        self.capacity = capacity
        self.free = None if free is None else -(-free // PAGE) * PAGE
        self.content = 0  # bytes the copied-in content takes (free mode)
        self.ballast = 0
        self._mnt = ""
        estimate = tmpfs_bytes_for(self.folder)
        if capacity is not None:
            self.size = max(capacity, estimate + PAGE)
        else:
            assert self.free is not None
            self.size = 2 * estimate + self.free + (1 << 20)  # shrunk once the content is in
        with shielded():  # a signal lands before or after, never between start and registration
            self._side = tempfile.mkdtemp(prefix="cp-side-")
            LIVE.add_folder(self._side)
            try:
                if self.free is not None:
                    self._mnt = tempfile.mkdtemp(prefix="cp-side-")
                    LIVE.add_folder(self._mnt)
                    argv = [
                        "unshare",
                        "-m",
                        "--propagation",
                        "private",
                        "sh",
                        "-c",
                        _FREE_SCRIPT,
                        "sh",
                        self.folder,
                        self._side,
                        self._mnt,
                        str(self.size),
                        str(self.free),
                    ]
                else:
                    argv = [
                        "unshare",
                        "-m",
                        "--propagation",
                        "private",
                        "sh",
                        "-c",
                        _CAPACITY_SCRIPT,
                        "sh",
                        self.folder,
                        self._side,
                        str(self.size),
                    ]
                self._holder = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except BaseException:
                self._remove_side()
                raise
            LIVE.add_holder(self._holder.pid)
        assert self._holder.stdout is not None
        try:
            line = self._holder.stdout.readline()
        except BaseException:  # interrupted while it mounts
            with shielded():
                self._reap()
                self._remove_side()
            raise
        if not line.startswith(b"ready"):
            err = self._holder.stderr.read().decode(errors="replace") if self._holder.stderr else ""
            self._reap()
            self._remove_side()
            raise OSError(f"could not mount a tmpfs over {self.folder}: {err.strip()}")
        if self.free is not None:
            _ready, used, bs = line.split()
            self.content, self.ballast = int(used), int(bs)
            got = self.usage()
            if got.free != self.free or self.ballast != PAGE:
                self.close()
                raise OSError(
                    f"the tmpfs over {self.folder} has {got.free} bytes free (page "
                    f"{self.ballast} bytes), not the {self.free} planned; this "
                    "kernel's tmpfs counts space differently (4 KiB pages expected)"
                )
            self.size = got.size

    def usage(self) -> TmpfsUsage:
        """The tmpfs's size, used and free bytes now (``OSError`` once it is closed)."""
        st = os.statvfs(f"/proc/{self._holder.pid}/root{self.folder}")
        size = st.f_blocks * st.f_frsize
        return TmpfsUsage(
            size, (st.f_blocks - st.f_bfree) * st.f_frsize - self.ballast, st.f_bavail * st.f_frsize
        )

    def wrap(self, argv: list[str], cwd: str | os.PathLike[str] | None = None) -> list[str]:
        """``argv`` run inside the namespace (nsenter execs it: same pid, same session, same
        environment).

        Entering a mount namespace moves a process to that namespace's ``/``; so the wrapped
        command is put back in a working folder: ``cwd`` (give the one the command is spawned
        with; resolved inside the namespace, so a working folder within the tmpfs folder is
        the tmpfs), or, without ``cwd``, the folder the wrapped command is started in.
        """
        ns = ["nsenter", "-t", str(self._holder.pid), "-m"]
        if cwd is None:  # the folder nsenter starts in, opened before it enters the namespace
            return [*ns, "--wd=.", "--", *argv]
        wd = os.path.abspath(cwd)
        if _nsenter_wdns():
            return [*ns, f"--wdns={wd}", "--", *argv]
        # util-linux < 2.38: change folder in a shell that then execs the command (same pid)
        return [*ns, "--", "sh", "-c", 'cd -- "$1" || exit 127; shift; exec "$@"', "sh", wd, *argv]

    def close(self) -> None:
        """Copy the tmpfs content back to the real folder and end the namespace."""
        try:
            subprocess.run(
                [
                    "nsenter",
                    "-t",
                    str(self._holder.pid),
                    "-m",
                    "--",
                    "sh",
                    "-c",
                    'find "$2" -mindepth 1 -delete; cp -a "$1"/. "$2"/',
                    "sh",
                    self.folder,
                    self._side,
                ],
                check=False,
                capture_output=True,
                timeout=60,
            )
        finally:
            with shielded():
                self._reap()
                self._remove_side()

    def _reap(self) -> None:
        kill_tree(self._holder.pid, sid=self._holder.pid)
        self._holder.wait()
        LIVE.drop_holder(self._holder.pid)
        for s in (self._holder.stdout, self._holder.stderr):
            if s is not None:
                s.close()

    def _remove_side(self) -> None:
        for folder in filter(None, (self._side, self._mnt)):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
            if not os.path.lexists(folder):
                LIVE.drop_folder(folder)


class UsageSample(NamedTuple):
    """What a :class:`UsageSampler` saw: the most the folder's files took, the least free
    space, how many readings. ``full``: free space fell below one page (a write needing a new
    page got ENOSPC, or would have)."""

    peak_used: int
    min_free: int
    samples: int

    @property
    def full(self) -> bool:
        return self.min_free < PAGE


class UsageSampler:
    """Samples a :class:`TmpfsNamespace`'s :meth:`~TmpfsNamespace.usage` every ``interval``
    seconds from a thread, for when no syscall trace can say which write failed: :meth:`stop`
    returns the peak and the least free space seen. A peak shorter than ``interval`` (a temp
    file written and renamed over its old copy) can be missed."""

    def __init__(self, ns: TmpfsNamespace, interval: float = 0.005) -> None:
        self.ns = ns
        self.interval = interval
        first = ns.usage()
        self._peak, self._low, self._n = first.used, first.free, 1
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name="crashpoint-tmpfs-usage", daemon=True
        )
        self._thread.start()

    def _read(self) -> bool:
        try:
            u = self.ns.usage()
        except OSError:
            return False
        self._peak = max(self._peak, u.used)
        self._low = min(self._low, u.free)
        self._n += 1
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if not self._read():
                return

    def stop(self) -> UsageSample:
        """Stop sampling (one last reading first); idempotent."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            self._read()
        return UsageSample(self._peak, self._low, self._n)
