"""Scenario files run longest first (issue 24, the gate's wall time): pytest-xdist's
``--dist loadfile`` hands out whole files, so a long file handed out last keeps one worker busy
while the others idle. The plugin collects scenario files by their expected time (the previous
run's gate.json, else an estimate from their trials), and its loadfile scheduler hands them out
in that order (pytest-xdist's own sorts them by number of items). Collection only: no agent."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest_plugins = ["pytester"]


def _collected(inner: Any, *args: Any) -> list[str]:
    """The node ids ``pytest --collect-only -q`` lists, in the session's order (pytester's
    ``genitems`` gives them as collected, before ``pytest_collection_modifyitems``)."""
    out = inner.inprocess("--collect-only", "-q", *args)
    return [ln for ln in out.outlines if "::" in ln]


def _files(ids: list[str]) -> list[str]:
    """The files of node ids (their first part), each once, in their order."""
    return list(dict.fromkeys(i.split("::", 1)[0] for i in ids))


def _three(inner: Any) -> None:
    """Three scenario files whose trials are 2 + 3 + 3 (``few``), 30 (``many``, one item) and
    12 (``some``), and a plain test module collected between them (by name)."""
    inner.scenario(
        "few",
        """\
        kill: {at: random, count: 2}
        corrupt: {path: "{state_dir}/**", how: truncate, count: 3}
        corrupt: {path: "{state_dir}/**", how: bitflip, count: 3}
        """,
    )
    inner.scenario("many", "kill: {at: random, count: 30}")
    inner.scenario("some", "kill: {at: random, count: 12}")
    inner.pytester.makepyfile(m_test="def test_one():\n    pass\n")


def test_scenario_files_are_collected_longest_first_other_items_keep_their_place(
    inner: Any,
) -> None:
    _three(inner)
    items = _collected(inner, ".")
    # pytest collects few, m_test, many, some (by name); the scenario files go where the
    # first of them was, longest first, each file's items together and in their own order
    assert _files(items) == [
        "many.scenario.yaml",
        "some.scenario.yaml",
        "few.scenario.yaml",
        "m_test.py",
    ]
    assert len(items) == 1 + 3 + 1 + 1
    assert [i.split("::")[1] for i in items if i.startswith("few")] == [
        "kill@random",
        "corrupt@truncate",
        "corrupt@bitflip",
    ]


def test_the_previous_runs_times_come_first_and_an_incomplete_one_is_not_used(
    inner: Any,
) -> None:
    _three(inner)
    report = inner.path / "report"
    report.mkdir()
    took = {"few": 40.0, "many": 5.0, "some": 20.0}
    campaigns = [
        {"file": str(inner.path / f"{stem}.scenario.yaml"), "duration_s": s / 2}
        for stem, s in took.items()
        for _half in range(2)  # a file's campaigns add up
    ]
    (report / "gate.json").write_text(json.dumps({"campaigns": campaigns}))
    items = _collected(inner, ".", "--crashpoint-report", report)
    assert _files(items)[:3] == ["few.scenario.yaml", "some.scenario.yaml", "many.scenario.yaml"]
    # a file the previous run did not have: its estimate for every file, not a mixture
    (report / "gate.json").write_text(json.dumps({"campaigns": campaigns[:4]}))
    items = _collected(inner, ".", "--crashpoint-report", report)
    assert _files(items)[:2] == ["many.scenario.yaml", "some.scenario.yaml"]


class _Node:
    """What pytest-xdist's scheduler asks of a worker: the indexes it is sent."""

    def __init__(self, name: str) -> None:
        self.gateway = type("Gateway", (), {"id": name})()
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent += indexes

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduled(config: pytest.Config, kind: Any, ids: list[str]) -> list[list[str]]:
    """The files each of two workers is first sent by scheduler ``kind``."""
    sched = kind(config)
    nodes = [_Node("gw0"), _Node("gw1")]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, ids)
    sched.schedule()
    return [list(dict.fromkeys(ids[i].split("::", 1)[0] for i in n.sent)) for n in nodes]


def test_the_loadfile_scheduler_hands_out_scenario_files_in_collection_order(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("xdist")
    from xdist.scheduler import LoadFileScheduling

    from crashpoint.pytest_plugin._schedule import ScenarioFileScheduling, work_order

    config = pytester.parseconfig("--tx", "2*popen", "--dist", "loadfile")
    # as the workers collect them: the long one-item file first
    ids = [
        "long.scenario.yaml::kill@fileop",
        *(f"wide.scenario.yaml::corrupt#{n}" for n in range(4)),
        *(f"mid.scenario.yaml::kill#{n}" for n in range(2)),
        "short.scenario.yaml::hang",
        *(f"test_a.py::test_{n}" for n in range(3)),
        *(f"test_b.py::test_{n}" for n in range(5)),
    ]
    # pytest-xdist's own: by number of items, the long one-item file among the last
    theirs = _scheduled(config, LoadFileScheduling, ids)
    assert "long.scenario.yaml" not in theirs[0] + theirs[1]
    ours = _scheduled(config, ScenarioFileScheduling, ids)
    assert ours[0][0] == "long.scenario.yaml"
    assert ours[1][0] == "wide.scenario.yaml"
    assert work_order(ids) == [
        "long.scenario.yaml",
        "wide.scenario.yaml",
        "mid.scenario.yaml",
        "short.scenario.yaml",
        "test_b.py",  # other files: pytest-xdist's order, most items first
        "test_a.py",
    ]
    assert work_order(ids, reorder=False)[-2:] == ["test_a.py", "test_b.py"]


def test_the_estimate_weighs_trials_sweeps_and_slow_kinds() -> None:
    from crashpoint.harness import FaultFamily, ScenarioFamily
    from crashpoint.pytest_plugin import _order

    class Agent:
        timeout = 4.0

        @staticmethod
        def uses(name: str) -> bool:
            return name == "postgres"

    class Scenario:
        agent = Agent()
        restarts = 3

    def est(kind: str, count: int | None, **opts: Any) -> float:
        fam = ScenarioFamily(FaultFamily(((kind, tuple(sorted(opts.items()))),)), line=1)
        return _order.estimate_s(Scenario(), fam, count)

    assert est("kill", 10, at="random") == 10 * _order.TRIAL_S
    assert est("kill", None, at="fileop") > est("kill", None, at="every-boundary")
    assert est("network", None, fail=("timeout", "reset")) == (
        2 * _order.NETWORK_CALLS * _order.SWEEP_TRIAL_S
    )
    assert est("kill", 4, at="recovery") == 4 * _order.TRIAL_S * 2
    assert est("power_loss", 6, model="posix") == 6 * _order.SWEEP_TRIAL_S
    assert est("hang", 1) == _order.TRIAL_S + 4.0
    assert est("backing", 3, service="postgres") == 3 * _order.POSTGRES_TRIAL_S
    assert est("kill", 3, at="random", every_attempt=True) == 3 * _order.TRIAL_S * 3
    assert _order.file_overhead_s(Scenario()) == _order.GOLDEN_S + _order.POSTGRES_S
