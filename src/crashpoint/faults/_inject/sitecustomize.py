"""Injected by the crashpoint harness (on PYTHONPATH) into a Python agent not built on crashpoint.

With CRASHPOINT_FILEOP_KILL=N it kills this process with SIGKILL just before its N-th
file-mutating operation (open for writing, rename/replace, remove, truncate, mkdir, rmdir),
counted by an audit hook, so an agent is crashed inside its own save routine.
Another sitecustomize later on sys.path is still imported.
"""

import os
import sys

_N = int(os.environ.get("CRASHPOINT_FILEOP_KILL", "0") or 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_count = 0


def _mutating(event: str, args: "tuple[object, ...]") -> bool:
    if event == "open":
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else 0
        if isinstance(mode, str):
            return any(c in mode for c in "wax+")
        return isinstance(flags, int) and bool(flags & _WRITE_FLAGS)
    return event in ("os.rename", "os.remove", "os.truncate", "os.mkdir", "os.rmdir",
                     "os.link", "os.symlink")


def _hook(event: str, args: "tuple[object, ...]") -> None:
    global _count
    if not _mutating(event, args):
        return
    _count += 1
    if _count == _N:
        import signal
        os.kill(os.getpid(), signal.SIGKILL)


if _N > 0:
    sys.addaudithook(_hook)

# chain to a sitecustomize further along sys.path, if the agent has one
_here = os.path.dirname(os.path.abspath(__file__))
for _p in sys.path:
    if _p and os.path.abspath(_p) != _here and os.path.isfile(os.path.join(_p, "sitecustomize.py")):
        import importlib.util as _u
        _spec = _u.spec_from_file_location("_crashpoint_chained_sitecustomize",
                                           os.path.join(_p, "sitecustomize.py"))
        if _spec and _spec.loader:
            _spec.loader.exec_module(_u.module_from_spec(_spec))
        break
