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
from dataclasses import dataclass

from crashpoint.faults._cleanup import LIVE, shielded
from crashpoint.faults._process import kill_tree

__all__ = ["DiskCapability", "TmpfsNamespace", "capabilities"]


@dataclass(frozen=True, slots=True)
class DiskCapability:
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
                ["unshare", "-m", "--propagation", "private", "sh", "-c",
                 f"mount -t tmpfs -o size=8k tmpfs '{d}' && echo ok"],
                capture_output=True, timeout=10, check=False)
            tmpfs = r.returncode == 0 and b"ok" in r.stdout
            why = "" if tmpfs else ("cannot mount a tmpfs in a private mount namespace "
                                    f"(needs root: CAP_SYS_ADMIN): "
                                    f"{r.stderr.decode(errors='replace').strip()[:200]}")
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


class TmpfsNamespace:
    """A private mount namespace in which ``folder`` is a tmpfs of ``capacity`` bytes holding
    a copy of the folder's content. If the content needs more, the tmpfs holds it plus one page
    (state already on disk is never cut to fit). Run commands in it with :meth:`wrap`;
    :meth:`close` copies the tmpfs back into the real folder (space is "freed": later attempts
    run on the real disk). If the copy in fails, nothing is ever copied back."""

    def __init__(self, folder: str, capacity: int) -> None:
        self.folder = os.path.abspath(folder)
        self.capacity = capacity
        self.size = max(capacity, tmpfs_bytes_for(self.folder) + PAGE)
        script = (
            'set -e; mount --bind "$1" "$2"; '
            'mount -t tmpfs -o size="$3",mode=0700 tmpfs "$1"; '
            'cp -a "$2"/. "$1"/; echo ready; exec sleep 100000')
        with shielded():  # a signal lands before or after, never between start and registration
            self._side = tempfile.mkdtemp(prefix="cp-side-")
            LIVE.add_folder(self._side)
            try:
                self._holder = subprocess.Popen(
                    ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                     self.folder, self._side, str(self.size)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True)
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
        if b"ready" not in line:
            err = self._holder.stderr.read().decode(errors="replace") if self._holder.stderr \
                else ""
            self._reap()
            self._remove_side()
            raise OSError(f"could not mount a tmpfs over {self.folder}: {err.strip()}")

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
        return [*ns, "--", "sh", "-c", 'cd -- "$1" || exit 127; shift; exec "$@"', "sh", wd,
                *argv]

    def close(self) -> None:
        """Copy the tmpfs content back to the real folder and end the namespace."""
        try:
            subprocess.run(
                ["nsenter", "-t", str(self._holder.pid), "-m", "--", "sh", "-c",
                 'find "$2" -mindepth 1 -delete; cp -a "$1"/. "$2"/', "sh",
                 self.folder, self._side], check=False, capture_output=True, timeout=60)
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
        with contextlib.suppress(OSError):
            os.rmdir(self._side)
        if not os.path.lexists(self._side):
            LIVE.drop_folder(self._side)
