"""Malformed input on the ledger's probe socket gets an error line, over a real Unix socket:
JSON nested too deeply to decode (RecursionError), an attempt number too large for an integer
(``1e400`` decodes to inf: OverflowError), bytes that are not UTF-8. The connection is not
dropped without a word, it keeps serving, and nothing bad is recorded."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import Ledger

DEEP = 200_000  # far past the interpreter's recursion limit; 400 KB, under the 1 MiB line limit


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(history_path=str(tmp_path / "history.jsonl")) as led:
        yield led


def connect(ledger: Ledger) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(ledger.address)
    return s


def ask(s: socket.socket, line: bytes) -> dict[str, Any]:
    """Send one line, read one reply line (fails if the ledger closes instead)."""
    s.sendall(line + b"\n")
    out = b""
    while not out.endswith(b"\n"):
        chunk = s.recv(65536)
        assert chunk, f"the ledger closed the connection without a reply to {line[:60]!r}"
        out += chunk
    return dict(json.loads(out))


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (b"[" * DEEP + b"]" * DEEP, "bad request: JSON nested too deeply"),
        (
            b'{"op": "effect", "kind": "k", "payload": ' + b"[" * DEEP + b"]" * DEEP + b"}",
            "bad request: JSON nested too deeply",
        ),
        (b'{"op": "step_started", "step": "s", "attempt": 1e400}', "attempt must be an integer"),
        (b'{"op": "step_started", "step": "s", "attempt": -1e400}', "attempt must be an integer"),
        (b'{"op": "step_started", "step": "s", "attempt": NaN}', "attempt must be an integer"),
        (b'{"op": "step_started", "step": "\xff\xfe"}', "bad request: "),
    ],
    ids=["deep-array", "deep-payload", "attempt-inf", "attempt-minus-inf", "attempt-nan", "utf8"],
)
def test_malformed_request_gets_an_error_line_and_the_connection_keeps_serving(
    ledger: Ledger, line: bytes, error: str
) -> None:
    s = connect(ledger)
    try:
        reply = ask(s, line)
        assert reply["ok"] is False
        assert reply["error"].startswith(error), reply
        assert ask(s, b'{"op": "step_started", "step": "after"}') == {"ok": True}
    finally:
        s.close()
    assert [e.get("step") for e in ledger.events] == ["after"]  # the bad one was not recorded


def test_a_hello_with_an_attempt_of_1e400_is_answered_and_names_no_attempt(ledger: Ledger) -> None:
    s = connect(ledger)
    try:
        assert ask(s, b'{"op": "hello", "attempt": 1e400}') == {"ok": True}
        assert ask(s, b'{"op": "step_started", "step": "s"}') == {"ok": True}
    finally:
        s.close()
    [ev] = ledger.events
    assert ev["step"] == "s"
