"""``-n 2`` (pytest-xdist), ``--crashpoint-shard 1/2`` + ``2/2`` and a serial run of the same
seed judge the same trials the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["pytester"]

Verdict = tuple[str, int, str, tuple[tuple[str, Any], ...]]


def verdicts(report: Path) -> set[Verdict]:
    """Every trial verdict of a run: (campaign, index, plan, checks) from each campaign's
    verdicts.json."""
    out: set[Verdict] = set()
    for path in sorted(report.glob("scenarios/*/verdicts.json")):
        for v in json.loads(path.read_text()):
            out.add((path.parent.name, v["index"], v["plan"], tuple(sorted(v["checks"].items()))))
    return out


def gate_verdicts(report: Path) -> set[Verdict]:
    """The same, read from the session's gate.json (what the controller gathered)."""
    gate = json.loads((report / "gate.json").read_text())
    out: set[Verdict] = set()
    for c in gate["campaigns"]:
        for t in c["trial_results"]:
            out.add((c["name"], t["index"], t["plan"], tuple(sorted(t["checks"].items()))))
    return out


@pytest.fixture
def gate(inner: Any) -> Any:
    """A scenario folder with two campaigns: a broken agent (trials fail) under random kills,
    a tiny correct one (trials pass) under systematic kills. Small: each trial is a spawn."""
    inner.scenario(
        "broken",
        "kill: {at: random, count: 2}",
        folder="gate",
        command=inner.command(inner.broken_agent),
    )
    inner.scenario(
        "tiny", "kill: {at: every-boundary}", folder="gate", command=inner.command(inner.tiny_agent)
    )
    return inner


def run(inner: Any, name: str, *args: str) -> set[Verdict]:
    report = inner.path / f"report-{name}"
    result = inner.subprocess("gate", "--crashpoint-seed=5", f"--crashpoint-report={report}", *args)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()
    found = verdicts(report)
    assert gate_verdicts(report) == found
    return found


# slow: a gate run four times; fast cover: test_options.py (the plans a shard keeps, 1/2 to 3/3)
@pytest.mark.slow
def test_shards_and_workers_give_the_serial_verdicts(gate: Any) -> None:
    pytest.importorskip("xdist")
    serial = run(gate, "serial")
    campaigns = {v[0] for v in serial}
    assert campaigns == {"broken-kill_random", "tiny-kill_every-boundary"}
    assert len(serial) == 2 + 2  # the tiny agent's golden run has 2 boundaries
    oks = {all(ok is True or ok == "skip" for _, ok in v[3]) for v in serial}
    assert oks == {True, False}  # both passing and failing trials are compared

    shard1 = run(gate, "shard1", "--crashpoint-shard=1/2")
    shard2 = run(gate, "shard2", "--crashpoint-shard=2/2")
    assert shard1
    assert shard2
    assert not shard1 & shard2
    assert shard1 | shard2 == serial
    assert {v[1] % 2 for v in shard1} == {0}
    assert {v[1] % 2 for v in shard2} == {1}

    workers = run(gate, "xdist", *gate.load_plugins("xdist"), "-n", "2")
    assert workers == serial
