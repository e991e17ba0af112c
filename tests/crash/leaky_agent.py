"""A test agent that misbehaves as its environment asks (see test_evidence_bounds.py).

Usage: leaky_agent.py STATE_DIR. Two steps through the probe (so the harness has boundaries to
kill at), with on the way, when set:

- ``LEAK_STATE_MIB=N``: leave N files of 1 MiB in the state folder (``big-ATTEMPT/K.bin``)
- ``LEAK_TMP_MIB=N``: write N MiB to a file in ``$TMPDIR`` (what ``tempfile`` uses)
- ``LEAK_SYSTEM_TMP=TAG``: write 1 MiB to ``/tmp/leaky-agent-TAG`` directly, ignoring
  ``$TMPDIR`` (a short tag: a long agent.env value is redacted wherever it appears)
- ``LEAK_SECRETS=1``: print the values of ``API_TOKEN``, ``SERVICE_URL`` and the canary
  (``OPENAI_API_KEY``) to stdout and stderr, write them into the state folder, send them in an
  effect's payload and key, and name an event after one
- ``LEAK_CONNECTIONS=N``: open N extra connections to the ledger and hold them to the end
- ``LEAK_EXIT_AFTER_FIRST=C``: exit C in every attempt after the first (a trial that fails)
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time

from crashpoint import probe

MIB = 1 << 20


def main() -> int:
    state = sys.argv[1]
    os.makedirs(state, exist_ok=True)
    attempt = os.environ.get("CRASHPOINT_ATTEMPT", "1")
    held = []
    probe.step_started("work")
    if n := int(os.environ.get("LEAK_STATE_MIB", "0")):
        folder = os.path.join(state, f"big-{attempt}")
        os.makedirs(folder, exist_ok=True)
        for k in range(n):
            with open(os.path.join(folder, f"{k}.bin"), "wb") as f:
                f.write(b"s" * MIB)
    if n := int(os.environ.get("LEAK_TMP_MIB", "0")):
        if "/tmp/attempt-" not in tempfile.gettempdir():
            print(f"TMPDIR is not private: {tempfile.gettempdir()}", file=sys.stderr)
            return 9
        with tempfile.NamedTemporaryFile(delete=False, suffix=".scratch") as f:
            for _ in range(n):
                f.write(b"t" * MIB)
    if tag := os.environ.get("LEAK_SYSTEM_TMP"):
        with open(f"/tmp/leaky-agent-{tag}", "wb") as f:
            f.write(b"u" * MIB)
    if os.environ.get("LEAK_SECRETS"):
        values = [os.environ[k] for k in ("API_TOKEN", "SERVICE_URL", "OPENAI_API_KEY")]
        line = " ".join(values)
        print(f"my secrets: {line}")
        print(f"my secrets: {line}", file=sys.stderr)
        with open(os.path.join(state, f"secrets-{attempt}.txt"), "w") as f:
            f.write(line + "\n")
        probe.effect("notify", {"token": values[0], "url": values[1]}, key=f"k:{values[0]}")
        probe.event("event", name=f"saw {values[2]}")
    if n := int(os.environ.get("LEAK_CONNECTIONS", "0")):
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        refused = 0
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            while True:
                try:
                    s.connect(os.environ["CRASHPOINT_LEDGER"])  # blocking: waits in the backlog
                    break
                except BlockingIOError:  # a Unix socket's full backlog, on some kernels
                    time.sleep(0.001)
            held.append(s)
        for s in held:  # the ledger answers the ones over its limit with an error line
            s.settimeout(0.05)
            try:
                if s.recv(4096).startswith(b'{"ok": false'):
                    refused += 1
            except TimeoutError:
                pass
        print(f"connections refused: {refused}", file=sys.stderr)
    probe.step_completed("work")
    probe.step_started("finish")
    probe.step_completed("finish")
    print("done")
    if attempt != "1" and (code := int(os.environ.get("LEAK_EXIT_AFTER_FIRST", "0"))):
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
