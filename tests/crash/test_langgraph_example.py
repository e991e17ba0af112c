"""The LangGraph example, run as shipped: ``examples/langgraph/``.

A StateGraph plan -> search -> send_email -> report on SqliteSaver, hooked to the harness by
one line (``instrument`` from ``crashpoint.adapters.langgraph``). ``send_email`` posts to the
HTTP stand-in, ``report`` publishes through ``probe.effect``: effects judged both ways. As
written (no key) a kill after the email and before send_email's checkpoint write makes
LangGraph re-run the node: the gate fails with the duplicate and that boundary in the
evidence; ``--fixed`` (a key from the thread and the node) passes the same trial, on SqliteSaver
and on CrashpointSaver. Real processes, real kills, real SQLite files. The quick tests run one
planned trial each (a trial pays LangGraph's import on every attempt); the full sweeps through
``crashpoint run`` are marked slow. Skipped, with the reason, without LangGraph.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from _forked import forking, warm
from _lazy import needs
from crashpoint.harness import (
    Campaign,
    Fault,
    Golden,
    Plan,
    TrialResult,
    TrialRunner,
    Zygote,
    family_from_spec,
    load_scenario,
)

pytestmark_0 = needs(
    "langgraph",
    reason="the example is a LangGraph graph (pip install "
    "'crashpoint[langgraph]', or the dev extra)",
)
pytestmark_1 = needs(
    "langgraph.checkpoint.sqlite",
    reason="the example checkpoints with SqliteSaver (pip install "
    "langgraph-checkpoint-sqlite, or the dev extra)",
)
pytestmark = [pytestmark_0, pytestmark_1]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "langgraph"
STEPS = ["plan", "search", "send_email", "report"]
BOUNDARY = "langgraph:send_email:before_checkpoint"


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """One warm interpreter that imported LangGraph (seconds of CPU) for the module: every
    scenario runs the same agent.py (their flags differ), so each forks from it."""
    with forking(warm(load_scenario(EXAMPLE / "broken.scenario.yaml").agent)) as z:
        yield z


def _trial(name: str, tmp_path: Path, zygote: Zygote, *kills: Fault) -> tuple[Golden, TrialResult]:
    sc = load_scenario(EXAMPLE / name)
    agent = warm(sc.agent)  # forked: this trial is about the agent's key, not spawning
    forks = zygote.forks
    with TrialRunner(
        agent, str(tmp_path / "trials"), restarts=sc.restarts, expect=sc.expect, launcher=zygote
    ) as runner:
        golden = runner.golden()
        t = runner.run(Plan(kills, "kill", sc.seed, 0), golden)
    assert zygote.forks == forks + 1 + len(t.attempts), "every run was forked from the zygote"
    return golden, t


def _after_the_email() -> Fault:
    """send_email returned (its POST applied), its checkpoint not yet written."""
    return Fault.make("kill", 1, op="event", name=BOUNDARY, phase="before")


def _names(events: list[dict[str, object]]) -> list[str]:
    return [f"{e['op']}:{e.get('step') or e.get('kind') or e.get('name')}" for e in events]


def test_the_graph_as_written_sends_the_email_twice_after_a_kill_before_its_checkpoint(
    tmp_path: Path, zygote: Zygote
) -> None:
    golden, t = _trial("broken.scenario.yaml", tmp_path, zygote, _after_the_email())
    assert golden.steps == STEPS
    names = _names(golden.events)
    # the boundary lies after the email was applied and before send_email was durable
    assert (
        names.index("effect:POST /email")
        < names.index(f"event:{BOUNDARY}")
        < names.index("step_completed:send_email")
    )
    assert "event:langgraph:tool:web_search" in names  # tool call started
    assert not t.ok
    failed = {c.name: c.message for c in t.failed}
    assert "DUPLICATED POST /email" in failed["exactly_once"]
    assert "no key" in failed["exactly_once"]
    assert [o.where for o in t.outcomes] == [
        f"attempt 1 event #{_index(t, BOUNDARY)} event:{BOUNDARY} (before)"
    ]
    # the evidence (the trial's history) names the boundary in words
    history = [
        json.loads(line) for line in (Path(t.folder) / "history.jsonl").read_text().splitlines()
    ]
    killed = [e for e in history if e.get("killed") == "before"]
    assert [(e["name"], e["boundary"]) for e in killed] == [
        (BOUNDARY, "after send_email's side effects, before its checkpoint write")
    ]
    # LangGraph re-ran the node on restart: it was never reported completed before the kill
    resumed = [e for e in t.events if e["attempt"] == 2 and e["op"] == "step_started"]
    assert "step_started:send_email" in _names(resumed)
    # and it started again no step reported completed (with async durability search's
    # checkpoint may still be in flight at the kill: then search rightly runs again too)
    done = {e["step"] for e in t.events if e["attempt"] == 1 and e["op"] == "step_completed"}
    assert [e["step"] for e in resumed if e["step"] in done] == []
    assert "step_completed:send_email" not in _names([e for e in t.events if e["attempt"] == 1])


def _index(t: TrialResult, name: str) -> int:
    return next(int(e["i"]) for e in t.events if e.get("name") == name)


def test_the_fixed_graph_passes_the_same_trial(tmp_path: Path, zygote: Zygote) -> None:
    _golden, t = _trial("fixed.scenario.yaml", tmp_path, zygote, _after_the_email())
    assert t.ok, [str(c) for c in t.failed]
    emails = [e for e in t.events if e.get("kind") == "POST /email"]
    assert [e["applied"] for e in emails] == [True, False]  # the re-sent email deduplicated
    assert emails[0]["key"] == emails[1]["key"]
    assert str(emails[0]["key"]).endswith(":send_email")  # thread id + node name


# slow: fast cover: test_the_graph_as_written_sends_the_email_twice_after_a_kill_before_its_...
@pytest.mark.slow
def test_an_effect_through_the_probe_is_judged_too(tmp_path: Path, zygote: Zygote) -> None:
    """report's probe.effect, killed after the harness applied it and before the agent heard
    so: as written (no key) it is published twice; fixed (keyed), once."""
    kill = Fault.make("kill", 1, op="effect", name="publish_report", phase="in_doubt")
    _g, broken = _trial("broken.scenario.yaml", tmp_path / "broken", zygote, kill)
    failed = {c.name: c.message for c in broken.failed}
    assert "DUPLICATED publish_report" in failed["exactly_once"]
    _g, fixed = _trial("fixed.scenario.yaml", tmp_path / "fixed", zygote, kill)
    assert fixed.ok, [str(c) for c in fixed.failed]


# slow: fast cover: test_the_fixed_graph_passes_the_same_trial (the same trial, the same adapter)
# and tests/unit/test_langgraph_saver_resume.py's kill mid-put (CrashpointSaver killed for real)
@pytest.mark.slow
def test_the_same_graph_on_crashpoint_saver_passes_the_same_trial(
    tmp_path: Path, zygote: Zygote
) -> None:
    pytest.importorskip(
        "crashpoint.adapters.langgraph_saver", reason="CrashpointSaver is not in this tree"
    )
    golden, t = _trial("crashpoint-saver.scenario.yaml", tmp_path, zygote, _after_the_email())
    assert golden.steps == STEPS
    assert t.ok, [str(c) for c in t.failed]
    assert [e["applied"] for e in t.events if e.get("kind") == "POST /email"] == [True, False]


def test_file_operation_kills_on_sqlite_are_not_exercised_without_strace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zygote: Zygote
) -> None:
    """SQLite writes in C, below Python's audit hooks: without strace no file operation of
    SqliteSaver is seen, so a fileop family cannot fire. It must fail as not exercised,
    never pass. (The golden run is forked from the zygote: one LangGraph import fewer; the
    fileop trial's attempt needs a fresh interpreter and is spawned by the harness.)"""
    monkeypatch.setenv("CRASHPOINT_NO_STRACE", "1")
    sc = load_scenario(EXAMPLE / "fixed.scenario.yaml")
    forks = zygote.forks
    result = Campaign(
        warm(sc.agent),
        [family_from_spec({"kill": {"at": "fileop"}})],
        str(tmp_path / "report"),
        name="langgraph-fileop",
        seed=1,
        restarts=sc.restarts,
        launcher=zygote,
    ).run()
    assert zygote.forks == forks + 1, "the golden run was not forked"
    assert not result.ok
    assert result.unexercised(), [t.status for t in result.trials]
    assert all(t.status == "not exercised" for t in result.trials)
    assert "files written from C (SQLite)" in result.golden.recorded_by


def test_the_scenarios_differ_in_their_flags_only() -> None:
    broken = load_scenario(EXAMPLE / "broken.scenario.yaml").agent.command
    fixed = load_scenario(EXAMPLE / "fixed.scenario.yaml").agent.command
    ours = load_scenario(EXAMPLE / "crashpoint-saver.scenario.yaml").agent.command
    assert fixed == (*broken, "--fixed")
    assert ours == (*fixed, "--saver", "crashpoint")


def test_the_adapter_names_the_extra_when_langgraph_is_missing() -> None:
    code = (
        "import sys; sys.modules['langgraph'] = None; sys.modules['langchain_core'] = None\n"
        "try:\n    import crashpoint.adapters.langgraph\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert "pip install 'crashpoint[langgraph]'" in out


def test_the_core_never_imports_langgraph() -> None:
    code = (
        "import sys, crashpoint, crashpoint.harness, crashpoint.checkpoint, crashpoint.cli\n"
        "print(sorted(m for m in sys.modules if m.startswith(('langgraph', "
        "'langchain', 'crashpoint.adapters.'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"


def test_instrument_refuses_a_graph_without_a_checkpointer() -> None:
    sys.path.insert(0, str(EXAMPLE))
    try:
        import agent  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(EXAMPLE))
    from crashpoint.adapters.langgraph import instrument

    with pytest.raises(ValueError, match="no checkpointer"):
        instrument(agent.build().compile())


# -- the full sweeps, as `crashpoint run` runs them ------------------------------------------------


def _gate(scenario: str, report: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "crashpoint",
            "run",
            "--quiet",
            "--report",
            str(report),
            str(EXAMPLE / scenario),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
        cwd=str(ROOT),
    )


@pytest.mark.slow
def test_the_gate_fails_the_graph_as_written_at_every_boundary(tmp_path: Path) -> None:
    r = _gate("broken.scenario.yaml", tmp_path / "report")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "DUPLICATED POST /email" in r.stdout
    assert f"event:{BOUNDARY} (before)" in r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["fixed.scenario.yaml", "crashpoint-saver.scenario.yaml"])
def test_the_gate_passes_the_fixed_graph_at_every_boundary(tmp_path: Path, scenario: str) -> None:
    if "crashpoint-saver" in scenario:
        pytest.importorskip(
            "crashpoint.adapters.langgraph_saver", reason="CrashpointSaver is not in this tree"
        )
    r = _gate(scenario, tmp_path / "report")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
