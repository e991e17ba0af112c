"""The stand-in services serve the trial's own processes, found by where a connection comes
from, not by a secret in the URL; everyone else needs the token and cannot starve the agent.

Real processes and real loopback connections: an "agent" is a Python child started in its own
session and registered with the ledger as the harness does (``begin_attempt``)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crashpoint.harness import Ledger
from crashpoint.harness._standins._peer import Peer, identify, socket_owner

REQUEST = """
import os, sys, urllib.request, urllib.error
url = sys.argv[1]
req = urllib.request.Request(url, data=b'{"n": 1}', method="POST",
                             headers={"Idempotency-Key": sys.argv[2]})
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
"""

# the same request, made by a grandchild that left the agent's session (setsid)
DETACHED = """
import os, subprocess, sys
out = subprocess.run([sys.executable, "-c", sys.argv[3], sys.argv[1], sys.argv[2]],
                     start_new_session=True, capture_output=True, text=True, timeout=60)
print(out.stdout.strip())
"""


@pytest.fixture
def bound(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(history_path=str(tmp_path / "history.jsonl"), http=True, bound=True) as led:
        yield led


def run_agent(ledger: Ledger, attempt: int, code: str, *args: str) -> str:
    """Run ``code`` as attempt ``attempt`` (own session, registered as the harness does)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    ledger.begin_attempt(attempt, proc.pid)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    assert proc.returncode == 0, err
    return out.strip()


def outsider(code: str, *args: str, user: list[str] | None = None, stdin: str = "") -> str:
    """Run ``code`` outside the trial (a child of this test, never registered)."""
    out = subprocess.run(
        [*(user or []), sys.executable, "-c", code, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_trials_process_is_served_without_any_token(bound: Ledger) -> None:
    url = bound.urls()["http"] + "/hook"
    assert bound.token not in url
    assert run_agent(bound, 1, REQUEST, url, "k1") == "200"
    # a process outside the trial, same user, same URL: refused, nothing recorded
    assert outsider(REQUEST, url, "k2") == "403"
    assert [(e["op"], e["key"]) for e in bound.events] == [("effect", "k1")]
    assert bound.refused["token"] == 1
    # a child of the agent that started a session of its own is still the trial's
    assert run_agent(bound, 2, DETACHED, url, "k3", REQUEST) == "200"
    assert [e["key"] for e in bound.events] == ["k1", "k3"]
    assert [e["attempt"] for e in bound.events] == [1, 2]


def test_a_reset_forgets_the_last_trials_processes(bound: Ledger) -> None:
    url = bound.urls()["http"] + "/hook"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        start_new_session=True,
    )
    try:
        bound.begin_attempt(1, proc.pid)
        bound.reset()  # the next trial: the process group above is not one of its attempts
        with socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0]))) as c:
            port = c.getsockname()[1]
            assert bound.identify(port, int(url.split(":")[2].split("/")[0])).attempt is None
    finally:
        proc.kill()
        proc.wait()


def test_identify_names_the_process_and_its_attempt(bound: Ledger) -> None:
    port = int(bound.http_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)) as c:
        mine = c.getsockname()[1]
        owner = socket_owner(mine, port)
        assert owner is not None
        assert owner[1] == os.geteuid()
        with subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
        ) as other:  # another session's tree does not hold our socket
            try:
                assert identify(mine, port, {7: other.pid}).attempt is None
            finally:
                other.kill()
        peer = identify(mine, port, {7: os.getpgid(0)}, ancestry=True)  # the machine's scan
        assert peer == Peer(attempt=7, uid=os.geteuid(), known=True, pid=os.getpid())
        assert "attempt 7" in peer.describe()
        outside = identify(mine, port, {7: 999_999_999}, ancestry=True)
        assert outside.attempt is None
        assert outside.known
        assert not outside.other_user
        assert "outside the trial" in outside.describe()
    assert identify(1, 2, {7: os.getpgid(0)}) == Peer()  # no such connection


def _as_nobody() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another user (CI runs as root)")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not found: cannot run a client as another user")
    probe = subprocess.run(
        [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable, "-c", ""],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.skip(f"cannot run Python as nobody here: {probe.stderr.decode()[-200:]}")
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


STEAL = """
import os, sys
secret = sys.stdin.read().encode()  # not in argv: this process's own cmdline would hold it
found = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for name in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as fh:
                if secret in fh.read():
                    found.append(f"{pid}/{name}")
        except OSError:
            pass
print(",".join(found) or "none")
"""


def test_another_user_can_neither_read_the_token_nor_act_as_the_agent(tmp_path: Path) -> None:
    nobody = _as_nobody()
    for bound in (False, True):  # even a standalone ledger serves only its own user
        with Ledger(history_path=str(tmp_path / f"h{bound}.jsonl"), http=True, bound=bound) as led:
            url = led.urls()["http"] + "/hook"
            # a registered agent holds the token in its environment while nobody looks
            agent = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)"],
                env={**os.environ, **led.env()},
                start_new_session=True,
            )
            try:
                led.begin_attempt(1, agent.pid)
                assert outsider(STEAL, user=nobody, stdin=led.token) == "none"
                assert outsider(REQUEST, url, "evil", user=nobody) == "403"
            finally:
                agent.kill()
                agent.wait()
            assert led.events == []
            assert led.forbidden
            assert "another user" in led.forbidden[0]["peer"]


#: outside connections held at once: over 6x the guest slots (MAX_GUESTS, 16), so a server
#: without the cap runs out of them (300 proved the same at twice the time)
OUTSIDERS = 100

HOLD = """
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
held = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port))
    if i % 2:
        s.sendall(b"POST /http/hook HTTP/1.1\\r\\nContent-Length: 10")  # half-sent
    held.append(s)
print("held", flush=True)
time.sleep(60)
"""


def test_100_outside_connections_do_not_starve_the_agent(bound: Ledger) -> None:
    port = int(bound.http_url.rsplit(":", 1)[1])
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(port), str(OUTSIDERS)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        assert run_agent(bound, 1, REQUEST, bound.urls()["http"] + "/hook", "k") == "200"
        assert time.monotonic() - t0 < 10  # not after the outsiders' timeouts
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    assert [e["key"] for e in bound.events] == ["k"]
    # the outsiders had at most max_guests slots, the rest were turned away at once
    assert bound.refused["guests"] >= OUTSIDERS - bound.max_guests - 10


TOKENED = """
import sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], data=b'{"n": 1}', method="POST",
                             headers={"Idempotency-Key": sys.argv[2],
                                      "X-Crashpoint-Token": sys.stdin.read().strip()})
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        print(r.status)
except urllib.error.HTTPError as e:
    print(e.code)
"""


def test_one_outside_user_cannot_take_every_guest_slot(bound: Ledger) -> None:
    """Another user holds 100 connections: it gets its share of the guest slots (4), and a
    helper of the trial's own user that carries the token (a daemon outside the agent's
    tree) is still served at once."""
    nobody = _as_nobody()
    port = int(bound.http_url.rsplit(":", 1)[1])
    holder = subprocess.Popen(
        [*nobody, sys.executable, "-c", HOLD, str(port), str(OUTSIDERS)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        url = bound.urls()["http"] + "/hook"
        assert outsider(TOKENED, url, "helper", stdin=bound.token) == "200"
        assert time.monotonic() - t0 < 4  # not after the outsider's guest timeouts (5 s)
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    assert [e["key"] for e in bound.events] == ["helper"]
    assert bound.refused["guests"] >= OUTSIDERS - 4 - 10
