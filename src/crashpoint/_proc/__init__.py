"""Process control: start an agent in its own session, contain it, kill its whole tree, reap it.

Layer 3 (above the library, below the faults and the harness). It may import the base
(:mod:`crashpoint.errors`) and the standard library, and psutil, which lives here and nowhere
else. Four modules: ``_process`` (spawning, output capture, killing a tree, the reap token),
``_memcg`` (a memory cgroup per attempt, for the memory-exhaustion fault),
``_cgroup`` (a cgroup v2 per attempt where the machine allows; also run as its own watcher
process, so standard library only), ``_cleanup`` (the registry of what runs, SIGINT/SIGTERM
turned into a clean stop, and the reaper of what a killed harness left) and ``_writers`` (who
writes the system temp folders: fanotify and the process connector, as root).

The face is lazy (:mod:`crashpoint._lazy`): the pytest plugin installs the signal handlers of
``_cleanup`` at start-up, and that must not import psutil.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from crashpoint._lazy import attach

if TYPE_CHECKING:
    from crashpoint._proc._cgroup import AttemptCgroup, Containment, attempt_cgroup, containment
    from crashpoint._proc._cleanup import (
        LIVE,
        Reaped,
        cleanup_all,
        exit_status,
        install_signal_handlers,
        kill_marked,
        reap_stale,
        received,
        shielded,
        signal_name,
        socket_folder,
    )
    from crashpoint._proc._git import GIT_TIMEOUT, export_commit, git_commit
    from crashpoint._proc._hosts import hosts_unavailable, on_own_host
    from crashpoint._proc._memcg import (
        MemoryCgroup,
        MemoryUse,
        memory_cgroup,
        memory_cgroup_support,
    )
    from crashpoint._proc._process import (
        KEEP_HEAD,
        KEEP_TAIL,
        PLACEHOLDER_TOKEN,
        REAP_VAR,
        AgentProcess,
        BusyWatch,
        CappedOutput,
        Exit,
        OutputCapture,
        end_attempt,
        kill_tree,
        leftovers,
        marked,
        new_reap_token,
        running,
        signal_children,
        wait_exit,
        with_reap_token,
    )
    from crashpoint._proc._writers import (
        Writers,
        WriterWatch,
        open_watch,
        writer_watch,
        writer_watch_unavailable,
    )

_CGROUP = "crashpoint._proc._cgroup"
_CLEANUP = "crashpoint._proc._cleanup"
_PROCESS = "crashpoint._proc._process"
_WRITERS = "crashpoint._proc._writers"
_MEMCG = "crashpoint._proc._memcg"
_GIT = "crashpoint._proc._git"
_HOSTS = "crashpoint._proc._hosts"
_WHERE = {
    "AgentProcess": _PROCESS,
    "AttemptCgroup": _CGROUP,
    "BusyWatch": _PROCESS,
    "CappedOutput": _PROCESS,
    "Containment": _CGROUP,
    "Exit": _PROCESS,
    "GIT_TIMEOUT": _GIT,
    "KEEP_HEAD": _PROCESS,
    "KEEP_TAIL": _PROCESS,
    "LIVE": _CLEANUP,
    "MemoryCgroup": _MEMCG,
    "MemoryUse": _MEMCG,
    "OutputCapture": _PROCESS,
    "PLACEHOLDER_TOKEN": _PROCESS,
    "REAP_VAR": _PROCESS,
    "Reaped": _CLEANUP,
    "attempt_cgroup": _CGROUP,
    "cleanup_all": _CLEANUP,
    "containment": _CGROUP,
    "end_attempt": _PROCESS,
    "exit_status": _CLEANUP,
    "export_commit": _GIT,
    "git_commit": _GIT,
    "hosts_unavailable": _HOSTS,
    "on_own_host": _HOSTS,
    "install_signal_handlers": _CLEANUP,
    "kill_marked": _CLEANUP,
    "kill_tree": _PROCESS,
    "leftovers": _PROCESS,
    "marked": _PROCESS,
    "memory_cgroup": _MEMCG,
    "memory_cgroup_support": _MEMCG,
    "new_reap_token": _PROCESS,
    "reap_stale": _CLEANUP,
    "received": _CLEANUP,
    "running": _PROCESS,
    "shielded": _CLEANUP,
    "signal_children": _PROCESS,
    "signal_name": _CLEANUP,
    "socket_folder": _CLEANUP,
    "wait_exit": _PROCESS,
    "with_reap_token": _PROCESS,
    "WriterWatch": _WRITERS,
    "Writers": _WRITERS,
    "open_watch": _WRITERS,
    "writer_watch": _WRITERS,
    "writer_watch_unavailable": _WRITERS,
}

__all__ = [
    "GIT_TIMEOUT",
    "KEEP_HEAD",
    "KEEP_TAIL",
    "LIVE",
    "PLACEHOLDER_TOKEN",
    "REAP_VAR",
    "AgentProcess",
    "AttemptCgroup",
    "BusyWatch",
    "CappedOutput",
    "Containment",
    "Exit",
    "MemoryCgroup",
    "MemoryUse",
    "OutputCapture",
    "Reaped",
    "WriterWatch",
    "Writers",
    "attempt_cgroup",
    "cleanup_all",
    "containment",
    "end_attempt",
    "exit_status",
    "export_commit",
    "git_commit",
    "hosts_unavailable",
    "install_signal_handlers",
    "kill_marked",
    "kill_tree",
    "leftovers",
    "marked",
    "memory_cgroup",
    "memory_cgroup_support",
    "new_reap_token",
    "on_own_host",
    "open_watch",
    "reap_stale",
    "received",
    "running",
    "shielded",
    "signal_children",
    "signal_name",
    "socket_folder",
    "wait_exit",
    "with_reap_token",
    "writer_watch",
    "writer_watch_unavailable",
]

__getattr__, __dir__ = attach(__name__, _WHERE)
