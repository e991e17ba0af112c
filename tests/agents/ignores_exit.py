"""An agent that speaks the probe's wire protocol itself and ignores a reply's ``exit``.

No crashpoint import: one step, ``work``, reported over ``$CRASHPOINT_LEDGER`` (newline-
delimited JSON); it reads each reply and goes on whatever it says, then prints ``done``. Under
an ``exit`` fault it never exits with the code, so the fault is not exercised (the accounting
says its client did not act on the reply).
"""

from __future__ import annotations

import json
import os
import socket


def main() -> int:
    address = os.environ.get("CRASHPOINT_LEDGER")
    if address:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(address)
        reader = s.makefile("rb")
        attempt = os.environ.get("CRASHPOINT_ATTEMPT", "")
        for msg in (
            {"op": "hello", "attempt": attempt},
            {"op": "step_started", "step": "work"},
            {"op": "step_completed", "step": "work"},
        ):
            s.sendall(json.dumps({**msg, "pid": os.getpid()}).encode() + b"\n")
            reader.readline()  # whatever it says, even {"exit": N}
        s.close()
    print("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
