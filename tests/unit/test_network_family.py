"""The ``network`` fault family: its options are checked with file:line:key errors, its plans
come from the golden run's requests to the stand-ins (a sweep, or seeded draws), a plan becomes
the ledger's NetFaults, a fault that never fired is not exercised, and a retry storm fails the
``no_retry_storm`` check. Pure logic: the end-to-end tests are in tests/crash."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from crashpoint.errors import FaultSpecError
from crashpoint.harness import (
    AgentSpec,
    Attempt,
    Campaign,
    Expect,
    Fault,
    Golden,
    Plan,
    ScenarioError,
    family_from_spec,
    load_scenario,
)
from crashpoint.harness._checker._checks import TrialFacts, check_no_retry_storm
from crashpoint.harness._engine import account, net_fault
from crashpoint.harness._spec import Failure, call_of, net_requests, pick, plan_for

#: a golden run that calls the model, posts a webhook twice (two payloads), reads a status
#: page and sends a mail; probe steps around them (not network calls)
EVENTS = [
    {"op": "step_started", "step": "think"},
    {"op": "llm_call", "name": "gpt", "fingerprint": "f1"},
    {"op": "step_completed", "step": "think"},
    {"op": "effect", "kind": "POST /hook", "payload": {"n": 1}},
    {"op": "effect", "kind": "POST /hook", "payload": {"n": 2}},
    {"op": "event", "name": "GET /status", "method": "GET", "path": "/status"},
    {"op": "effect", "kind": "mail", "payload": {"to": "a"}},
    {"op": "effect", "kind": "send_email", "payload": {}, "key": "k"},
]  # a probe effect


def golden(events: list[dict[str, Any]] | None = None) -> Golden:
    evs = [dict(e, attempt=1) for e in (EVENTS if events is None else events)]
    return Golden(["think"], evs, Counter(), b"ok\n", 0.1)


def test_the_golden_runs_network_calls_are_its_requests_to_the_stand_ins() -> None:
    assert [call_of(e) for e in EVENTS] == [
        "",
        "llm",
        "",
        "POST /hook",
        "POST /hook",
        "GET /status",
        "mail",
        "",
    ]
    assert net_requests(golden()) == [
        ("llm", 1),
        ("POST /hook", 1),
        ("POST /hook", 2),
        ("GET /status", 1),
        ("mail", 1),
    ]


def test_a_sweep_fails_every_distinct_call_with_every_failure_asked() -> None:
    fam = family_from_spec({"network": {"fail": ["timeout", 503]}})
    assert fam.systematic
    assert fam.name == "network@any:timeout|503"
    g = golden()
    assert fam.points(g) == 4 * 2
    plans = Campaign(AgentSpec(command=("true",)), [fam], "/nonexistent").plans(g)
    got = [
        (p.faults[0].arg("call"), p.faults[0].arg("fail"), p.faults[0].arg("nth")) for p in plans
    ]
    assert got == [
        (c, f, 1) for c in ("llm", "POST /hook", "GET /status", "mail") for f in ("timeout", 503)
    ]


def test_a_named_call_with_a_count_is_drawn_and_reproducible() -> None:
    fam = family_from_spec(
        {
            "network": {
                "call": "POST /hook",
                "fail": ["reset", 429, 500],
                "nth": 2,
                "times": 3,
                "count": 5,
            }
        }
    )
    assert not fam.systematic
    g = golden()
    plans = [plan_for(fam, g, 7, i) for i in range(30)]
    assert plans == [plan_for(fam, g, 7, i) for i in range(30)]
    faults = [p.faults[0] for p in plans]
    assert {f.arg("call") for f in faults} == {"POST /hook"}
    assert {f.arg("fail") for f in faults} == {"reset", 429, 500}
    assert {(f.arg("nth"), f.arg("times"), f.attempt) for f in faults} == {(2, 3, 1)}
    assert str(faults[0]).endswith("for POST /hook #2 in attempt 1 (3 times)")


def test_any_without_nth_draws_one_request_of_the_golden_run_occurrence_too() -> None:
    fam = family_from_spec({"network": {"count": 3}})
    drawn = {
        (p.faults[0].arg("call"), p.faults[0].arg("nth"))
        for p in (plan_for(fam, golden(), 1, i) for i in range(200))
    }
    assert drawn == set(net_requests(golden()))  # the 2nd POST /hook too


def test_without_network_calls_the_plan_says_so_and_never_passes() -> None:
    fam = family_from_spec({"network": {}})
    g = golden([e for e in EVENTS if not call_of(e)])
    (plan,) = Campaign(AgentSpec(command=("true",)), [fam], "/nonexistent").plans(g)
    f = plan.faults[0]
    assert f.arg("call") == ""
    assert "no network call" in str(f)
    att = Attempt(1, ["x"], 0, None, False, 0.1, b"", b"")
    (out,) = account(plan, [att], [], [], {0: {"net_fired": 0}}, g)
    assert not out.fired
    assert "no request to a stand-in service" in out.why_not


def test_a_chain_with_a_kill_puts_the_network_fault_on_the_next_attempt() -> None:
    fam = family_from_spec(
        [{"kill": {"at": "random"}}, {"network": {"call": "POST /hook", "count": 2}}]
    )
    plan = plan_for(fam, golden(), 3, 0)
    assert [(f.kind, f.attempt) for f in plan.faults] == [("kill", 1), ("network", 2)]


def test_the_plan_round_trips_and_becomes_the_ledgers_net_fault() -> None:
    f = Fault.make("network", 1, call="POST /hook", fail=503, nth=2, times=2)
    assert Fault.from_json(f.to_json()) == f
    nf = net_fault(Fault.from_json(f.to_json()))
    assert (nf.call, nf.nth, nf.times, nf.attempt) == ("POST /hook", 2, 2, 1)
    assert (nf.failure.how, nf.failure.status) == ("status", 503)
    assert ("Retry-After", "1") in nf.failure.headers
    assert not nf.failure.applied
    t = net_fault(Fault.make("network", 2, call="llm", fail="timeout"))
    assert t.failure.how == "timeout"
    assert t.failure.applied
    assert net_fault(Fault.make("network", 1, call="mail", fail="reset")).failure.how == "reset"
    assert not Failure("timeout").applied  # a scripted route's timeout: never reached it
    with pytest.raises(ValueError, match="only a timeout"):
        Failure("reset", applied=True)
    # what the services ask: only the planned requests fail, and each is counted
    assert [pick([nf], "POST /hook", n, 1) is not None for n in (1, 2, 3, 4)] == [
        False,
        True,
        True,
        False,
    ]
    assert pick([nf], "POST /hook", 2, 2) is None
    assert pick([nf], "POST /x", 2, 1) is None
    assert nf.fired == 2


def _acc(fired: int, events: list[dict[str, Any]], rc: int = 0) -> Any:
    plan = Plan((Fault.make("network", 1, call="POST /nowhere", fail="timeout"),))
    att = Attempt(1, ["x"], rc, None, False, 0.1, b"", b"")
    (out,) = account(plan, [att], events, [], {0: {"net_fired": fired}}, golden())
    return out


def test_a_fault_on_a_call_the_agent_never_makes_is_not_exercised() -> None:
    out = _acc(0, [dict(e, attempt=1) for e in EVENTS])
    assert not out.fired
    assert "never made a POST /nowhere request" in out.why_not
    assert "POST /hook" in out.why_not  # what it did call
    assert _acc(1, []).fired
    assert "applied, reply withheld" in _acc(1, []).where


def _facts(events: list[dict[str, Any]], **expect: Any) -> TrialFacts:
    return TrialFacts(golden(), Plan(()), Expect(**expect), [], events, Counter(), "c", [], 0)


def _posts(n: int, attempt: int = 1) -> list[dict[str, Any]]:
    return [
        {
            "op": "effect",
            "kind": "POST /hook",
            "payload": {"n": 1},
            "attempt": attempt,
            "t": 0.001 * k,
            "failed": "HTTP 503",
        }
        for k in range(n)
    ]


def test_a_retry_storm_fails_and_a_capped_retry_does_not() -> None:
    # the golden run posted twice: 2 + 10 in one attempt is within the default limit
    assert check_no_retry_storm(_facts(_posts(12))).ok
    storm = check_no_retry_storm(_facts(_posts(13)))
    assert not storm.ok
    assert "attempt 1 sent POST /hook 13 times (golden run: 2), 11 more" in storm.message
    assert "median gap" in storm.message
    # per attempt: 12 in each of two attempts is no storm
    assert check_no_retry_storm(_facts(_posts(12) + _posts(12, attempt=2))).ok
    assert not check_no_retry_storm(_facts(_posts(4), max_retries=1)).ok
    # probe effects are not network calls
    probe = [{"op": "effect", "kind": "send_email", "payload": {}, "attempt": 1}] * 50
    assert check_no_retry_storm(_facts(probe)).ok


NET_CASES = [
    ("network: {call: POST}", "faults[0].network.call", "'METHOD /path'"),
    ("network: {call: 'post /hook'}", "faults[0].network.call", "'METHOD /path'"),
    ("network: {call: [llm]}", "faults[0].network.call", "'METHOD /path'"),
    ("network: {fail: 404}", "faults[0].network.fail", "unknown failure 404"),
    ("network: {fail: slow}", "faults[0].network.fail", "unknown failure 'slow'"),
    ("network: {fail: []}", "faults[0].network.fail", "non-empty list"),
    ("network: {fail: true}", "faults[0].network.fail", "must be one of reset, timeout"),
    ("network: {nth: 0}", "faults[0].network.nth", "at least 1"),
    ("network: {times: 1000}", "faults[0].network.times", "above the cap of 100"),
    ("network: {count: 0}", "faults[0].network.count", "0 runs no trial"),
    ("network: {when: 3}", "faults[0].network.when", "unknown option(s) when"),
    (
        "[network: {count: 2}, kill: {at: random}]",
        "faults[0][0].network.count",
        "put count on the last fault",
    ),
]


@pytest.mark.parametrize(("fault", "key", "says"), NET_CASES, ids=[c[0] for c in NET_CASES])
def test_a_bad_network_option_is_refused_at_its_file_line_and_key(
    tmp_path: Path, fault: str, key: str, says: str
) -> None:
    path = tmp_path / "n.scenario.yaml"
    path.write_text(
        f'name: x\nagent:\n  command: ["{{python}}", "-c", "pass"]\nfaults:\n  - {fault}\n'
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    err = info.value
    assert (err.line, err.key) == (5, key), str(err)
    assert says in err.message
    assert str(err).startswith(f"{path}:5 (key '{key}'):")


def test_good_network_options_load(tmp_path: Path) -> None:
    path = tmp_path / "n.scenario.yaml"
    path.write_text(
        'name: x\nagent:\n  command: ["{python}", "-c", "pass"]\nfaults:\n'
        '  - network: {call: "POST /hook", fail: [timeout, "503"], times: 2}\n'
        "  - network: {call: llm, fail: reset, count: 2}\n"
        "expect: {max_retries: 3, no_retry_storm: true}\n"
    )
    sc = load_scenario(path)
    assert sc.expect.max_retries == 3
    ((_, o1),) = sc.families[0].family.chain
    assert dict(o1)["fail"] == ("timeout", 503)
    with pytest.raises(FaultSpecError, match=r"network\.fail"):
        family_from_spec({"network": {"fail": 200}})
    path.write_text(path.read_text().replace("max_retries: 3", "max_retries: -1"))
    with pytest.raises(ScenarioError, match=r"expect\.max_retries"):
        load_scenario(path)


def test_a_timeout_whose_reply_was_lost_is_applied_and_a_reset_is_not() -> None:
    from crashpoint.harness import Ledger

    led = Ledger()
    try:
        post = {"op": "effect", "kind": "POST /hook", "payload": {"n": 1}, "attempt": 1}
        assert led.handle({**post, "failed": "reset"}) == {"ok": True, "applied": False}
        assert led.handle({**post, "failed": "timeout", "reply_lost": True})["applied"]
        assert led.handle(post)["applied"]  # the keyless retry: applied again
        assert led.applied_counts() == {("POST /hook", '{"n":1}'): 2}
    finally:
        led.close()


def test_the_mode_decides_sweep_or_draws() -> None:
    g = golden()
    counted = family_from_spec({"network": {"call": "any", "count": 3}})
    swept = Campaign(AgentSpec(command=("true",)), [counted], "/x", mode="systematic").plans(g)
    assert [p.faults[0].arg("call") for p in swept] == ["llm", "POST /hook", "GET /status", "mail"]
    sweep = family_from_spec({"network": {}})
    drawn = Campaign(AgentSpec(command=("true",)), [sweep], "/x", mode="random", trials=6).plans(g)
    assert len(drawn) == 6
