"""The stand-in service front on real loopback sockets: the trial's token (403 and a logged,
unjudged entry otherwise), the HTTP stand-in (effects ``METHOD /path``, GETs as events,
Idempotency-Key), scripted replies and failures, planned network faults, kills before and in
doubt, and the LLM front (with a fixed stand-in: the real one is another module's)."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashpoint.errors import ServiceSpecError
from crashpoint.harness import Golden, KillAt, Ledger
from crashpoint.harness._spec import Failure, NetFault, parse_services
from crashpoint.harness._standins import LLMResult, LLMStandIn


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    spec = parse_services(
        {
            "http": {
                "routes": {
                    "POST /hook": {
                        "status": 202,
                        "body": {"id": "w-1"},
                        "headers": {"X-Hook": "yes"},
                    },
                    "GET /search": {"body": "plain text"},
                    "POST /slow": {"latency": 30},
                    "POST /boom": {"fail": 500},
                    "POST /reset": {"fail": "reset"},
                    "POST /hang": {"fail": "timeout"},
                    "/any": {"status": 201},
                    "POST /busy": {"status": 503, "body": {"error": "busy"}},
                }
            }
        }
    )
    with Ledger(
        history_path=str(tmp_path / "history.jsonl"), http=True, services=spec, idle_timeout=60
    ) as led:
        yield led


def request(
    url: str,
    method: str = "POST",
    body: bytes | None = b"{}",
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(  # noqa: S310 - loopback
        url,
        data=body,
        method=method,
        headers=headers or {},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, dict(err.headers), err.read()


def history(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (tmp_path / "history.jsonl").read_text().splitlines()]


# -- the token -------------------------------------------------------------------------------------


def test_outside_the_trial_every_request_needs_the_trials_token(
    ledger: Ledger, tmp_path: Path
) -> None:
    ledger.bound = True  # as in a trial: this test's process is not one of its attempts
    root = ledger.http_url
    wrong = "0" * len(ledger.token)
    for url, headers in (
        (f"{root}/effects/pay", {}),
        (f"{root}/{wrong}/effects/pay", {}),
        (f"{root}/{wrong}/http/hook", {}),
        (f"{root}/http/hook", {}),
        (f"{root}/{wrong}/v1/models", {}),
        (f"{root}/", {}),
        (f"{root}/{ledger.token[:-1]}/http/hook", {}),
        (f"{root}/http/hook", {"X-Crashpoint-Token": wrong}),
        (f"{root}/http/hook", {"Authorization": f"Basic {ledger.token}"}),
    ):
        code, _h, body = request(
            url, body=b'{"to": "a"}', headers={"Idempotency-Key": "k", **headers}
        )
        assert code == 403, url
        assert b"trial's token" in body
        assert b"outside the trial" in body
    # nothing was recorded: no event, no effect, no boundary
    assert ledger.events == []
    assert ledger.effects == {}
    assert Golden([], ledger.events, {}, b"", 0.0).boundaries() == []  # type: ignore[arg-type]
    assert ledger.refused["token"] == 9
    assert len(ledger.forbidden) == 9
    logged = history(tmp_path)
    assert [e["op"] for e in logged] == ["forbidden"] * 9
    assert logged[1]["path"] == f"/{wrong}/effects/pay"
    assert all(ledger.token not in json.dumps(e) for e in logged)
    # the token goes through: as a header, a bearer, or the first segment of the path
    hook = ledger.urls()["http"] + "/hook"
    assert request(hook, headers={"X-Crashpoint-Token": ledger.token})[0] == 202
    assert request(hook, headers={"Authorization": f"Bearer {ledger.token}"})[0] == 202
    assert request(f"{root}/{ledger.token}/http/hook")[0] == 202
    assert [e["op"] for e in ledger.events] == ["effect"] * 3


def test_a_new_trial_has_a_new_token_on_the_same_port(ledger: Ledger) -> None:
    ledger.bound = True
    old = ledger.token
    hook = ledger.urls()["http"] + "/hook"
    assert request(hook, headers={"X-Crashpoint-Token": old})[0] == 202
    ledger.reset()
    assert ledger.token != old
    assert ledger.urls()["http"] + "/hook" == hook  # the same address: no secret in it
    assert request(hook, headers={"X-Crashpoint-Token": old})[0] == 403  # a past trial's
    assert request(hook, headers={"X-Crashpoint-Token": ledger.token})[0] == 202
    assert len(ledger.events) == 1


def test_a_post_is_an_effect_and_a_get_an_event(ledger: Ledger) -> None:
    base = ledger.urls()["http"]
    code, headers, body = request(base + "/hook", body=b'{"b": 2, "a": 1}')
    assert (code, json.loads(body), headers["X-Hook"]) == (202, {"id": "w-1"}, "yes")
    code, headers, body = request(base + "/search?q=x", method="GET", body=None)
    assert (code, body, headers["Content-Type"]) == (
        200,
        b"plain text",
        "text/plain; charset=utf-8",
    )
    assert request(base + "/notes/7", method="PUT", body=b"not json")[0] == 200  # the default
    assert request(base + "/any", method="DELETE", body=None)[0] == 201  # '/path': any method
    ev = ledger.events
    assert [(e["op"], e.get("kind") or e.get("name")) for e in ev] == [
        ("effect", "POST /hook"),
        ("event", "GET /search"),
        ("effect", "PUT /notes/7"),
        ("effect", "DELETE /any"),
    ]
    assert ev[0]["payload"] == {"a": 1, "b": 2}
    assert ev[0]["keyless"] is True
    assert ev[1]["query"] == "q=x"
    assert "payload" not in ev[1]
    assert ev[2]["payload"] == "not json"
    assert ledger.applied_counts() == {
        ("POST /hook", '{"a":1,"b":2}'): 1,
        ("PUT /notes/7", '"not json"'): 1,
        ("DELETE /any", "null"): 1,
    }


def test_idempotency_key_deduplicates_and_says_replayed(ledger: Ledger) -> None:
    base = ledger.urls()["http"]
    hdr = {"Idempotency-Key": "run-1:hook:0"}
    code, headers, _ = request(base + "/hook", headers=hdr)
    assert code == 202
    assert "Idempotent-Replayed" not in headers
    code, headers, _ = request(base + "/hook", headers=hdr)
    assert code == 202
    assert headers["Idempotent-Replayed"] == "true"
    assert [e["applied"] for e in ledger.events] == [True, False]
    # keyless: each send applies (judged by content later)
    request(base + "/hook")
    request(base + "/hook")
    assert ledger.applied_counts() == {("POST /hook", "{}"): 3}


def test_a_scripted_latency_holds_the_reply(ledger: Ledger) -> None:
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        request(ledger.urls()["http"] + "/slow", timeout=1)
    assert ledger.events[0]["kind"] == "POST /slow"


def test_scripted_failures_reach_the_client_and_apply_nothing(ledger: Ledger) -> None:
    base = ledger.urls()["http"]
    code, _h, _b = request(base + "/boom")
    assert code == 500
    with pytest.raises(
        (ConnectionResetError, http.client.RemoteDisconnected, urllib.error.URLError)
    ):
        request(base + "/reset")
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        request(base + "/hang", timeout=1)
    assert [(e["kind"], e["failed"], e["applied"]) for e in ledger.events] == [
        ("POST /boom", "status 500", False),
        ("POST /reset", "reset", False),
        ("POST /hang", "timeout", False),
    ]
    assert ledger.applied_counts() == {}


def test_a_scripted_error_status_is_a_failed_request_not_an_effect(ledger: Ledger) -> None:
    # a route that answers 503 refused the request: recorded as failed, never applied, so
    # the checks do not take it for a completed call (issue 23)
    code, _h, body = request(ledger.urls()["http"] + "/busy")
    assert (code, json.loads(body)) == (503, {"error": "busy"})
    assert [(e["kind"], e.get("failed"), e["applied"]) for e in ledger.events] == [
        ("POST /busy", "status 503", False)
    ]
    assert ledger.applied_counts() == {}


def test_a_held_reply_ends_with_the_trial(ledger: Ledger) -> None:
    errors: list[BaseException] = []

    def call() -> None:
        try:
            request(ledger.urls()["http"] + "/hang", timeout=50)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    for _ in range(200):
        if ledger.events:
            break
        threading.Event().wait(0.05)
    ledger.reset()  # the next trial: the held request is dropped, not left hanging
    t.join(30)
    assert not t.is_alive()
    assert errors
    assert not isinstance(errors[0], (TimeoutError, socket.timeout))


def test_a_planned_network_fault_wins_over_the_script(ledger: Ledger) -> None:
    base = ledger.urls()["http"]
    ledger.begin_attempt(1, None)
    fault = NetFault("POST /hook", Failure("status", 503, b"busy", (("Retry-After", "1"),)), nth=2)
    ledger.net_faults = [fault]
    codes = [request(base + "/hook")[0] for _ in range(3)]
    assert codes == [202, 503, 202]
    assert fault.fired == 1
    assert [e.get("failed") for e in ledger.events] == [None, "status 503", None]
    assert ledger.applied_counts() == {("POST /hook", "{}"): 2}
    ledger.reset()
    assert ledger.net_faults == []


def test_http_kill_before_applies_nothing_and_in_doubt_applies_once(
    ledger: Ledger, children: Any
) -> None:
    for phase, applied in (("before", 0), ("in_doubt", 1)):
        ledger.reset()
        base = ledger.urls()["http"]
        agent = children.spawn(["sleep", "30"])
        ledger.begin_attempt(1, agent.pid)
        ledger.kills = [KillAt(1, phase=phase, op="effect", name="POST /hook")]
        with pytest.raises(
            (http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)
        ):
            request(base + "/hook", headers={"Idempotency-Key": "k"})
        assert agent.wait(5) == -signal.SIGKILL
        assert ledger.events[0]["killed"] == phase
        assert sum(ledger.applied_counts().values()) == applied


# -- the LLM front ---------------------------------------------------------------------------------


class FixedLLM(LLMStandIn):
    """A stand-in with one fixed answer (the real one is the llm module's)."""

    def handle(self, method: str, path: str, body: bytes) -> LLMResult:
        if path != "/chat/completions":
            return LLMResult(
                404, "application/json", (b'{"error": {"message": "no"}}',), "", 0, 0, ""
            )
        stream = b'"stream": true' in body
        if stream:
            return LLMResult(
                200,
                "text/event-stream",
                (b'data: {"a": 1}\n\n', b'data: {"a": 2}\n\n', b"data: [DONE]\n\n"),
                "m-1",
                7,
                3,
                "fp-stream",
            )
        return LLMResult(200, "application/json", (b'{"choices": []}',), "m-1", 7, 3, "fp-1")


def test_an_llm_call_is_recorded_with_its_tokens(ledger: Ledger) -> None:
    ledger._llm = FixedLLM()
    url = ledger.urls()["llm"]
    assert url.endswith("/v1")
    code, _h, body = request(url + "/chat/completions", body=b'{"model": "m-1"}')
    assert (code, body) == (200, b'{"choices": []}')
    code, headers, body = request(url + "/chat/completions", body=b'{"stream": true}')
    assert headers["Content-Type"] == "text/event-stream"
    assert body == b'data: {"a": 1}\n\ndata: {"a": 2}\n\ndata: [DONE]\n\n'
    assert request(url + "/nothing")[0] == 404  # not billed: not a call
    assert [
        (e["op"], e["name"], e["fingerprint"], e["prompt_tokens"], e["completion_tokens"])
        for e in ledger.events
    ] == [("llm_call", "m-1", "fp-1", 7, 3), ("llm_call", "m-1", "fp-stream", 7, 3)]
    golden = Golden([], ledger.events, {}, b"", 0.0)  # type: ignore[arg-type]
    assert [(b.phase, b.label) for b in golden.boundaries()] == [
        ("before", "llm_call:m-1"),
        ("in_doubt", "llm_call:m-1"),
    ] * 2


def test_an_llm_call_is_a_boundary_before_and_in_doubt(ledger: Ledger, children: Any) -> None:
    for phase in ("before", "in_doubt"):
        ledger.reset()
        ledger._llm = FixedLLM()
        agent = children.spawn(["sleep", "30"])
        ledger.begin_attempt(1, agent.pid)
        ledger.kills = [KillAt(1, phase=phase, op="llm_call", name="m-1")]
        with pytest.raises(
            (http.client.RemoteDisconnected, ConnectionError, urllib.error.URLError)
        ):
            request(ledger.urls()["llm"] + "/chat/completions")
        assert agent.wait(5) == -signal.SIGKILL
        assert ledger.events[0]["killed"] == phase


def test_a_planned_llm_failure_is_recorded_unbilled(ledger: Ledger) -> None:
    ledger._llm = FixedLLM()
    ledger.begin_attempt(1, None)
    ledger.net_faults = [NetFault("llm", Failure("status", 429))]
    assert request(ledger.urls()["llm"] + "/chat/completions")[0] == 429
    assert request(ledger.urls()["llm"] + "/chat/completions")[0] == 200
    assert [(e.get("failed", None), e["prompt_tokens"]) for e in ledger.events] == [
        ("status 429", 0),
        (None, 7),
    ]


def test_env_points_the_sdks_at_the_stand_ins(ledger: Ledger) -> None:
    env = ledger.env()
    assert env["CRASHPOINT_HTTP"] == ledger.http_url + "/http"
    assert env["OPENAI_BASE_URL"] == ledger.http_url + "/v1"
    assert env["CRASHPOINT_LEDGER_HTTP"] == ledger.http_url
    assert env["CRASHPOINT_TOKEN"] == ledger.token  # the environment carries the secret
    assert ledger.http_url.startswith("http://127.0.0.1:")
    # and no address does: they go in command lines, which every local user can read
    assert not any(ledger.token in url for url in ledger.urls().values())
    assert ledger.token not in ledger.http_url


def test_an_agent_cannot_mark_its_own_request_failed(ledger: Ledger) -> None:
    """``failed``/``reply_lost`` are set by the stand-ins only. An agent that sends them (an
    event body on the HTTP front, a probe message on the socket) has them dropped: its effect
    counts as applied, and a second send is a duplicate."""
    import socket as socket_

    base = ledger.http_url  # .../<token>: the ledger's own front
    code, _h, body = request(
        f"{base}/events/event", body=json.dumps({"name": "x", "failed": "status 503"}).encode()
    )
    assert code == 200, body
    with socket_.socket(socket_.AF_UNIX) as s:
        s.connect(ledger.address)
        for _ in range(2):
            s.sendall(
                json.dumps(
                    {
                        "op": "effect",
                        "kind": "mail",
                        "key": "k1",
                        "payload": {"to": "a"},
                        "failed": "reset",
                        "reply_lost": True,
                    }
                ).encode()
                + b"\n"
            )
            assert json.loads(s.makefile().readline())["ok"]
    assert not any("failed" in e or "reply_lost" in e for e in ledger.events)
    assert ledger.effects["k1"].applied == 1
    assert ledger.effects["k1"].duplicates == 1


# -- the services: section -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "key", "error"),
    [
        ("x", "services", "must be a mapping"),
        ({"htp": {}}, "services.htp", "unknown key"),
        (
            {"http": {"routes": {"FETCH /a": {}}}},
            "services.http.routes['FETCH /a']",
            "unknown method",
        ),
        (
            {"http": {"routes": {"POST hook": {}}}},
            "services.http.routes['POST hook']",
            "starts with /",
        ),
        (
            {"http": {"routes": {"POST /a?x=1": {}}}},
            "services.http.routes['POST /a?x=1']",
            "no query",
        ),
        (
            {"http": {"routes": {"/a": {"status": 700}}}},
            "services.http.routes['/a'].status",
            "100-599",
        ),
        (
            {"http": {"routes": {"/a": {"latency": -1}}}},
            "services.http.routes['/a'].latency",
            "seconds",
        ),
        (
            {"http": {"routes": {"/a": {"fail": "explode"}}}},
            "services.http.routes['/a'].fail.how",
            "one of reset",
        ),
        ({"http": {"routes": {"/a": {"fail": 200}}}}, "services.http.routes['/a'].fail", "400-599"),
        (
            {"http": {"routes": {"/a": {"colour": 1}}}},
            "services.http.routes['/a'].colour",
            "unknown key",
        ),
        ({"llm": [1]}, "services.llm", "must be a mapping"),
        (
            {"llm": {"replies": [{"match": "a", "reply": "x"}, {"regex": "(", "reply": "y"}]}},
            "services.llm.replies[1].regex",
            "regular expression",
        ),  # checked at load, not 1st call
        ({"llm": {"replys": []}}, "services.llm.replys", "unknown key"),
        ({"smtp": "yes"}, "services.smtp", "true or a mapping"),
    ],
)
def test_bad_services_sections_name_the_key(raw: Any, key: str, error: str) -> None:
    with pytest.raises(ServiceSpecError) as info:
        parse_services(raw)
    assert info.value.key == key
    assert error in info.value.message


def test_a_services_section_parses() -> None:
    spec = parse_services(
        {
            "http": {
                "routes": {
                    "POST /hook": {"status": 202, "body": {"a": 1}, "latency": 0.5},
                    "/x": {
                        "fail": {"how": "status", "status": 429, "headers": {"Retry-After": "2"}}
                    },
                }
            },
            "llm": {"replies": [{"match": "hi", "reply": "hello"}]},
            "smtp": True,
        }
    )
    assert spec.route("POST", "/hook").status == 202
    assert spec.route("POST", "/hook").body == b'{"a": 1}'
    assert spec.route("GET", "/hook").status == 200  # the default
    fail = spec.route("PUT", "/x").failure
    assert fail is not None
    assert (fail.how, fail.status, fail.headers) == ("status", 429, (("Retry-After", "2"),))
    assert spec.llm == {"replies": [{"match": "hi", "reply": "hello"}]}
    assert spec.smtp is True


def test_a_bad_llm_script_is_a_scenario_error_at_its_line(tmp_path: Path) -> None:
    """The LLM script is checked when the scenario loads: file, line and key of the bad rule
    (inside a list), not a 500 at the agent's first model call."""
    from crashpoint.harness import ScenarioError, load_scenario

    f = tmp_path / "bad.scenario.yaml"
    f.write_text(
        'name: bad llm\nagent:\n  command: ["{python}", "-c", "print(1)"]\n'
        "faults:\n  - kill: {at: every-boundary}\nservices:\n  llm:\n"
        "    replies:\n      - match: hi\n        reply: x\n"
        '      - regex: "("\n        reply: y\n'
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(f)
    assert f"{f}:11" in str(info.value)
    assert "services.llm.replies[1].regex" in str(info.value)


# -- in a scenario file ----------------------------------------------------------------------------

SCENARIO = """\
name: x
agent:
  command: ["{python}", "-c", "pass", "{http}", "{llm}"]
faults:
  - kill: {at: every-boundary}
services:
  http:
    routes:
      "POST /hook":
        status: STATUS
"""


def test_a_scenarios_services_section_reaches_the_agent(tmp_path: Path) -> None:
    from crashpoint.harness import load_scenario

    path = tmp_path / "s.scenario.yaml"
    path.write_text(SCENARIO.replace("STATUS", "202"))
    sc = load_scenario(path)
    assert sc.agent.services == {"http": {"routes": {"POST /hook": {"status": 202}}}}
    assert sc.agent.uses("http")
    assert not sc.agent.uses("smtp")
    argv = sc.agent.argv(
        state_dir="/s", workdir="/w", run_id="r", urls={"http": "H", "llm": "L", "smtp": ""}
    )
    assert argv[-2:] == ["H", "L"]
    with pytest.raises(ValueError, match=r"uses \{http\}, but the stand-in services"):
        sc.agent.argv(state_dir="/s", workdir="/w", run_id="r")


def test_a_bad_services_value_names_file_line_and_key(tmp_path: Path) -> None:
    from crashpoint.harness import ScenarioError, load_scenario

    path = tmp_path / "s.scenario.yaml"
    path.write_text(SCENARIO.replace("STATUS", "999"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith(
        f"{path}:10 (key 'services.http.routes['POST /hook'].status'): must be an HTTP status"
    )
    path.write_text(SCENARIO.replace("  command: [", '  command: ["{smtpx}", '))
    with pytest.raises(ScenarioError, match=r"unknown placeholder \{smtpx\}"):
        load_scenario(path)
