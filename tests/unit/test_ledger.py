"""The ledger in-process: the outside world (effects applied once per key), the history, the
kill switch (before vs in doubt, on a real child), bad requests, the HTTP front, and the probe
client (a no-op outside the harness).

The wire protocol these tests speak is docs/reference/wire-protocol.md.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashpoint import probe
from crashpoint.harness import KillAt, Ledger, canonical
from crashpoint.harness._standins._ledger import _SocketHandler, _SocketServer


class Conn:
    """One agent connection to the ledger's Unix socket, speaking NDJSON by hand."""

    def __init__(self, ledger: Ledger) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(ledger.address)
        self.stream = self.sock.makefile("rwb")

    def raw(self, line: bytes) -> dict[str, Any] | None:
        """Send one line; the reply, or None if the ledger closed the connection (a kill)."""
        self.stream.write(line + b"\n")
        self.stream.flush()
        reply = self.stream.readline()
        return json.loads(reply) if reply else None

    def call(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        return self.raw(json.dumps(msg).encode())

    def close(self) -> None:
        self.stream.close()
        self.sock.close()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(history_path=str(tmp_path / "history.jsonl"), http=True) as led:
        yield led


@pytest.fixture
def conn(ledger: Ledger) -> Iterator[Conn]:
    c = Conn(ledger)
    yield c
    c.close()


def effect(key: str, payload: Any = None, kind: str = "send_email") -> dict[str, Any]:
    return {"op": "effect", "kind": kind, "payload": payload or {"to": "a@b"}, "key": key}


# -- the outside world ---------------------------------------------------------------------------


def test_an_effect_key_is_applied_once_and_its_duplicates_acknowledged(
    ledger: Ledger, conn: Conn
) -> None:
    assert conn.call(effect("k1")) == {"ok": True, "applied": True}
    assert conn.call(effect("k1")) == {"ok": True, "applied": False}
    assert conn.call(effect("k1", {"changed": "payload"})) == {"ok": True, "applied": False}
    # a different key with the same payload is a second real application (a fresh-key retry)
    assert conn.call(effect("k2")) == {"ok": True, "applied": True}
    assert ledger.effects["k1"].applied == 1
    assert ledger.effects["k1"].duplicates == 2
    assert ledger.applied_counts() == {("send_email", canonical({"to": "a@b"})): 2}
    assert [e.get("applied") for e in ledger.events] == [True, False, False, True]


def test_history_jsonl_has_every_recorded_event_with_its_attribution(
    ledger: Ledger, conn: Conn
) -> None:
    assert conn.call({"op": "hello", "pid": 4242, "attempt": "2"}) == {"ok": True}
    conn.call({"op": "step_started", "step": "fetch", "pid": 4242})
    conn.call({"op": "step_completed", "step": "fetch", "pid": 4242})
    conn.call({**effect("run-1:send_email:0"), "pid": 4242})
    conn.call({**effect("run-1:send_email:0"), "pid": 4242})
    conn.call({"op": "event", "name": "custom", "attempt": 3, "pid": 4343})
    assert ledger.history_path is not None
    lines = [json.loads(x) for x in Path(ledger.history_path).read_text().splitlines()]
    assert lines == ledger.events  # memory and file agree; hello is not recorded
    assert [e["op"] for e in lines] == [
        "step_started",
        "step_completed",
        "effect",
        "effect",
        "event",
    ]
    assert [e["attempt"] for e in lines] == [2, 2, 2, 2, 3]  # a message's attempt wins
    assert [e["pid"] for e in lines] == [4242] * 4 + [4343]
    assert [e["i"] for e in lines] == [0, 1, 2, 3, 4]
    assert [e["ai"] for e in lines] == [0, 1, 2, 3, 0]  # index within the attempt
    assert all(isinstance(e["t"], float) for e in lines)
    assert [e["t"] for e in lines] == sorted(e["t"] for e in lines)
    eff = lines[2]
    assert (eff["kind"], eff["key"], eff["payload"]) == (
        "send_email",
        "run-1:send_email:0",
        {"to": "a@b"},
    )
    # the file says whether each effect was applied (it is the evidence of a failing trial)
    assert [lines[2]["applied"], lines[3]["applied"]] == [True, False]
    assert lines[0]["step"] == "fetch"
    assert lines[4]["name"] == "custom"


def test_events_without_hello_go_to_the_attempt_the_harness_started_last(
    ledger: Ledger, conn: Conn
) -> None:
    ledger.begin_attempt(5, None)
    conn.call({"op": "step_started", "step": "a"})
    assert ledger.events[0]["attempt"] == 5


# -- the kill switch -----------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["before", "in_doubt"])
def test_a_kill_at_an_effect_sigkills_the_attempt_and_applies_it_only_in_doubt(
    phase: str, ledger: Ledger, children: Any
) -> None:
    agent = children.spawn(["sleep", "30"])  # stands in for the agent's process group
    ledger.begin_attempt(1, agent.pid)
    ledger.kills = [KillAt(1, 1, phase)]  # the attempt's second event: the effect
    c = Conn(ledger)
    assert c.call({"op": "hello", "pid": agent.pid, "attempt": "1"}) == {"ok": True}
    assert c.call({"op": "step_started", "step": "send"}) == {"ok": True}
    assert c.call(effect("run-1:send:0")) is None  # no reply: the agent would never hear back
    c.close()
    assert agent.wait(5) == -signal.SIGKILL
    applied = phase == "in_doubt"
    assert ("run-1:send:0" in ledger.effects) is applied
    assert sum(ledger.applied_counts().values()) == int(applied)
    assert [
        {k: v for k, v in x.items() if k in ("event", "attempt", "phase", "op")}
        for x in ledger.killed
    ] == [{"event": 1, "attempt": 1, "phase": phase, "op": "effect"}]
    assert ledger.events[1]["killed"] == phase
    assert ledger.history_path is not None
    logged = [json.loads(x) for x in Path(ledger.history_path).read_text().splitlines()]
    assert logged[1]["killed"] == phase
    assert logged[1].get("applied") is (True if applied else None)  # never applied: no field
    # the next attempt retries with the same key: applied now if the kill came before, a
    # deduplicated replay if the first one was applied in doubt
    ledger.begin_attempt(2, None)
    c2 = Conn(ledger)
    c2.call({"op": "hello", "attempt": "2"})
    assert c2.call(effect("run-1:send:0")) == {"ok": True, "applied": not applied}
    c2.close()
    assert ledger.effects["run-1:send:0"].applied == 1


def test_a_kill_planned_for_another_attempt_does_not_fire(ledger: Ledger, children: Any) -> None:
    agent = children.spawn(["sleep", "30"])
    ledger.begin_attempt(2, agent.pid)
    ledger.kills = [KillAt(1, 0, "before")]
    c = Conn(ledger)
    c.call({"op": "hello", "attempt": "2"})
    assert c.call({"op": "step_started", "step": "a"}) == {"ok": True}
    c.close()
    assert agent.popen.poll() is None
    assert not ledger.killed


# -- bad requests ----------------------------------------------------------------------------------

BAD: list[tuple[bytes, str]] = [
    (b"not json", "bad request"),
    (b"[1, 2]", "bad request"),
    (b"\xff\xfe{", "bad request"),
    (b'{"step": "no op"}', "unknown op"),
    (b'{"op": "drop_tables"}', "unknown op"),
    (b'{"op": ["step_started"]}', "unknown op"),
    (b'{"op": "step_started", "attempt": "two"}', "attempt must be an integer"),
    (b'{"op": "step_started", "attempt": [1]}', "attempt must be an integer"),
    (b'{"op": "effect", "kind": "send", "key": 7}', "an effect's key must be a string"),
    (b'{"op": "effect", "kind": "send", "key": ["k"]}', "an effect's key must be a string"),
]


def test_bad_requests_get_an_error_reply_and_never_break_the_server(
    ledger: Ledger, conn: Conn
) -> None:
    for line, error in BAD:
        reply = conn.raw(line)
        assert reply is not None, line
        assert (reply["ok"], reply["error"][: len(error)]) == (False, error), line
    # the same connection, and a new one, still work; nothing bad was recorded
    assert conn.call({"op": "step_started", "step": "a"}) == {"ok": True}
    other = Conn(ledger)
    assert other.call(effect("k")) == {"ok": True, "applied": True}
    other.close()
    assert [e["op"] for e in ledger.events] == ["step_started", "effect"]
    assert not ledger.effects.keys() - {"k"}


def test_a_keyless_effect_is_applied_every_time_and_judged_by_content(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(probe.ENV_LEDGER, ledger.address)
    probe.reset()
    try:
        assert probe.effect("send_email", {"to": "a@b"}) is True
        assert probe.effect("send_email", {"to": "a@b"}, key="") is True  # empty: no key
    finally:
        probe.reset()
    # nothing to deduplicate by: both applied; by content, the same effect twice
    assert ledger.applied_counts() == {("send_email", '{"to":"a@b"}'): 2}
    assert [(e["op"], e.get("keyless"), e["nth"]) for e in ledger.events] == [
        ("effect", True, 1),
        ("effect", True, 2),
    ]
    assert all("key" not in e for e in ledger.events)


# -- the HTTP front --------------------------------------------------------------------------------


def post(
    ledger: Ledger, path: str, body: bytes | None = b"{}", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], dict[str, Any]]:
    req = urllib.request.Request(  # noqa: S310 - http:// on our own loopback ledger
        ledger.http_url + path,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - likewise
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, dict(err.headers), json.loads(err.read())


def test_http_effects_are_deduplicated_by_idempotency_key(ledger: Ledger) -> None:
    hdr = {
        "Idempotency-Key": "run-1:publish:0",
        "X-Crashpoint-Attempt": "2",
        "X-Crashpoint-Pid": "777",
    }
    code, headers, body = post(ledger, "/effects/publish", b'{"title": "t"}', hdr)
    assert (code, body) == (200, {"ok": True, "applied": True})
    assert "Idempotent-Replayed" not in headers
    code, headers, body = post(ledger, "/effects/publish", b'{"title": "t"}', hdr)
    assert (code, body) == (200, {"ok": True, "applied": False})
    assert headers["Idempotent-Replayed"] == "true"
    ev = ledger.events[0]
    assert (ev["op"], ev["kind"], ev["payload"], ev["attempt"], ev["pid"], ev["via"]) == (
        "effect",
        "publish",
        {"title": "t"},
        2,
        777,
        "http",
    )
    # one outside world: a key applied over the socket is a duplicate over HTTP too
    c = Conn(ledger)
    assert c.call(effect("shared", kind="publish")) == {"ok": True, "applied": True}
    c.close()
    _, headers, body = post(
        ledger, "/effects/publish", b'{"to": "a@b"}', {"Idempotency-Key": "shared"}
    )
    assert body["applied"] is False
    assert headers["Idempotent-Replayed"] == "true"


def test_http_step_events_are_recorded_like_socket_ones(ledger: Ledger) -> None:
    hdr = {"X-Crashpoint-Attempt": "3", "X-Crashpoint-Pid": "99"}
    assert post(ledger, "/events/step_started", b'{"step": "fetch"}', hdr)[::2] == (
        200,
        {"ok": True},
    )
    assert post(ledger, "/events/step_completed", b'{"step": "fetch"}', hdr)[2] == {"ok": True}
    assert post(ledger, "/events/event", b'{"name": "x", "attempt": 4}', hdr)[2] == {"ok": True}
    assert [(e["op"], e.get("step"), e["attempt"], e["pid"], e["via"]) for e in ledger.events] == [
        ("step_started", "fetch", 3, 99, "http"),
        ("step_completed", "fetch", 3, 99, "http"),
        ("event", None, 4, 99, "http"),
    ]
    assert [e["ai"] for e in ledger.events] == [0, 1, 0]


@pytest.mark.parametrize(
    ("path", "body", "headers", "code", "error"),
    [
        ("/effects/publish", b"{nope", {"Idempotency-Key": "k"}, 400, "body is not JSON"),
        ("/effects/", b"{}", {"Idempotency-Key": "k"}, 404, "no route"),
        ("/events/effect", b"{}", {}, 404, "no route"),
        ("/events/step_started/x", b"{}", {}, 404, "no route"),
        ("/nothing", b"{}", {}, 404, "no route"),
        ("/events/step_started", b"[1]", {}, 400, "an event body is a JSON object"),
        ("/events/step_started", b'{"attempt": "x"}', {}, 400, "attempt must be an integer"),
        (
            "/events/step_started",
            b"{}",
            {"X-Crashpoint-Attempt": "x"},
            400,
            "attempt must be an integer",
        ),
    ],
)
def test_http_bad_requests_get_an_error_and_change_nothing(
    ledger: Ledger, path: str, body: bytes, headers: dict[str, str], code: int, error: str
) -> None:
    got_code, _, got = post(ledger, path, body, headers)
    assert (got_code, got["ok"], got["error"][: len(error)]) == (code, False, error), got
    assert post(ledger, "/events/step_started", b'{"step": "still fine"}')[2] == {"ok": True}
    assert len(ledger.events) == 1


def test_http_bad_content_length_is_refused(ledger: Ledger) -> None:
    url = urllib.parse.urlsplit(ledger.http_url)  # http://127.0.0.1:PORT/<token>
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
    try:
        conn.putrequest("POST", url.path + "/events/step_started")
        conn.putheader("Content-Length", "-5")
        conn.endheaders()
        resp = conn.getresponse()
        assert resp.status == 400
        assert json.loads(resp.read())["error"] == "bad Content-Length header"
    finally:
        conn.close()


def test_http_kill_in_doubt_applies_then_kills_without_a_response(
    ledger: Ledger, children: Any
) -> None:
    agent = children.spawn(["sleep", "30"])
    ledger.begin_attempt(1, agent.pid)
    ledger.kills = [KillAt(1, 0, "in_doubt")]
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)):
        post(
            ledger, "/effects/publish", b"{}", {"Idempotency-Key": "k", "X-Crashpoint-Attempt": "1"}
        )
    assert agent.wait(5) == -signal.SIGKILL
    assert ledger.effects["k"].applied == 1
    assert ledger.events[0]["killed"] == "in_doubt"


# -- the probe client ------------------------------------------------------------------------------


def test_the_probe_is_a_no_op_outside_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(probe.ENV_LEDGER, raising=False)
    probe.reset()
    assert probe.active() is False
    assert probe.step_started("a") is None
    assert probe.step_completed("a") is None
    assert probe.event("custom", x=1) == {}
    assert probe.effect("send_email", {"to": "a@b"}, key="k") is True
    assert probe.effect("send_email", {"to": "a@b"}, key="k") is True  # nothing deduplicates


def test_the_probe_speaks_to_a_ledger_and_says_which_attempt_it_is(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(probe.ENV_LEDGER, ledger.address)
    monkeypatch.setenv("CRASHPOINT_ATTEMPT", "4")
    probe.reset()
    try:
        assert probe.active() is True
        probe.step_started("fetch")
        assert probe.effect("send_email", {"to": "a@b"}, key="k") is True
        assert probe.effect("send_email", {"to": "a@b"}, key="k") is False
        probe.step_completed("fetch")
    finally:
        probe.reset()
    assert [(e["op"], e["attempt"], e["pid"]) for e in ledger.events] == [
        ("step_started", 4, os.getpid()),
        ("effect", 4, os.getpid()),
        ("effect", 4, os.getpid()),
        ("step_completed", 4, os.getpid()),
    ]


def test_a_kill_by_identity_is_not_moved_by_an_extra_event_from_a_background_thread(
    ledger: Ledger, children: Any
) -> None:
    # the golden run sent fetch, then send; this attempt's framework also sends a heartbeat
    # from a background thread in between. A kill by index (event #1) would hit the
    # heartbeat; by identity it still lands on step_started:send
    agent = children.spawn(["sleep", "30"])
    ledger.begin_attempt(1, agent.pid)
    ledger.kills = [KillAt(1, op="step_started", name="send", nth=1)]
    c = Conn(ledger)
    c.call({"op": "hello", "attempt": "1"})
    assert c.call({"op": "step_started", "step": "fetch"}) == {"ok": True}
    assert c.call({"op": "event", "name": "heartbeat"}) == {"ok": True}
    assert c.call({"op": "step_started", "step": "send"}) is None
    c.close()
    assert agent.wait(5) == -signal.SIGKILL
    [killed] = ledger.killed
    assert (killed["op"], killed["name"], killed["nth"], killed["ai"]) == (
        "step_started",
        "send",
        1,
        2,
    )


def test_close_wakes_the_servers_at_once_and_they_still_serve_after_a_long_quiet() -> None:
    """The fronts' loops sleep until a connection or shutdown() wakes them: no poll interval
    (a 20 ms poll once cost every ledger's close up to 20 ms a front). A loop that polled
    would not notice shutdown() within the hour ``poll_interval`` asks for here."""
    folder = tempfile.mkdtemp(prefix="cp-test-")  # a short path: a Unix socket's is bounded
    srv = _SocketServer(os.path.join(folder, "s.sock"), _SocketHandler)
    try:
        loop = threading.Thread(target=srv.serve_forever, args=(3600.0,), daemon=True)
        loop.start()
        time.sleep(0.2)  # asleep in its loop
        stopper = threading.Thread(target=srv.shutdown, daemon=True)
        stopper.start()
        stopper.join(timeout=5)
        loop.join(timeout=5)
        assert not stopper.is_alive()
        assert not loop.is_alive()
    finally:
        srv.server_close()
        shutil.rmtree(folder, ignore_errors=True)
    ledger = Ledger(http=True).start()
    time.sleep(0.3)  # quiet: nothing wakes its loops but a request
    c = Conn(ledger)
    reply = c.call({"op": "step_started", "step": "a"})
    c.close()
    assert reply is not None
    assert reply["ok"] is True
    servers = [ledger._server, ledger._http]
    t = time.monotonic()
    ledger.close()
    assert time.monotonic() - t < 5
    assert [srv.fileno() for srv in servers if srv is not None] == [-1, -1]


def test_a_front_that_cannot_bind_says_why_and_leaks_no_descriptor() -> None:
    """A failed bind is the bind's error (not one about the wake-up pipe), and the pipe is
    closed."""
    folder = tempfile.mkdtemp(prefix="cp-test-")
    path = os.path.join(folder, "s.sock")
    first = _SocketServer(path, _SocketHandler)
    try:
        before = sorted(os.listdir("/proc/self/fd"))
        with pytest.raises(OSError, match="in use"):
            _SocketServer(path, _SocketHandler)
        assert sorted(os.listdir("/proc/self/fd")) == before
    finally:
        first.server_close()
        shutil.rmtree(folder, ignore_errors=True)
