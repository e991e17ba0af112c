"""Run an agent given as ``module:function``: the spawn path of entry agents.

    python -m crashpoint._entry module:function [ARG ...]

The convention (the same in the spawn path and in a fork-mode zygote's child, which share
:func:`call`): ``sys.argv`` becomes ``["module:function", ARG, ...]`` and the function is called
with one positional argument, the list ``[ARG, ...]`` (``AgentSpec.args`` with its placeholders
filled in), e.g. ``crashpoint.agents.demo:main`` gets ``["--state", "/tmp/.../state"]``.

The exit code follows ``python -m module`` with ``run_main``:

- the function returns ``None`` (or anything not an int): 0; an int: that code;
- ``SystemExit`` is honoured as the interpreter does (``None`` 0, an int that code, anything
  else printed on stderr and 1);
- an error that stops a run of the reference library (paused, locked, corrupt, disk, ...): one
  ``crashpoint: ...`` line on stderr and its documented exit code (as
  :func:`crashpoint.checkpoint.run_main`); looked up only if the agent imported the library;
- any other exception: its traceback on stderr and 1; ``KeyboardInterrupt`` ends the process
  by SIGINT, as the interpreter does.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

from crashpoint.errors import (
    CheckpointError,
    EntryError,
    RunDeadLettered,
    RunPaused,
)

TYPE_CHECKING = False  # without importing typing: this runs in every spawned entry agent
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

    EntryFunction = Callable[[list[str]], Any]

__all__ = ["EntryError", "call", "exit_status", "main", "resolve", "run_main"]


def resolve(entry: str) -> EntryFunction:
    """Import ``module`` and return its ``function`` (a dotted path such as ``Agent.main`` is
    fine); raise :class:`EntryError` saying what is wrong and how to fix it."""
    module_name, sep, attr = entry.partition(":")
    if not sep or not module_name or not attr:
        raise EntryError(
            f"agent entry {entry!r} is not 'module:function' (for example "
            "'crashpoint.agents.demo:main')"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        where = "PYTHONPATH" + (
            f"={os.environ['PYTHONPATH']}" if os.environ.get("PYTHONPATH") else " (unset)"
        )
        raise EntryError(
            f"agent entry {entry!r}: cannot import module {module_name!r}: "
            f"{exc}. Install it, or put its folder on PYTHONPATH or in the "
            f"agent's cwd; {where}"
        ) from exc
    except Exception as exc:  # the module's own code failed while it was imported
        raise EntryError(
            f"agent entry {entry!r}: importing module {module_name!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EntryError(
                f"agent entry {entry!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(obj):
        raise EntryError(
            f"agent entry {entry!r}: {attr!r} is a {type(obj).__name__}, not a function"
        )
    fn: EntryFunction = obj
    return fn


def exit_status(code: object) -> int:
    """The exit code the interpreter gives ``SystemExit(code)`` (printing a non-int code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF  # what the parent sees, as for sys.exit(code)
    print(code, file=sys.stderr)
    return 1


def _library_stop(exc: BaseException) -> int | None:
    """The reference library's documented exit code for ``exc`` (``run_main``'s handling)."""
    if not isinstance(exc, (CheckpointError, RunPaused, RunDeadLettered)):
        return None
    lib = sys.modules.get("crashpoint.checkpoint")  # loaded: the library raised it
    exit_code = getattr(lib, "exit_code", None)
    if exit_code is None:
        return None
    print(f"crashpoint: {exc}", file=sys.stderr, flush=True)
    code: int = exit_code(exc)
    return code


def call(entry: str, fn: EntryFunction, args: Sequence[str]) -> int:
    """Call ``fn`` by the convention above and return its exit code (see the module doc)."""
    sys.argv = [entry, *args]
    try:
        result = fn(list(args))
    except SystemExit as exc:
        return exit_status(exc.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException as exc:
        code = _library_stop(exc)
        if code is not None:
            return code
        sys.excepthook(*sys.exc_info())
        return 1
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def run_main(kind: str, target: str, args: Sequence[str], path0: str) -> int:
    """Run a script (``kind`` "path") or a module (``kind`` "module") as ``__main__``, as
    ``python SCRIPT ARGS`` / ``python -m MODULE ARGS`` would in the current process, and return
    the exit code the interpreter would give: ``SystemExit`` as the interpreter honours it, an
    uncaught exception's traceback on stderr and 1, ``KeyboardInterrupt`` the process ended by
    SIGINT. ``path0``: what ``sys.path[0]`` becomes (the script's folder, or the working folder
    for ``-m``). The forked child of a fork-mode zygote runs ``{python}`` command agents so."""
    import runpy

    sys.path[0:0] = [path0]
    sys.argv = [target, *args]
    try:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exc:
        return exit_status(exc.code)
    except KeyboardInterrupt:
        _print_exception(target)
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130
    except BaseException:
        _print_exception(target)
        return 1
    return 0


def _print_exception(target: str) -> None:
    """The traceback the interpreter prints, without the frames of runpy and of this module."""
    kind, value, tb = sys.exc_info()
    here = {
        os.path.abspath(__file__),
        os.path.abspath(getattr(sys.modules.get("runpy"), "__file__", "") or ""),
    }
    here.add(os.path.abspath("<frozen runpy>"))  # 3.11+: runpy is frozen
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) in here:
        tb = tb.tb_next
    if kind is not None and value is not None:
        sys.excepthook(kind, value.with_traceback(tb), tb)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass


def main(argv: list[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        fn = resolve(argv[0])
    except EntryError as exc:
        print(f"crashpoint: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    sys.exit(call(argv[0], fn, argv[1:]))


if __name__ == "__main__":
    main()
