"""The probe: the client any agent calls so the harness can observe it (Contract 1).

Standard library only. Outside the harness (no ``CRASHPOINT_LEDGER`` in the environment) every
call is a cheap no-op and :func:`effect` returns True. Under the harness each call is a blocking
request to the ledger over a Unix socket (newline-delimited JSON, one request, one reply); the
agent waits for the reply, which is what lets the harness kill it at an exact boundary.

Wire format (documented for other languages in ``docs/reference/wire-protocol.md``)::

    -> {"op": "hello", "pid": 123, "attempt": "2"}
    <- {"ok": true}
    -> {"op": "step_started", "step": "fetch", "pid": 123}
    <- {"ok": true}
    -> {"op": "effect", "kind": "send_email", "payload": {...}, "key": "run-7:send_email:0"}
    <- {"ok": true, "applied": true}

A reply ``{"ok": false, "error": "..."}`` raises :class:`ProbeError`. A reply with
``"exit": N`` (the harness's ``exit`` fault) ends the process with exit code N at once.
"""

from __future__ import annotations

import _thread
import os

from crashpoint.errors import ProbeError

# Only the standard library's cheapest modules at import: every agent imports this, under the
# harness and in production (where each call is a no-op). json and socket are imported by the
# client, which exists only under the harness; typing only by type checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any

__all__ = [
    "ENV_LEDGER",
    "ProbeError",
    "active",
    "effect",
    "event",
    "reset",
    "step_completed",
    "step_started",
]

ENV_LEDGER = "CRASHPOINT_LEDGER"


class _Client:
    def __init__(self, address: str) -> None:
        self.address = address
        self.lock = _thread.allocate_lock()  # threading.Lock, without importing threading
        self.sock: socket.socket | None = None
        self.reader: Any = None

    def _connect(self) -> None:
        import socket  # here, not at import: see the module's imports

        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(self.address)
        self.sock = s
        self.reader = s.makefile("rb")
        self._roundtrip(
            {"op": "hello", "pid": os.getpid(), "attempt": os.environ.get("CRASHPOINT_ATTEMPT", "")}
        )

    def _roundtrip(self, msg: dict[str, Any]) -> dict[str, Any]:
        import json  # here, not at import: see the module's imports

        assert self.sock is not None
        data = json.dumps(msg, separators=(",", ":"), sort_keys=True).encode() + b"\n"
        self.sock.sendall(data)
        line = self.reader.readline()
        if not line:
            raise ProbeError(f"the ledger at {self.address} closed the connection")
        reply: dict[str, Any] = json.loads(line)
        code = reply.get("exit")
        if type(code) is int and 0 < code < 256:  # an exit fault: the process exits here
            _exit_now(code)
        if not reply.get("ok"):
            raise ProbeError(f"the ledger refused {msg.get('op')!r}: {reply.get('error')}")
        return reply

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.sock is None:
                self._connect()
            msg = dict(msg, pid=os.getpid())
            try:
                return self._roundtrip(msg)
            except OSError as exc:
                raise ProbeError(f"lost the ledger at {self.address}: {exc}") from exc


def _exit_now(code: int) -> None:
    """End this process with ``code`` at once, as an agent that gives up with an error does:
    what it printed is flushed, nothing else runs (no ``finally``, no atexit handler)."""
    import sys  # here, not at import: see the module's imports

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: S110 - a closed or broken stream: the exit matters
            pass
    os._exit(code)


_client: _Client | None = None
_client_pid = -1


def _get() -> _Client | None:
    global _client, _client_pid
    address = os.environ.get(ENV_LEDGER)
    if not address:
        return None
    if _client is None or _client_pid != os.getpid() or _client.address != address:
        _client = _Client(address)  # a forked child never shares its parent's socket
        _client_pid = os.getpid()
    return _client


def reset() -> None:
    """Forget the connection (the next call reconnects). For forked children and tests."""
    global _client
    if _client is not None and _client.sock is not None:
        try:
            _client.sock.close()
        except OSError:
            pass
    _client = None


def active() -> bool:
    """True when a ledger is listening for this process (running under the harness)."""
    return bool(os.environ.get(ENV_LEDGER))


def event(op: str, **fields: Any) -> dict[str, Any]:
    """Send one probe event and wait for the ledger's reply (``{}`` outside the harness)."""
    client = _get()
    if client is None:
        return {}
    return client.call({"op": op, **fields})


def step_started(step: str) -> None:
    """A step begins."""
    event("step_started", step=step)


def step_completed(step: str) -> None:
    """A step's result is durable. Call only once it is."""
    event("step_completed", step=step)


def effect(kind: str, payload: Any, *, key: str | None = None) -> bool:
    """Ask the outside world to apply an effect; True if applied, False if ``key`` was a duplicate.

    Without a key nothing can be deduplicated: every call is applied (the harness then judges
    the effect by its kind and payload, so a retry after a crash shows as a duplicate).
    Outside the harness this returns True and does nothing.
    """
    if key is None:
        reply = event("effect", kind=kind, payload=payload)
    else:
        reply = event("effect", kind=kind, payload=payload, key=key)
    return bool(reply.get("applied", True))
