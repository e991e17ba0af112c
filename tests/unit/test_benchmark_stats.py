"""benchmarks/run.py's statistics (issue 24, honest benchmarks): both sides of a peer ratio use
the same figure, a FAIL in any round of a row shows, ratios point the way their targets say,
and every table of the page says where and when it was measured. No benchmark is run here
(one short campaign checks the planning section's own measuring code)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

RUN_PY = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "run.py")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run", RUN_PY)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _round(points: int, seconds: float, verdict: str) -> dict[str, Any]:
    return {"points": points, "seconds": seconds, "verdict": verdict, "verdicts": {}}


def test_per_point_is_a_median_of_each_rounds_own_ratio_and_a_fail_in_any_round_shows(
    bench: ModuleType,
) -> None:
    xs = [_round(10, 2.0, "PASS"), _round(10, 8.0, "FAIL"), _round(10, 3.0, "PASS")]
    v = bench.per_point(xs)
    assert v["s_per_point"] == 0.3  # median of 0.2, 0.8, 0.3
    assert v["verdict_s"] == 3.0  # the whole run, median over rounds
    assert v["verdict"] == "FAIL"
    assert v["verdict_rounds"] == "FAIL 1/3, PASS 2/3"


def _cost(run_us: float, p50_us: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"run_p50_us": run_us, "run_mean_us": run_us * 1.5, "rounds": 3}
    if p50_us is not None:
        out.update(p50_us=p50_us, p99_us=p50_us * 3, n=300)
    return out


def test_peer_ratios_use_our_per_run_figure_at_the_peers_steps_not_our_median_step(
    bench: ModuleType,
) -> None:
    cost = {
        "limit": _cost(100, 90),
        "ours_always": _cost(120, 100),
        "limit_batch10": _cost(12, 10),
        "ours_batch10": _cost(20, 18),
        "ours_run_step": _cost(150, 100),
        "ours_run_step_peer_n": _cost(400, 100),  # fsync tails: the run's mean is higher
        "sqlitesaver_step": _cost(1000),
        "dbos_step": _cost(3000),
    }
    grow = {"ours": {10: {"per_step": 300.0}}, "sqlitesaver": {}}
    r = bench.summarize(
        cost, grow, {10: {"p50_ms": 1.0}}, {}, [10], argparse.Namespace(quick=True), "ext4"
    )
    h = r["headline"]
    assert h["sqlitesaver_overhead_over_ours"] == 2.5  # 1000 / 400, not 1000 / 100
    assert h["dbos_overhead_over_ours"] == 7.5
    assert h["sqlitesaver_overhead_over_ours_mean"] == 2.5


def _fileop_row(ours_s: float, peer_s: float, ours_verdict: str) -> dict[str, Any]:
    def tool(s: float, verdict: str) -> dict[str, Any]:
        return {
            "points": 10,
            "s_per_point": s,
            "per_s": round(1 / s, 2),
            "verdict_s": s * 10,
            "verdict": verdict,
            "verdict_rounds": f"{verdict} 3/3",
            "verdicts": {},
        }

    return {
        "crashpoint": tool(ours_s, ours_verdict),
        "crashpoint_fork": tool(ours_s / 2, ours_verdict),
        "ckpt_chaos": tool(peer_s, "PASS"),
        "per_point_ratio": bench_ratio(peer_s, ours_s),
        "per_point_ratio_fork": bench_ratio(peer_s, ours_s / 2),
        "verdict_ratio": bench_ratio(ours_s, peer_s),
        "verdict_ratio_fork": bench_ratio(ours_s / 2, peer_s),
    }


def bench_ratio(a: float, b: float) -> float:
    return round(a / b, 2)


def test_the_fileop_row_shows_each_sides_verdict_and_its_own_header(bench: ModuleType) -> None:
    env = bench.env_end(bench.env_start("2026-01-01 00:00 UTC"))
    fo = {
        "rounds": 3,
        "state_on": "tmpfs",
        "agents": {"naive": "benchmarks/naive_agent.py"},
        "naive": _fileop_row(0.4, 0.2, "FAIL"),
        "env": env,
    }
    results: dict[str, Any] = {"headline": {}, "quick": False}
    bench.add_fileop(results, fo)
    h = results["headline"]
    assert h["fileop_per_point_over_ckpt_chaos"] == 0.5  # ckpt-chaos's s/point / ours
    assert h["fileop_verdict_s_over_ckpt_chaos"] == 2.0  # ours / ckpt-chaos's: later
    assert h["fileop_verdicts"] == {
        "crashpoint": "FAIL",
        "crashpoint_fork": "FAIL",
        "ckpt_chaos": "PASS",
    }
    page = bench.markdown(results)
    assert "FAIL / FAIL / PASS" in page
    assert "**FAIL** (FAIL 3/3)" in page
    assert env["machine"]["cpu"] in page
    assert "load average (1 min)" in page
    assert "one run" in page  # a single run: the page says so


def test_a_page_of_several_runs_says_so_and_dates_each_headline_row(bench: ModuleType) -> None:
    old = bench.env_end(bench.env_start("2026-01-01 00:00 UTC"))
    new = dict(old, run="2026-02-02 00:00 UTC")
    results: dict[str, Any] = {"headline": {}, "quick": False}
    fo = {
        "rounds": 3,
        "state_on": "tmpfs",
        "agents": {},
        "naive": _fileop_row(0.1, 0.4, "PASS"),
        "env": new,
    }
    bench.add_fileop(results, fo)
    results["powerloss"] = {
        "rounds": 3,
        "state_on": "tmpfs",
        "agent": "benchmarks/naive_agent.py",
        "env": old,
    }
    page = bench.markdown(results)
    assert "combines 2 runs" in page
    assert "| 2026-01-01 00:00 UTC |" in page
    assert "| 2026-02-02 00:00 UTC |" in page


def _plugin(ratio: float, printed: list[str]) -> dict[str, Any]:
    side = {
        "with_ms": 1000 * ratio,
        "without_ms": 1000.0,
        "ratio": ratio,
        "cpu_with_ms": 500.0,
        "cpu_without_ms": 500.0,
        "cpu_ratio": 1.0,
        "printed": printed,
    }
    return {
        "runs": 5,
        "target": 1.05,
        "modules": ["crashpoint.pytest_plugin.hooks"],
        "plugins": ["crashpoint", "xdist"],
        "installed": dict(side),
        "alone": dict(side, ratio=ratio + 0.01),
    }


def test_the_plugin_section_gives_both_ratios_and_says_when_the_plugin_printed(
    bench: ModuleType,
) -> None:
    results: dict[str, Any] = {"headline": {}, "quick": False}
    p = _plugin(1.02, [])
    p["env"] = bench.env_end(bench.env_start("2026-01-01 00:00 UTC"))
    bench.add_plugin(results, p)
    h = results["headline"]
    assert (h["plugin_over_no_plugin"], h["plugin_alone_over_pytest_alone"]) == (1.02, 1.03)
    assert h["plugin_printed"] is False
    page = bench.markdown(results)
    assert "| 1.02 (CPU 1.0); printed nothing | ≤ 1.05; nothing |" in page
    assert "## The pytest plugin's cost" in page
    assert p["env"]["machine"]["cpu"] in page  # the table's own header
    bench.add_plugin(results, _plugin(1.2, ["crashpoint: seed 1"]))
    assert results["headline"]["plugin_printed"] is True
    page = bench.markdown(results)
    assert "1.2 (CPU 1.0); **printed**" in page
    assert "`crashpoint: seed 1`" in page
    bench.add_plugin(results, {"note": "benchmarks/plugin_overhead.py exited 1"})
    assert "Not measured: benchmarks/plugin_overhead.py exited 1" in bench.markdown(results)


def _planning_row(shape: str, writes: int, us: float, model: str = "posix") -> dict[str, Any]:
    return {
        "planner": "incremental",
        "model": model,
        "shape": shape,
        "writes": writes,
        "operations": 2 * writes,
        "states": 4 * writes,
        "seconds": us * 4 * writes / 1e6,
        "states_per_s": 1e6 / us,
        "us_per_state": us,
        "per_state_vs_smallest": 1.0,
        "runs": 3,
    }


def _campaign(model: str, wall: float, **kw: Any) -> dict[str, Any]:
    c = {
        "model": model,
        "count": None,
        "writes": 1000,
        "budget_s": 30.0,
        "wall_s": wall,
        "wall_over_budget": round(wall / 30, 3),
        "golden_s": 3.0,
        "golden_phase_s": 8.0,
        "operations": 2687,
        "planning_s": 4.0,
        "planning_stopped": False,
        "planned": 11727,
        "ran": 4,
        "failed": 3,
        "trial_s": 1.5,
        "projected_s": 17600.0,
        "verdict": "FAIL",
        "incomplete": "the campaign's time budget of 30s ran out: 4 of 11727 trials ran. "
        "A campaign stopped by its budget fails: raise it",
    }
    c.update(kw)
    return c


def test_the_planning_section_takes_the_growth_per_state_and_each_campaigns_wall_over_budget(
    bench: ModuleType,
) -> None:
    rows = [
        _planning_row("growing", 10, 100.0),
        _planning_row("growing", 100, 110.0),
        _planning_row("growing", 1000, 130.0),
        _planning_row("fixed", 10, 100.0),
        _planning_row("fixed", 1000, 90.0),
        _planning_row("growing", 10, 100.0, model="ext4-ordered"),  # not the posix figure
        _planning_row("growing", 100, 5000.0, model="ext4-ordered"),
    ]
    camps = [
        _campaign("posix", 30.1),
        _campaign("ext4-ordered", 29.7, planning_stopped=True, ran=0, planned=525),
        _campaign("posix", 24.0, count=3, ran=3, planned=3, incomplete=""),
    ]
    pl = {"rows": rows, "runs": 3, "campaigns": camps, "state_on": "tmpfs"}
    results: dict[str, Any] = {"headline": {}, "quick": False}
    bench.add_planning(results, pl)
    h = results["headline"]
    assert h["planning_per_state_1000_over_10"] == 1.3  # 130 / 100: the largest / the smallest
    assert h["planning_fixed_per_state_1000_over_10"] == 0.9
    assert h["campaign_1000_wall_over_budget"] == 1.003  # an overrun shows, not hidden
    assert h["campaign_1000_ext4_wall_over_budget"] == 0.99
    assert h["campaign_1000_drawn_wall_over_budget"] == 0.8
    page = bench.markdown(results)
    assert "| 1.3 (0.9) | ≈ 1 (linear) |" in page
    assert "4 of 11,727 trials ran, stopped by the budget" in page
    assert "planning stopped by the budget" in page
    assert "all 3 trials ran" in page
    assert "**1.003**" in page
    assert "would take about 17,600 s" in page
    assert "A campaign stopped by its budget fails" not in page  # the advice is cut off


def _load(name: str) -> ModuleType:
    path = os.path.join(os.path.dirname(RUN_PY), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up while it is made
    spec.loader.exec_module(mod)
    return mod


def test_the_naive_agent_takes_a_number_of_steps_and_keeps_its_five_by_default(
    tmp_path: Path,
) -> None:
    agent = os.path.join(os.path.dirname(RUN_PY), "naive_agent.py")
    for extra, done in (([], ["fetch", "summarise", "draft", "review", "send"]), (["3"], None)):
        state = tmp_path / f"state{len(extra)}"
        out = subprocess.run(
            [sys.executable, agent, str(state), *extra], capture_output=True, check=True
        )
        assert json.loads(out.stdout)["done"] == (done or ["s0", "s1", "s2"])


def test_the_planning_campaign_is_timed_and_stops_at_its_budget() -> None:
    """A real campaign of the naive agent (spawned, strace), its budget too short for its
    trials: it stops, says why, and the figures run.py renders are all there."""
    from crashpoint.faults import _strace

    ok, why = _strace.available()
    if not ok:
        pytest.skip(f"strace cannot trace here: {why}")
    pp = _load("power_planning")
    c = pp.campaign(20, "posix", budget=3.0)
    assert c["planned"] > c["ran"]  # 20 writes: dozens of states, not all run in 3 s
    assert "time budget of 3s ran out" in c["incomplete"]
    assert c["verdict"] == "FAIL"
    assert c["planning_s"] > 0
    assert 0 < c["golden_s"] <= c["golden_phase_s"] < c["wall_s"]
    assert c["wall_over_budget"] == pytest.approx(c["wall_s"] / 3.0, abs=0.01)
    assert c["wall_s"] < 3.0 + 2.0  # stopped at the budget, not after its trials
