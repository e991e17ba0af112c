"""The crash map's data: each trial's fault placed at the right point of the golden run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Any

from crashpoint.faults import LogOp, OpLog
from crashpoint.harness._report import CampaignResult
from crashpoint.harness._report._crashmap import MAX_AXIS, crash_map, crash_map_svg
from crashpoint.harness._spec import (
    Attempt,
    CheckResult,
    Fault,
    Golden,
    Outcome,
    Plan,
    TrialResult,
)

SVG_NS = "{http://www.w3.org/2000/svg}"

EVENTS: list[dict[str, Any]] = [
    {"op": "step_started", "step": "fetch"},
    {"op": "step_completed", "step": "fetch"},
    {"op": "step_started", "step": "send"},
    {"op": "effect", "kind": "send_email", "key": "k1"},
    {"op": "step_completed", "step": "send"},
]


def _golden(**extra: Any) -> Golden:
    return Golden(["fetch", "send"], [dict(e) for e in EVENTS], Counter(), b"", 0.1, **extra)


def _trial(
    index: int,
    faults: list[Fault],
    *,
    ok: bool = True,
    fired: bool = True,
    events: list[dict[str, Any]] | None = None,
) -> TrialResult:
    return TrialResult(
        plan=Plan(tuple(faults), "fam", 1, index),
        attempts=[],
        events=events or [],
        applied={},
        duplicates=0,
        checks=[CheckResult("exactly_once", ok, "" if ok else "DUPLICATED")],
        duration=0.1,
        outcomes=[
            Outcome(k, f.kind, fired, "here" if fired else "", "" if fired else "never reached")
            for k, f in enumerate(faults)
        ],
    )


def _kill(op: str, name: str, nth: int = 1, phase: str = "before") -> Fault:
    return Fault.make("kill", 1, op=op, name=name, nth=nth, phase=phase, label=f"{op}:{name}")


def _at(cmap: dict[str, Any], trial: int) -> dict[str, Any]:
    (pt,) = [p for p in cmap["points"] if p["trial"] == trial]
    return pt


def test_boundary_family_marks_each_kill_at_its_golden_event() -> None:
    trials = [
        _trial(0, [_kill("step_started", "fetch")]),
        _trial(1, [_kill("step_completed", "fetch")], ok=False),
        _trial(2, [_kill("effect", "send_email")]),
        _trial(3, [_kill("effect", "send_email", phase="in_doubt")], ok=False),
        _trial(4, [_kill("step_completed", "send")]),
    ]
    cmap = crash_map(_golden(), trials)
    assert [a["kind"] for a in cmap["axis"]] == [e["op"] for e in EVENTS]
    assert [a.get("step") for a in cmap["axis"]] == ["fetch", "fetch", "send", None, "send"]
    assert [(p["trial"], p["at"], p["verdict"]) for p in cmap["points"]] == [
        (0, 0, "pass"),
        (1, 1, "fail"),
        (2, 3, "pass"),
        (3, 3, "fail"),
        (4, 4, "pass"),
    ]
    assert _at(cmap, 3)["phase"] == "in_doubt"
    assert "phase" not in _at(cmap, 2)
    json.dumps(cmap)  # plain JSON: what gate.json holds

    svg = ET.fromstring(crash_map_svg(cmap, "c0"))  # noqa: S314 - our own output
    links = [a.get("href") for a in svg.iter(f"{SVG_NS}a")]
    assert links == ["#c0-t1", "#c0-t3"]  # every failing mark links to its trial
    titles = [t.text or "" for t in svg.iter(f"{SVG_NS}title")]
    assert any("step_completed:fetch" in t and "FAIL: 1" in t for t in titles)


def test_a_repeated_step_is_placed_by_its_occurrence() -> None:
    events = [*EVENTS, {"op": "step_started", "step": "fetch"}]
    golden = Golden(["fetch", "send"], events, Counter(), b"", 0.1)
    cmap = crash_map(golden, [_trial(0, [_kill("step_started", "fetch", nth=2)])])
    assert cmap["points"][0]["at"] == 5


FILEOPS = [
    {"op": "openat(w)", "path": "{state_dir}/s.tmp", "n": 1, "via": "audit"},
    {"op": "rename", "path": "{state_dir}/s.tmp", "n": 1, "via": "audit"},
    {"op": "openat(w)", "path": "{state_dir}/s.tmp", "n": 2, "via": "audit"},
    {"op": "rename", "path": "{state_dir}/s.tmp", "n": 2, "via": "audit"},
]


def _fileop(k: int) -> Fault:
    return Fault.make("fileop", 1, fileop=FILEOPS[k], label=f"op {k}")


def _history(n: int, attempt: int = 1) -> list[dict[str, Any]]:
    return [{**EVENTS[k], "attempt": attempt, "i": k} for k in range(n)]


def test_fileop_family_places_operations_among_events_by_what_the_attempt_reported() -> None:
    golden = _golden(fileops=[dict(f) for f in FILEOPS])
    trials = [
        # killed before op 1 after 1 event (step_started fetch): it lies between events 0, 1
        _trial(0, [_fileop(1)], events=_history(1) + _history(5, attempt=2)),
        # killed before op 3 once fetch was completed and send started: after event 2
        _trial(1, [_fileop(3)], ok=False, events=_history(3) + _history(5, attempt=2)),
        # op 2's kill never fired: not exercised, at the operation it was aimed at
        _trial(2, [_fileop(2)], fired=False, events=_history(5)),
    ]
    cmap = crash_map(golden, trials)
    kinds = [(a["kind"], a.get("op", a.get("event"))) for a in cmap["axis"]]
    assert kinds == [
        ("fileop", 0),  # no trial at it: just after the one before it (none: the start)
        ("step_started", 0),
        ("fileop", 1),
        ("fileop", 2),  # no trial killed at it (its kill did not fire): right after op 1
        ("step_completed", 1),
        ("step_started", 2),
        ("fileop", 3),
        ("effect", 3),
        ("step_completed", 4),
    ]
    where = {p["trial"]: (kinds[p["at"]], p["verdict"]) for p in cmap["points"]}
    assert where == {
        0: (("fileop", 1), "pass"),
        1: (("fileop", 3), "fail"),
        2: (("fileop", 2), "not_exercised"),
    }
    assert "no trial killed at" in cmap["note"]


def _plog() -> tuple[dict[str, Any], list[int]]:
    log = OpLog(
        (
            LogOp(0, "creat", "{state_dir}/s.tmp", file=1),
            LogOp(1, "write", "{state_dir}/s.tmp", file=1, size=3, data=b"abc"),
            LogOp(2, "rename", "{state_dir}/s.tmp", "{state_dir}/s", file=1),
            LogOp(3, "fsync", "{state_dir}", file=0),
        )
    )
    # events 0, 1 before any op; 2 after op 1 (creat); 3, 4 after all four
    return log.to_json(), [0, 0, 1, 4, 4]


def _cut(upto: int) -> Fault:
    return Fault.make(
        "power_loss", 1, model="posix", upto=upto, events=0, mutation={}, label=f"after {upto}"
    )


def test_power_loss_family_marks_the_operation_after_which_the_power_went() -> None:
    plog, plog_events = _plog()
    golden = _golden(plog=plog, plog_events=plog_events)
    trials = [
        _trial(0, [_cut(2)], ok=False),  # after op 2 (the write)
        _trial(1, [_cut(2)]),
        _trial(2, [_cut(3)]),
        _trial(3, [_cut(0)]),  # before the first operation
    ]
    cmap = crash_map(golden, trials)
    axis = cmap["axis"]
    kinds = [(a["kind"], a.get("op", a.get("event"))) for a in axis]
    assert kinds == [
        ("start", None),
        ("step_started", 0),
        ("step_completed", 1),
        ("powerop", 0),
        ("step_started", 2),
        ("powerop", 1),
        ("powerop", 2),
        ("powerop", 3),
        ("effect", 3),
        ("step_completed", 4),
    ]
    at = {p["trial"]: kinds[p["at"]] for p in cmap["points"]}
    assert at == {0: ("powerop", 1), 1: ("powerop", 1), 2: ("powerop", 2), 3: ("start", None)}
    assert axis[5]["label"].startswith("op 2: write")
    # the number of crash states the model lists after each operation
    assert all(isinstance(a.get("states"), int) for a in axis if a["kind"] == "powerop")
    svg = crash_map_svg(cmap, "c2")
    total = axis[5]["states"]
    assert f">1/{total}<" in svg  # one failing state (and one passing) of those listed there


def test_a_fault_that_never_fired_or_has_no_position_is_never_a_pass() -> None:
    timed = Fault.make("kill_at_time", 1, seconds=0.2)
    trials = [
        _trial(0, [_kill("step_completed", "send")], fired=False),
        _trial(1, [timed], fired=False),  # no position and not fired
        _trial(2, [timed], events=_history(2) + _history(5, attempt=2)),  # fired after 2
        _trial(3, [Fault.make("disk_full", 1, capacity=10, mechanism="rlimit")]),  # no place
    ]
    cmap = crash_map(_golden(), trials)
    pts = {p["trial"]: p for p in cmap["points"]}
    assert (pts[0]["at"], pts[0]["verdict"]) == (4, "not_exercised")
    assert (pts[1]["at"], pts[1]["verdict"]) == (None, "not_exercised")
    assert (pts[2]["at"], pts[2]["verdict"], pts[2]["placed"]) == (2, "pass", "reported")
    assert (pts[3]["at"], pts[3]["verdict"]) == (None, "pass")
    assert "no position" in cmap["note"]
    svg = ET.fromstring(crash_map_svg(cmap))  # noqa: S314 - our own output
    groups = [g for g in svg.iter(f"{SVG_NS}g") if "point" in (g.get("class") or "")]
    none = [g for g in groups if "p-not_exercised" in (g.get("class") or "")]
    assert sorted(g.get("data-trials") for g in none) == ["0", "1"]
    aside = [g for g in groups if g.get("data-at") == ""]
    assert sorted(g.get("data-trials") for g in aside) == ["1", "3"]


def test_a_long_run_and_many_trials_stay_bounded() -> None:
    n_ops = 1500
    fileops = [
        {"op": "write", "path": "{state_dir}/j", "n": k + 1, "via": "audit"} for k in range(n_ops)
    ]
    golden = _golden(fileops=fileops)
    trials = [
        _trial(
            k,
            [Fault.make("fileop", 1, fileop=fileops[(k * 7) % n_ops], label="w")],
            ok=k % 50 != 0,
            events=_history(k % 5 + 1),
        )
        for k in range(250)
    ]
    cmap = crash_map(golden, trials)
    assert len(cmap["axis"]) <= MAX_AXIS
    assert "left out" in cmap["note"]
    placed = [p for p in cmap["points"] if p["at"] is not None]
    assert len(placed) == 250  # every trial's point kept on the axis
    for p in placed:  # and still at its own operation
        k = p["trial"]
        assert cmap["axis"][p["at"]]["op"] == (k * 7) % n_ops
    svg = crash_map_svg(cmap, "c0")
    assert len(svg) < 400_000
    assert svg.count('<a href="#c0-t') == 5  # trials 0, 50, ..., 200 fail


def test_a_timed_golden_trace_places_the_file_operations_exactly() -> None:
    # the trace says: op 0 before any event, ops 1-2 after fetch completed, op 3 at the end
    golden = _golden(fileops=[dict(f) for f in FILEOPS], fileop_events=[0, 2, 2, 5])
    cmap = crash_map(golden, [_trial(0, [_fileop(2)], ok=False, events=_history(5))])
    kinds = [(a["kind"], a.get("op", a.get("event"))) for a in cmap["axis"]]
    assert kinds == [
        ("fileop", 0),
        ("step_started", 0),
        ("step_completed", 1),
        ("fileop", 1),
        ("fileop", 2),
        ("step_started", 2),
        ("effect", 3),
        ("step_completed", 4),
        ("fileop", 3),
    ]
    assert kinds[cmap["points"][0]["at"]] == ("fileop", 2)
    assert "note" not in cmap  # nothing guessed


def _attempt(n: int, stderr: bytes, *, code: int | None = 0, sig: int | None = None) -> Attempt:
    return Attempt(n, ["agent"], code, sig, False, 0.25 * n, b"", stderr)


def test_the_summary_carries_the_map_redacted_and_the_telling_stderr_tail() -> None:
    canary = "sk-very-private-value-123456"
    golden = _golden()
    golden.events[2]["step"] = f"send {canary}"
    failing = _trial(1, [_kill("step_completed", "fetch")], ok=False)
    failing.attempts = [
        _attempt(1, b"starting\n", code=None, sig=9),  # killed by the harness
        _attempt(2, b"".join(b"line %d\n" % k for k in range(40)) + b"ValueError: bad\n", code=1),
        _attempt(3, b"gave up\n", code=0),
    ]
    result = CampaignResult("c", golden, [failing], 1.0, 7, "/nowhere", secrets={"API_KEY": canary})
    s = result.summary()
    text = json.dumps(s["crash_map"])
    assert canary not in text
    assert "<redacted:API_KEY>" in text
    assert s["crash_map"]["points"][0]["at"] == 1
    (f,) = s["failures"]
    # the attempt that failed by itself, not the killed one nor the last
    assert f["stderr_attempt"] == 2
    assert f["stderr_tail"].splitlines()[-1] == "ValueError: bad"
    assert len(f["stderr_tail"].splitlines()) == 20
    assert f["stderr_cut"] is True
    assert f["attempt_durations"] == [0.25, 0.5, 0.75]
