"""A deduplicating fake outside world for crash tests: the probe's ledger, in a thread.

It speaks the probe's wire protocol (newline-delimited JSON over a Unix socket, see
``crashpoint.probe``), records every event, applies each effect key once, and can SIGKILL the
agent's process group at a chosen event::

    with FakeTarget() as target:
        env = {**os.environ, "CRASHPOINT_LEDGER": target.address}
        target.arm_kill(7)                        # kill on event #7, before replying; or
        target.arm_kill(9, window="in_doubt")     # event #9, an effect: apply it, kill
        ...                                       # run the agent with env
        target.events         # every event, in order: Event(index, op, name, pid, attempt)
        target.applied        # {key: times applied}; a repeated key is deduplicated (applied=False)
        target.applications   # [(kind, canonical payload, key)] in the order applied

The agent must run in its own session (``start_new_session=True``): the target kills the
process group of the pid that sent the event, and refuses to kill its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socketserver
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

from crashpoint._proc import socket_folder

__all__ = ["Event", "FakeTarget", "canonical"]

Window = Literal["before", "in_doubt"]


def canonical(payload: Any) -> str:
    """An effect's payload as the outside world compares it."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Event:
    """One probe event as the target received it.

    ``name`` is the step for step events, the idempotency key for effects, "" for hello.
    ``applied`` is what an effect's reply said (None for other ops and unreplied effects).
    """

    index: int
    op: str
    name: str
    pid: int
    attempt: str
    kind: str = ""
    applied: bool | None = None
    killed: bool = False


class FakeTarget:
    """The ledger and the outside world in one: see the module docstring."""

    def __init__(self, address: str | None = None) -> None:
        # Unix socket paths are limited to 107 bytes: keep ours short, away from tmp_path (in a
        # short system folder where TMPDIR is too long)
        self._dir = None if address else socket_folder("cp-target-", "ledger.sock")
        self.address = address or os.path.join(self._dir or "", "ledger.sock")
        self.events: list[Event] = []
        self.applied: Counter[str] = Counter()
        self.deliveries: Counter[str] = Counter()
        self.applications: list[tuple[str, str, str]] = []
        self.errors: list[str] = []
        self._kill: tuple[int, Window] | None = None
        self._lock = threading.Lock()
        target = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.request.settimeout(60)
                attempt = ""
                for line in self.rfile:
                    msg = json.loads(line)
                    if msg.get("op") == "hello":
                        attempt = str(msg.get("attempt", ""))
                    reply = target._receive(msg, attempt)
                    if reply is None:  # the sender was killed: it never hears back
                        return
                    self.wfile.write(json.dumps(reply).encode() + b"\n")
                    self.wfile.flush()

        self._server = socketserver.ThreadingUnixStreamServer(self.address, Handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # -- control --------------------------------------------------------------------------------

    def arm_kill(self, index: int, window: Window = "before") -> None:
        """SIGKILL the sender's process group when event #``index`` arrives: ``before`` it is
        applied or acknowledged, or (effects only) ``in_doubt``: applied, then no reply."""
        self._kill = (index, window)

    def __enter__(self) -> FakeTarget:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    # -- the protocol ------------------------------------------------------------------------------

    def _receive(self, msg: dict[str, Any], attempt: str) -> dict[str, Any] | None:
        with self._lock:
            op = str(msg.get("op"))
            index = len(self.events)
            kill = self._kill is not None and self._kill[0] == index
            window = self._kill[1] if kill and self._kill else "before"
            applied: bool | None = None
            if op == "effect" and not (kill and window == "before"):
                key = str(msg["key"])
                self.deliveries[key] += 1
                applied = key not in self.applied
                if applied:
                    self.applications.append((str(msg["kind"]), canonical(msg.get("payload")), key))
                self.applied[key] += int(applied)
            name = str(msg.get("step") or msg.get("key") or "")
            pid = int(msg.get("pid", 0))
            self.events.append(
                Event(
                    index,
                    op,
                    name,
                    pid,
                    attempt,
                    str(msg.get("kind", "")),
                    None if kill else applied,
                    kill,
                )
            )
            if not kill:
                return {"ok": True, "applied": applied} if op == "effect" else {"ok": True}
            self._kill = None
            self._killpg(pid)
            return None

    def _killpg(self, pid: int) -> None:
        try:
            pgid = os.getpgid(pid)
            if pgid == os.getpgrp():
                self.errors.append(
                    f"pid {pid} shares the test's process group; not killed "
                    "(start the agent with start_new_session=True)"
                )
                return
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            self.errors.append(f"pid {pid} was gone before the kill")
