"""Notifications: tell someone when a run needs a human, is dead-lettered or goes stale.

A hook is a Python callable (``Store(..., notify=fn)``: ``fn(event)``) or a command
(``Store(..., notify=["notify-send-run"])``, or the ``CRASHPOINT_NOTIFY`` environment variable,
split like a shell word list but never run through a shell). A command gets the event as one
line of JSON on its stdin, and nothing of the event in its arguments. Events::

    {"event": "paused", "run_id": ..., "store": ..., "time": ..., "step": ..., "reason": ...,
     "request": ..., "attempt": ...}
    {"event": "dead_letter", ..., "attempts": ..., "reason": ...}
    {"event": "stale", ..., "status": ..., "age_seconds": ..., "updated": ..., "waiting_for": ...}

A failing hook (an exception, a non-zero exit, a timeout, a command that cannot start) never
fails the run: it is logged on the ``crashpoint.notify`` logger (a warning).
"""

from __future__ import annotations

import json
import os
import time

from crashpoint.errors import InvalidArgument

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from crashpoint.checkpoint._store import Store

    #: A hook: a callable given the event, or a command (a word list, or a string split like
    #: one).
    Notify = Callable[[dict[str, Any]], Any] | str | Sequence[str] | None
else:  # at run time only annotations name it (they are not evaluated): no typing to import
    Notify = None

__all__ = ["NOTIFY_ENV", "NOTIFY_TIMEOUT", "Notify", "notify_event"]

#: The environment variable that names a notification command (when the store has no hook).
NOTIFY_ENV = "CRASHPOINT_NOTIFY"
#: Seconds a notification command may run before its process group is killed.
NOTIFY_TIMEOUT = 10.0

_LOGGER = "crashpoint.notify"


def _hook(store: Store) -> Notify:
    hook: Notify = getattr(store, "notify", None)
    if hook is None:
        hook = os.environ.get(NOTIFY_ENV) or None
    return hook


def _argv(hook: str | Sequence[str]) -> list[str]:
    import shlex  # only when a hook runs: every store imports this module

    argv = shlex.split(hook) if isinstance(hook, str) else [str(a) for a in hook]
    if not argv:
        raise InvalidArgument("the notification command is empty")
    return argv


def run_command(
    argv: list[str],
    *,
    data: bytes | None,
    timeout: float,
    env: dict[str, str] | None = None,
    ok: tuple[int, ...] = (0,),
) -> str | None:
    """Run ``argv`` in its own session (``data`` on stdin, else none), killing its whole group
    after ``timeout`` seconds; None if it exited with a code in ``ok``, else why it did not
    (the last line of its stderr included). Used for notification hooks and supervised
    attempts alike."""
    import signal  # only when a command runs: every store imports this module
    import subprocess

    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
    except OSError as exc:
        return f"cannot start {argv[0]!r}: {exc.strerror or exc}"
    try:
        _, err = proc.communicate(data, timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return f"timed out after {timeout:g}s (killed)"
    if proc.returncode not in ok:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] if err else []
        return f"exit {proc.returncode}" + (f": {tail[0][:300]}" if tail else "")
    return None


def _run_command(argv: list[str], data: bytes) -> str | None:
    why = run_command(argv, data=data, timeout=NOTIFY_TIMEOUT)
    if why is None or why.startswith("cannot start"):
        return why
    return f"{argv[0]!r} " + (f"exited {why[5:]}" if why.startswith("exit ") else why)


def notify_event(store: Store, event: str, run_id: str, **fields: Any) -> bool:
    """Send ``event`` about ``run_id`` to the store's hook (else ``$CRASHPOINT_NOTIFY``).

    Returns True if a hook took it, False if there is none or it failed (logged, never
    raised). Secrets in the event are redacted with the store's redactor."""
    hook = _hook(store)
    if hook is None:
        return False
    ev = store.redactor.redact(
        {"event": event, "run_id": run_id, "store": store.root, "time": time.time(), **fields}
    )
    try:
        if callable(hook):
            hook(ev)
            return True
        why = _run_command(_argv(hook), json.dumps(ev, sort_keys=True).encode() + b"\n")
    except Exception as exc:  # a hook never fails the run
        why = f"{type(exc).__name__}: {exc}"
    if why is None:
        return True
    import logging  # only when a hook failed: every store imports this module

    logging.getLogger(_LOGGER).warning(
        "crashpoint: the notification hook failed for the %s event of run %r: %s",
        event,
        run_id,
        why,
    )
    return False
