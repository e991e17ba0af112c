"""``smtp_effect``: a mail side effect of a run whose Message-ID is derived from the effect's key,
sent with ``smtplib`` to the harness's real SMTP stand-in on a real ledger.

A crash between the send and the record re-sends the same Message-ID, which the ledger
deduplicates; a refusal or a dropped connection is an error and is not recorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from crashpoint.checkpoint import (
    MailEffectError,
    Store,
    message_id_for,
    open_run,
    plan,
    smtp_effect,
)
from crashpoint.harness import KillAt, Ledger
from crashpoint.harness._standins._smtp import SmtpSink

if TYPE_CHECKING:
    from conftest import StoreFactory

TOKEN = "trial-token-9"  # noqa: S105 (a test token)
MAIL = {"to": ["ops@example.org"], "subject": "Digest", "body": "3 rows\n"}


@pytest.fixture
def world() -> Iterator[tuple[Ledger, SmtpSink]]:
    with Ledger() as ledger, SmtpSink(ledger.handle, TOKEN) as sink:
        ledger.begin_attempt(1, None)
        yield ledger, sink


def agent(store: Store, sink: SmtpSink, **kw: Any) -> Any:
    send = smtp_effect(
        sink.host, sink.port, user="agent", password=TOKEN, sender="agent@example.org", **kw
    )
    with open_run(store, "digest-7") as run:
        return run.step("notify", lambda: run.effect("email", MAIL, send))


KEY = "digest-7:0.notify:email:0"


def test_message_ids_are_stable_per_key_and_distinct_across_keys() -> None:
    assert message_id_for(KEY) == message_id_for(KEY)
    assert message_id_for(KEY) != message_id_for(KEY.replace(":0", ":1"))
    assert message_id_for("a b") != message_id_for("a.b")  # the digest tells them apart
    mid = message_id_for(KEY)
    assert mid.startswith("<digest-7.0.notify.email.0.")
    assert mid.endswith("@crashpoint.invalid>")


def test_the_mail_is_one_effect_keyed_by_its_derived_message_id(
    world: tuple[Ledger, SmtpSink], store_factory: StoreFactory
) -> None:
    ledger, sink = world
    result = agent(store_factory.make("s"), sink)
    assert result == {"message_id": message_id_for(KEY), "refused": {}}
    (ev,) = [e for e in ledger.events if e["op"] == "effect"]
    assert (ev["kind"], ev["key"], ev["applied"]) == ("mail", message_id_for(KEY), True)
    assert ev["payload"] == {
        "from": "agent@example.org",
        "to": ["ops@example.org"],
        "subject": "Digest",
        "body": "3 rows\n",
    }
    agent(store_factory.make("s"), sink)  # recorded: replayed, not sent
    assert len([e for e in ledger.events if e["op"] == "effect"]) == 1


def test_a_kill_in_doubt_resends_the_same_message_id_and_is_deduplicated(
    world: tuple[Ledger, SmtpSink], store_factory: StoreFactory
) -> None:
    ledger, sink = world
    ledger.kills = [KillAt(attempt=1, op="effect", name="mail", phase="in_doubt")]
    store = store_factory.make("s")
    with pytest.raises(MailEffectError) as exc:  # applied; the reply never came
        agent(store, sink)
    assert "SMTPServerDisconnected" in str(exc.value)
    assert any(line.action == "in-doubt" for line in plan(store, "digest-7"))
    assert agent(store, sink)["message_id"] == message_id_for(KEY)  # resumed
    effects = [e for e in ledger.events if e["op"] == "effect"]
    assert [(e["key"], e["applied"]) for e in effects] == [
        (message_id_for(KEY), True),
        (message_id_for(KEY), False),
    ]
    assert sum(ledger.applied_counts().values()) == 1


def test_a_wrong_password_is_an_error_and_not_recorded(
    world: tuple[Ledger, SmtpSink], store_factory: StoreFactory
) -> None:
    ledger, sink = world
    send = smtp_effect(
        sink.host,
        sink.port,
        user="agent",
        password="nope",  # noqa: S106
        sender="a@x.org",
    )
    store = store_factory.make("s")
    with open_run(store, "r") as run, pytest.raises(MailEffectError, match="535"):
        run.step("notify", lambda: run.effect("email", MAIL, send))
    assert ledger.events == []
    assert any(line.action == "in-doubt" for line in plan(store, "r"))


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ("hello", "must be a dict"),
        ({"subject": "x", "body": "y"}, "'to' must be an address"),
        ({"to": [], "body": "y"}, "'to' must be an address"),
    ],
)
def test_a_bad_payload_is_a_clear_error(
    world: tuple[Ledger, SmtpSink], payload: Any, match: str
) -> None:
    _, sink = world
    send = smtp_effect(sink.host, sink.port, user="agent", password=TOKEN, sender="a@x.org")
    with pytest.raises(ValueError, match=match):
        send(payload, KEY)


def test_bad_arguments_are_refused_up_front() -> None:
    with pytest.raises(ValueError, match="both user and password"):
        smtp_effect("127.0.0.1", 25, user="u")
    with pytest.raises(ValueError, match="not a host and a port"):
        smtp_effect("127.0.0.1", 0)
