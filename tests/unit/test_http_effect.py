"""``http_effect``: an HTTP side effect of a run, keyed by ``Idempotency-Key``, against a real
local HTTP server (``http.server`` in a thread, recording every request and deduplicating by
key as a real service would).

The key is the run's deterministic effect key and survives a real ``kill -9`` between the
request and the journal record (the ``effect.after_call`` failpoint in a real interpreter); a
non-2xx reply or no reply is an error and is not recorded; a recorded effect is not sent again.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import _pgdb
from crashpoint.checkpoint import HttpEffectError, Store, http_effect, open_run, plan
from crashpoint.harness import Ledger

# one database for the module, emptied before each test (not one created and dropped per test)
pg_module_database, pg_dsn = _pgdb.pg_module_database, _pgdb.pg_dsn

if TYPE_CHECKING:
    from conftest import StoreFactory


class Service:
    """A webhook service: records each request, applies each Idempotency-Key once, and answers
    from ``script`` (a list of (status, body) taken one per request) before its default 200."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.applied: dict[str, Any] = {}
        self.script: list[tuple[int, str]] = []
        svc = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                svc.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers.items()),
                        "body": body,
                    }
                )
                if svc.script:
                    code, text = svc.script.pop(0)
                    self._send(code, text.encode(), "text/plain")
                    return
                key = self.headers.get("Idempotency-Key")
                new = key is None or key not in svc.applied
                if key is not None and new:
                    svc.applied[key] = json.loads(body or b"null")
                self._send(200, json.dumps({"applied": new}).encode(), "application/json")

            do_POST = do_PUT = do_DELETE = _any

            def _send(self, code: int, data: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def keys(self) -> list[str | None]:
        return [r["headers"].get("Idempotency-Key") for r in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def service() -> Iterator[Service]:
    s = Service()
    try:
        yield s
    finally:
        s.close()


def notify(store: Store, url: str, **kw: Any) -> Any:
    with open_run(store, "report-42", steps=["fetch", "notify"]) as run:
        rows = run.step("fetch", lambda: [1, 2, 3])
        return run.step(
            "notify", lambda: run.effect("webhook", {"rows": len(rows)}, http_effect(url, **kw))
        )


KEY = "report-42:1.notify:webhook:0"


# -- the request ----------------------------------------------------------------------------------


# file store only: reads the journal's files on disk
def test_the_effect_key_goes_out_as_idempotency_key_and_the_reply_is_recorded(
    service: Service, tmp_path: Path
) -> None:
    store = Store(tmp_path / "store")
    result = notify(store, service.url + "/hooks/done", headers={"Authorization": "Bearer x"})
    assert result == {"status": 200, "body": {"applied": True}}
    (req,) = service.requests
    assert (req["method"], req["path"]) == ("POST", "/hooks/done")
    assert req["headers"]["Idempotency-Key"] == KEY
    assert req["headers"]["Content-Type"] == "application/json"
    assert req["headers"]["Authorization"] == "Bearer x"
    assert json.loads(req["body"]) == {"rows": 3}
    journal = b"".join(p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file())
    assert b"Bearer x" not in journal  # headers stay out of the journal


def test_resume_skips_a_recorded_effect(service: Service, store_factory: StoreFactory) -> None:
    store = store_factory.make()
    first = notify(store, service.url + "/hook")
    assert notify(store, service.url + "/hook") == first  # replayed from the journal
    assert len(service.requests) == 1


def test_other_methods_and_no_body(service: Service, store_factory: StoreFactory) -> None:
    with open_run(store_factory.make(), "r") as run:
        run.step(
            "drop",
            lambda: run.effect(
                "delete", None, http_effect(service.url + "/items/7", method="delete")
            ),
        )
    (req,) = service.requests
    assert (req["method"], req["body"]) == ("DELETE", b"")
    assert "Content-Type" not in req["headers"]
    assert req["headers"]["Idempotency-Key"] == "r:0.drop:delete:0"


def test_a_key_that_is_not_printable_ascii_is_percent_encoded(
    service: Service, store_factory: StoreFactory
) -> None:
    with open_run(store_factory.make(), "r") as run:
        run.step("café", lambda: run.effect("ping", {}, http_effect(service.url + "/p")))
    assert service.keys() == ["r%3A0.caf%C3%A9%3Aping%3A0"]


# -- failures are errors, not recorded ------------------------------------------------------------


def test_a_500_is_an_error_with_status_and_body_and_is_not_recorded(
    service: Service, store_factory: StoreFactory
) -> None:
    store = store_factory.make()
    service.script = [(500, "database is down")]
    with pytest.raises(HttpEffectError) as exc:
        notify(store, service.url + "/hook")
    assert exc.value.status == 500
    assert exc.value.body == "database is down"
    assert exc.value.key == KEY
    assert "was answered 500" in str(exc.value)
    assert "'database is down'" in str(exc.value)
    assert ("in-doubt", f"effect webhook key={KEY} (step notify)") in [
        (line.action, line.what) for line in plan(store, "report-42")
    ]
    # resumed: sent again with the same key, now answered, and recorded
    assert notify(store, service.url + "/hook") == {"status": 200, "body": {"applied": True}}
    assert service.keys() == [KEY, KEY]
    notify(store, service.url + "/hook")
    assert len(service.requests) == 2


def test_no_reply_is_an_error_and_is_not_recorded(store_factory: StoreFactory) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    store = store_factory.make()
    with pytest.raises(HttpEffectError) as exc:
        notify(store, url)
    assert exc.value.status is None
    assert "got no reply" in str(exc.value)
    assert any(line.action == "in-doubt" for line in plan(store, "report-42"))


def test_retries_resend_the_same_key(service: Service, store_factory: StoreFactory) -> None:
    service.script = [(503, "busy"), (429, "slow down")]
    assert notify(store_factory.make(), service.url + "/hook", retries=2)["status"] == 200
    assert service.keys() == [KEY] * 3


def test_a_400_is_not_retried(service: Service, store_factory: StoreFactory) -> None:
    service.script = [(400, "bad field")]
    with pytest.raises(HttpEffectError, match="answered 400"):
        notify(store_factory.make(), service.url + "/hook", retries=3)
    assert len(service.requests) == 1


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://x/y", "http:///nohost"])
def test_only_http_urls_are_taken(url: str) -> None:
    with pytest.raises(ValueError, match="is not an http"):
        http_effect(url)


def test_a_password_in_the_url_stays_out_of_the_error(store_factory: StoreFactory) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://user:hunter2@127.0.0.1:{s.getsockname()[1]}/hook"
    with pytest.raises(HttpEffectError) as exc:
        notify(store_factory.make(), url)
    assert "hunter2" not in str(exc.value)
    assert "user:***@127.0.0.1" in str(exc.value)


# -- a real kill -9 between the request and the record ------------------------------------------

AGENT = textwrap.dedent("""
    import json, sys
    from crashpoint.checkpoint import http_effect, open_run, open_store
    with open_run(open_store(sys.argv[1]), "report-42", steps=["fetch", "notify"]) as run:
        rows = run.step("fetch", lambda: [1, 2, 3])
        sent = run.step("notify", lambda: run.effect("webhook", {"rows": len(rows)},
                                                     http_effect(sys.argv[2])))
        print(json.dumps(run.finish(sent)))
""")


def _agent(
    tmp_path: Path, url: str, failpoints: str = "", store: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CRASHPOINT_", "PYTEST_"))}
    if failpoints:  # armed only inside an attempt: the harness's per-attempt token
        env |= {"CRASHPOINT_FAILPOINTS": failpoints, "CRASHPOINT_REAP_TOKEN": secrets.token_hex(16)}
    return subprocess.run(
        [sys.executable, "-c", AGENT, store or str(tmp_path / "store"), url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        start_new_session=True,
        check=False,
    )


def test_a_kill_after_the_request_resends_the_same_key_once(
    service: Service, tmp_path: Path, store_factory: StoreFactory
) -> None:
    url = service.url + "/hooks/report"
    where = store_factory.location()
    killed = _agent(tmp_path, url, "effect.after_call=kill", where)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert service.keys() == [KEY]  # the service applied it; the run never recorded it

    resumed = _agent(tmp_path, url, store=where)
    assert resumed.returncode == 0, resumed.stderr
    assert service.keys() == [KEY, KEY]  # re-sent with the SAME key...
    assert list(service.applied) == [KEY]  # ...so the service applied it once
    assert json.loads(resumed.stdout) == {"status": 200, "body": {"applied": False}}

    again = _agent(tmp_path, url, store=where)  # finished: replays, sends nothing
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(resumed.stdout)
    assert len(service.requests) == 2


# -- harness-visible: the ledger's HTTP front judges it ------------------------------------------


def test_through_the_ledger_http_front_a_resend_is_deduplicated(
    store_factory: StoreFactory,
) -> None:
    store = store_factory.make()
    with Ledger(http=True) as ledger:
        url = ledger.http_url + "/effects/webhook"
        send = http_effect(url)
        sent: list[str] = []

        class Killed(BaseException):
            pass

        def once_then_die(payload: Any, key: str) -> Any:
            result = send(payload, key)
            sent.append(key)
            if len(sent) == 1:
                raise Killed  # applied by the ledger, never recorded by the run
            return result

        def agent() -> Any:
            with open_run(store, "report-42") as run:
                return run.step("notify", lambda: run.effect("webhook", {"rows": 3}, once_then_die))

        with pytest.raises(Killed):
            agent()
        agent()
    effects = [e for e in ledger.events if e["op"] == "effect"]
    assert [(e["kind"], e["key"], e["applied"]) for e in effects] == [
        ("webhook", "report-42:0.notify:webhook:0", True),
        ("webhook", "report-42:0.notify:webhook:0", False),
    ]
    assert ledger.applied_counts() == {("webhook", '{"rows":3}'): 1}
