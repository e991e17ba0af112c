"""The SMTP stand-in over real loopback sockets, with the stdlib's ``smtplib`` as the client.

Each accepted message is one ledger call made before the ``250``; a session must AUTH with the
trial's token; a kill drops the connection without a reply; a message re-sent under a fresh
random Message-ID is judged a duplicate by content, one re-sent under a stable Message-ID is
deduplicated by key; the limits refuse; ``close`` leaves no thread and no port behind.
"""

from __future__ import annotations

import os
import shutil
import smtplib
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from email.message import EmailMessage
from email.utils import make_msgid
from typing import Any

import pytest

from crashpoint.harness import Expect, Golden, KillAt, Ledger, Plan
from crashpoint.harness._checker._checks import TrialFacts, check_exactly_once
from crashpoint.harness._standins._smtp import SmtpSink

TOKEN = "s3cret-trial-token"  # noqa: S105 (a test token)


class Recorder:
    """A stand-in for the ledger's handle: records each call, replies ``reply``."""

    def __init__(self, reply: dict[str, Any] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.reply: dict[str, Any] | None = {"ok": True} if reply is None else reply
        self.refused: list[str] = []

    def __call__(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        self.calls.append(msg)
        return self.reply


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def sink(rec: Recorder) -> Iterator[SmtpSink]:
    s = SmtpSink(rec, TOKEN, rec.refused.append).start()
    try:
        yield s
    finally:
        s.close()


def mail(
    mid: str | None = "<report-7@agent.example>",
    subject: str = "Weekly report",
    body: str = "Hello,\nthe report is ready.\n",
) -> EmailMessage:
    m = EmailMessage()
    m["From"] = "agent@example.org"
    m["To"] = "zoe@example.org, adam@example.org"
    m["Subject"] = subject
    if mid:
        m["Message-ID"] = mid
    m.set_content(body)
    return m


def send(s: SmtpSink, m: EmailMessage, password: str | None = TOKEN) -> dict[str, Any]:
    with smtplib.SMTP(s.host, s.port, timeout=30) as c:
        if password is not None:
            c.login("agent", password)
        return dict(c.send_message(m))


def sink_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("smtp-sink")]


# -- a message is one effect ---------------------------------------------------------------------


def test_a_message_becomes_exactly_one_effect_with_its_content(
    sink: SmtpSink, rec: Recorder
) -> None:
    assert send(sink, mail(subject="Rapport été ✓")) == {}  # no recipient refused
    assert len(rec.calls) == 1
    call = rec.calls[0]
    assert call["op"] == "effect"
    assert call["kind"] == "mail"
    assert call["key"] == call["message_id"] == "<report-7@agent.example>"
    assert call["payload"] == {
        "from": "agent@example.org",
        "to": ["adam@example.org", "zoe@example.org"],
        "subject": "Rapport été ✓",
        "body": "Hello,\nthe report is ready.\n",
    }
    assert rec.refused == []


def test_the_payload_is_the_text_part_and_attachments_by_digest(
    sink: SmtpSink, rec: Recorder
) -> None:
    m = mail(mid=None)
    m.add_alternative("<p>Hello</p>", subtype="html")
    m.add_attachment(
        b"\x00\x01report", maintype="application", subtype="octet-stream", filename="r.bin"
    )
    send(sink, m)
    (call,) = rec.calls
    assert "key" not in call  # no Message-ID: a keyless effect, judged by content
    assert call["payload"]["body"] == "Hello,\nthe report is ready.\n"
    (att,) = call["payload"]["attachments"]
    assert att["filename"] == "r.bin"
    assert att["content_type"] == "application/octet-stream"
    assert len(att["sha256"]) == 64


def test_an_odd_message_is_still_one_effect(sink: SmtpSink, rec: Recorder) -> None:
    raw = (
        b"Subject: =?x-unknown?q?caf=E9?=\r\nMessage-ID:   \r\n"
        b"Content-Type: text/plain; charset=x-unknown\r\n"
        b"Content-Transfer-Encoding: quoted-printable\r\n\r\nbody =E9 =\r\nmore\r\n"
    )
    with smtplib.SMTP(sink.host, sink.port, timeout=30) as c:
        c.login("agent", TOKEN)
        c.sendmail("agent@example.org", ["b@x.org", "a@x.org"], raw)
    (call,) = rec.calls
    assert "key" not in call  # an empty Message-ID is none
    assert call["payload"]["to"] == ["a@x.org", "b@x.org"]
    assert call["payload"]["body"].startswith("body ")


# -- only the trial's token gets in --------------------------------------------------------------


def test_mail_without_auth_is_refused_and_reported_not_an_effect(
    sink: SmtpSink, rec: Recorder
) -> None:
    with pytest.raises(smtplib.SMTPSenderRefused) as exc:
        send(sink, mail(), password=None)
    assert exc.value.smtp_code == 530
    assert rec.calls == []
    assert len(rec.refused) == 1
    assert "MAIL without AUTH refused (530)" in rec.refused[0]
    assert sink.refused["auth"] == 1


def test_a_wrong_password_is_refused_and_reported_not_an_effect(
    sink: SmtpSink, rec: Recorder
) -> None:
    with pytest.raises(smtplib.SMTPAuthenticationError) as exc:
        send(sink, mail(), password="guess")  # noqa: S106
    assert exc.value.smtp_code == 535
    assert rec.calls == []
    assert rec.refused
    assert all("(535)" in r and "guess" not in r for r in rec.refused)


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_both_auth_mechanisms_take_the_token(sink: SmtpSink, rec: Recorder, mechanism: str) -> None:
    with smtplib.SMTP(sink.host, sink.port, timeout=30) as c:
        c.ehlo()
        c.user, c.password = "anyone", TOKEN
        auth = c.auth_plain if mechanism == "PLAIN" else c.auth_login
        code, _ = c.auth(mechanism, auth)
        assert code == 235
        c.send_message(mail())
    assert len(rec.calls) == 1


# -- a kill drops the connection without a reply ------------------------------------------------


def test_a_killed_agent_never_hears_250(rec: Recorder) -> None:
    rec.reply = None  # what Ledger.handle returns when it killed the agent at this effect
    with SmtpSink(rec, TOKEN) as s, smtplib.SMTP(s.host, s.port, timeout=30) as c:
        c.login("agent", TOKEN)
        with pytest.raises(smtplib.SMTPServerDisconnected):
            c.send_message(mail())
    assert len(rec.calls) == 1


@pytest.mark.parametrize(("phase", "applied"), [("before", 0), ("in_doubt", 1)])
def test_a_kill_at_a_message_with_the_real_ledger(phase: str, applied: int) -> None:
    """Before: the message was not accepted; in doubt: it was, and the agent never heard."""
    with Ledger() as ledger:
        ledger.begin_attempt(1, None)  # no process group: the ledger only records the kill
        ledger.kills = [KillAt(attempt=1, op="effect", name="mail", phase=phase)]
        with SmtpSink(ledger.handle, TOKEN) as s, smtplib.SMTP(s.host, s.port, timeout=30) as c:
            c.login("agent", TOKEN)
            with pytest.raises(smtplib.SMTPServerDisconnected):
                c.send_message(mail())
        assert [k["phase"] for k in ledger.killed] == [phase]
        assert sum(ledger.applied_counts().values()) == applied


def test_an_error_reply_from_the_ledger_is_a_transient_failure(rec: Recorder) -> None:
    rec.reply = {"ok": False, "error": "an effect's key must be a string"}
    with SmtpSink(rec, TOKEN) as s, pytest.raises(smtplib.SMTPDataError) as exc:
        send(s, mail())
    assert exc.value.smtp_code == 451


# -- judging: a fresh random Message-ID is a duplicate, a stable one is deduplicated -------------


def judge(golden: Ledger, trial: Ledger) -> tuple[bool, str]:
    g = Golden([], golden.events, Counter(golden.applied_counts()), b"", 0.0)
    applied = Counter({k: n for k, n in trial.applied_counts().items() if n})
    facts = TrialFacts(g, Plan(()), Expect(), [], trial.events, applied, "canary", [], 0)
    r = check_exactly_once(facts)
    return r.ok, r.message


def run_sends(mids: list[str | None]) -> tuple[Ledger, list[dict[str, Any]]]:
    """Send the same mail once per Message-ID in ``mids`` through a sink on a real ledger."""
    ledger = Ledger().start()
    replies = []
    with SmtpSink(ledger.handle, TOKEN) as s:
        for mid in mids:
            replies.append(send(s, mail(mid=mid)))
    ledger.close()
    return ledger, replies


def test_a_resend_under_a_fresh_random_message_id_is_judged_a_duplicate() -> None:
    golden, _ = run_sends([make_msgid()])
    trial, _ = run_sends([make_msgid(), make_msgid()])  # e.g. re-sent after a crash
    ok, message = judge(golden, trial)
    assert not ok
    assert "DUPLICATED mail" in message
    assert "applied 2x, golden 1x: under 2 different keys" in message


def test_a_resend_under_a_stable_message_id_is_deduplicated_by_key() -> None:
    golden, _ = run_sends(["<run-7.notify@agent.example>"])
    trial, replies = run_sends(["<run-7.notify@agent.example>"] * 2)
    assert replies == [{}, {}]  # both accepted with 250, as a real service would
    assert [e.duplicates for e in trial.effects.values()] == [1]
    assert judge(golden, trial) == (True, "")


def test_a_resend_without_a_message_id_is_judged_by_content() -> None:
    golden, _ = run_sends([None])
    trial, _ = run_sends([None, None])
    ok, message = judge(golden, trial)
    assert not ok
    assert "2 sends of the same payload, no key" in message


def test_different_random_message_ids_alone_are_no_difference() -> None:
    """The golden run's random Message-ID is not the trial's: still the same mail."""
    golden, _ = run_sends([make_msgid()])
    trial, _ = run_sends([make_msgid()])
    assert judge(golden, trial) == (True, "")


# -- limits ---------------------------------------------------------------------------------------


def test_an_oversize_message_is_refused_and_not_an_effect(rec: Recorder) -> None:
    big = mail(body=("x" * 70 + "\n") * 100)
    with SmtpSink(rec, TOKEN, rec.refused.append, max_message_bytes=2000) as s:
        with pytest.raises(smtplib.SMTPSenderRefused) as exc:  # smtplib announces SIZE=
            send(s, big)
        assert exc.value.smtp_code == 552
        with smtplib.SMTP(s.host, s.port, timeout=30) as c:  # no SIZE: refused after DATA
            c.login("agent", TOKEN)
            c.mail("agent@example.org")
            c.rcpt("zoe@example.org")
            code, _ = c.data(big.as_string())
            assert code == 552
        send(s, mail())  # a small one still goes through
    assert len(rec.calls) == 1
    assert s.refused["size"] == 2


def test_recipients_over_the_limit_are_refused(rec: Recorder) -> None:
    m = mail()
    del m["To"]
    m["To"] = "a@x.org, b@x.org, c@x.org"
    with SmtpSink(rec, TOKEN, max_recipients=2) as s:
        refused = send(s, m)
    assert list(refused) == ["c@x.org"]
    assert refused["c@x.org"][0] == 452
    assert rec.calls[0]["payload"]["to"] == ["a@x.org", "b@x.org"]


@pytest.mark.parametrize("trusted", [True, False], ids=["trial", "guests"])
def test_sessions_over_the_limit_get_421(rec: Recorder, trusted: bool) -> None:
    limits = {"max_connections": 1} if trusted else {"max_guests": 1}
    with (
        SmtpSink(rec, TOKEN, admits=lambda c, s, t: trusted, **limits) as s,  # type: ignore[arg-type]
        smtplib.SMTP(s.host, s.port, timeout=30) as first,
    ):
        with pytest.raises(smtplib.SMTPConnectError) as exc:
            smtplib.SMTP(s.host, s.port, timeout=30)
        assert exc.value.smtp_code == 421
        first.login("agent", TOKEN)
        first.send_message(mail())  # the first session is unharmed
    assert len(rec.calls) == 1
    assert s.refused == {"connections" if trusted else "guests": 1}


# -- who may send ---------------------------------------------------------------------------------


def test_the_trials_own_session_sends_without_a_login_or_with_any(rec: Recorder) -> None:
    with SmtpSink(rec, TOKEN, rec.refused.append, admits=lambda c, s, t: True) as s:
        with smtplib.SMTP(s.host, s.port, timeout=30) as c:
            c.send_message(mail(subject="no login"))
        with smtplib.SMTP(s.host, s.port, timeout=30) as c:
            c.login("whoever", "any password at all")
            c.send_message(mail(subject="any login"))
    assert [m["payload"]["subject"] for m in rec.calls] == ["no login", "any login"]
    assert rec.refused == []


def test_a_guest_must_log_in_with_the_token_and_is_asked_thoroughly_once(
    rec: Recorder,
) -> None:
    asked: list[bool] = []

    def admits(client: int, server: int, thorough: bool) -> bool:
        asked.append(thorough)
        return False

    with SmtpSink(rec, TOKEN, rec.refused.append, admits=admits) as s:
        with smtplib.SMTP(s.host, s.port, timeout=30) as c:
            with pytest.raises(smtplib.SMTPSenderRefused) as exc:
                c.send_message(mail())
            assert exc.value.smtp_code == 530
        with smtplib.SMTP(s.host, s.port, timeout=30) as c:
            c.login("agent", TOKEN)
            c.send_message(mail(subject="with the token"))
    assert [m["payload"]["subject"] for m in rec.calls] == ["with the token"]
    assert asked[:3] == [False, True, False]  # connect; MAIL without AUTH; second connect
    assert any("CRASHPOINT_SMTP_PASSWORD" in r for r in rec.refused)


def test_idle_guests_are_closed_and_never_starve_the_trials_session(rec: Recorder) -> None:
    outsiders: set[int] = set()  # client ports, known before they connect
    with SmtpSink(
        rec,
        TOKEN,
        admits=lambda c, s, t: c not in outsiders,
        max_guests=4,
        guest_timeout=0.5,
    ) as s:
        guests = []
        for _ in range(30):
            g = socket.socket()
            g.bind(("127.0.0.1", 0))
            outsiders.add(g.getsockname()[1])
            g.connect((s.host, s.port))
            guests.append(g)
        try:  # the agent's session, while 30 outsiders hold connections
            with smtplib.SMTP(s.host, s.port, timeout=30) as c:
                c.send_message(mail(subject="from the agent"))
            # the guests within the limit were closed after guest_timeout, the rest at once
            for g in guests:
                g.settimeout(10)
                got = b""
                while chunk := g.recv(4096):
                    got += chunk
                assert b"421" in got
        finally:
            for g in guests:
                g.close()
    assert [m["payload"]["subject"] for m in rec.calls] == ["from the agent"]
    assert s.refused.get("guests") == 26
    assert s.refused.get("idle") == 4


def test_one_outside_user_cannot_take_every_guest_session(rec: Recorder) -> None:
    """Another user (nobody) holds 30 sessions: it gets its share (4 of 16), and a guest of
    this user that logs in with the token is still served at once."""
    if os.geteuid() != 0:
        pytest.skip("needs root to open sessions as another user (CI runs as root)")
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) not found: cannot run a client as another user")
    nobody = [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    if subprocess.run([*nobody, sys.executable, "-c", ""], check=False).returncode != 0:
        pytest.skip("cannot run Python as user nobody here")
    hold = (
        "import socket, sys, time\n"
        "held = [socket.create_connection(('127.0.0.1', int(sys.argv[1]))) for _ in range(30)]\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    with SmtpSink(rec, TOKEN, admits=lambda c, s, t: False, guest_timeout=5.0) as s:
        holder = subprocess.Popen(
            [*nobody, sys.executable, "-c", hold, str(s.port)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            t0 = time.monotonic()
            with smtplib.SMTP(s.host, s.port, timeout=30) as c:
                c.login("helper", TOKEN)
                c.send_message(mail(subject="from a helper"))
            assert time.monotonic() - t0 < 4  # not after the outsider's login timeouts
        finally:
            os.killpg(holder.pid, 9)
            holder.wait()
            holder.stdout.close()  # type: ignore[union-attr]
    assert [m["payload"]["subject"] for m in rec.calls] == ["from a helper"]
    assert s.refused.get("guests", 0) >= 30 - 4


def test_a_quiet_session_is_closed_after_the_idle_timeout(rec: Recorder) -> None:
    with (
        SmtpSink(rec, TOKEN, idle_timeout=0.3) as s,
        socket.create_connection((s.host, s.port), timeout=30) as c,
    ):
        assert c.recv(1024).startswith(b"220")
        assert c.recv(1024) == b""  # the sink closed it (the recv timeout is far longer)


def test_bad_limits_and_no_token_are_refused_up_front(rec: Recorder) -> None:
    with pytest.raises(ValueError, match="token"):
        SmtpSink(rec, "")
    with pytest.raises(ValueError, match="max_message_bytes 0"):
        SmtpSink(rec, TOKEN, max_message_bytes=0)


# -- lifecycle ------------------------------------------------------------------------------------


def test_close_leaves_no_thread_and_no_port_even_with_a_session_open(rec: Recorder) -> None:
    before = sink_threads()
    s = SmtpSink(rec, TOKEN).start()
    host, port = s.host, s.port
    assert host == "127.0.0.1"
    assert len(sink_threads()) == len(before) + 1
    client = smtplib.SMTP(host, port, timeout=30)  # a session left open by the agent
    client.login("agent", TOKEN)
    s.close()
    s.close()  # idempotent
    assert sink_threads() == before
    with pytest.raises(smtplib.SMTPServerDisconnected):
        client.noop()
    client.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, port), timeout=5).close()
    with socket.socket() as again:  # the port is free to bind again
        again.bind((host, port))
