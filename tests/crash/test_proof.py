"""A PASS is proof: faults that do not fire never pass, kills land where planned, verdicts name
one root cause.

Real agents, real kills. Each test points the gate at an agent its faults cannot touch (or at a
bug) and checks that the gate refuses to go green, and says why; its twin shows the good path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _forked import forking, warm
from crashpoint.errors import NoBoundaries
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignResult,
    Expect,
    Fault,
    Plan,
    TrialRunner,
    Zygote,
    family_from_spec,
)

AGENTS = Path(__file__).resolve().parents[1] / "agents"


def agent(name: str, **kw: Any) -> AgentSpec:
    return AgentSpec(
        command=("{python}", str(AGENTS / f"{name}.py"), "--state", "{state_dir}"), **kw
    )


@pytest.fixture(scope="module")
def good() -> Iterator[tuple[AgentSpec, Zygote]]:
    """The good agent in fork mode and its zygote, one for the module: the tests that kill it
    by identity, by time or in an effect's in-doubt window are about where kills land and what
    the verdicts say, not about spawning (the others spawn every attempt; fileop and disk_full
    attempts are spawned by the harness anyway)."""
    spec = warm(agent("good_agent"))
    with forking(spec) as z:
        yield spec, z


def campaign(spec: AgentSpec, faults: list[Any], tmp_path: Path, **kw: Any) -> CampaignResult:
    return Campaign(
        spec,
        [family_from_spec(f) for f in faults],
        str(tmp_path / "report"),
        name="proof",
        seed=7,
        **kw,
    ).run()


def test_failpoints_on_an_agent_without_the_reference_library_are_not_exercised(
    tmp_path: Path,
) -> None:
    result = campaign(
        agent("stateless_agent"), [{"kill": {"at": "failpoint", "count": 3}}], tmp_path
    )
    assert [t.status for t in result.trials] == ["not exercised"] * 3
    assert not result.failures  # nothing failed...
    assert not result.ok  # ...and still no green
    [msg] = result.unexercised()
    assert "none of its 3 trial(s) was exercised" in msg
    assert "failpoints exist only inside the reference library" in msg
    s = result.summary()
    assert (s["exercised"], s["not_exercised"], s["passed"]) == (0, 3, 0)
    assert s["families"]["kill@failpoint"]["planned"] == 3
    # the JUnit report shows the family's verdict as a failure, the trials as not exercised
    junit = result.junit()
    assert junit.get("failures") == "1"
    exercised = [p for p in junit.iter("property") if p.get("name", "").startswith("exercised[")]
    assert [p.get("value") for p in exercised] == ["0/3"]
    assert sum(1 for c in junit.iter("skipped") if "not exercised" in c.get("message", "")) == 3


def test_fileop_kills_on_an_agent_that_writes_no_file_are_not_exercised(tmp_path: Path) -> None:
    result = campaign(agent("stateless_agent"), [{"kill": {"at": "fileop"}}], tmp_path)
    assert result.golden.fileops == []
    [trial] = result.trials  # never zero trials: one, that cannot pass, and says why
    assert trial.status == "not exercised"
    [msg] = result.unexercised()
    assert "no file operation was recorded in the golden run" in msg
    assert "{state_dir}" in msg  # where it looked, and how to point the agent there


def test_the_reference_agent_hits_its_failpoints_and_passes(tmp_path: Path) -> None:
    demo = AgentSpec(("{python}", "-m", "crashpoint.agents.demo", "--state", "{state_dir}"))
    result = campaign(demo, [{"kill": {"at": "failpoint", "count": 3}}], tmp_path)
    assert result.ok, [t.landed() for t in result.trials]
    assert all(t.status == "passed" for t in result.trials)
    assert all(t.outcomes[0].where.startswith("failpoint ") for t in result.trials)


def test_a_probe_less_agent_is_an_error_that_says_how_to_add_probe_calls(tmp_path: Path) -> None:
    silent = AgentSpec(("sh", "-c", "echo hello"))
    with pytest.raises(
        NoBoundaries,
        match=r"reported no event .* Add probe calls .* "
        r"probe\.step_started",
    ):
        campaign(silent, [{"kill": {"at": "time", "count": 2}}], tmp_path)


def test_a_chained_kill_after_a_fault_that_let_the_agent_finish_did_not_fire(
    tmp_path: Path,
) -> None:
    # the failpoint is never hit (no reference library), so attempt 1 completes; the kill
    # planned for attempt 2 never runs: the trial is not exercised, and says why
    result = campaign(
        agent("stateless_agent"),
        [[{"kill": {"at": "failpoint"}}, {"kill": {"at": "random", "count": 2}}]],
        tmp_path,
    )
    for t in result.trials:
        assert t.status == "not exercised"
        assert len(t.attempts) == 1  # a completed run is not restarted to be killed
        assert "attempt 2 never ran: attempt 1 completed (exit 0) first" in t.outcomes[1].why_not


def test_kills_by_identity_land_on_the_planned_event_and_say_where(
    good: tuple[AgentSpec, Zygote], tmp_path: Path
) -> None:
    spec, zygote = good
    forks = zygote.forks
    result = campaign(spec, [{"kill": {"at": "every-boundary"}}], tmp_path, launcher=zygote)
    assert zygote.forks > forks, "fork mode was not used"
    assert result.ok
    golden = result.golden
    assert len(result.trials) == len(golden.boundaries())
    for t, b in zip(result.trials, golden.boundaries(), strict=True):
        [out] = t.outcomes
        assert out.fired, out
        ev = golden.events[b.index]
        label = f"{ev['op']}:{ev.get('step') or ev.get('kind')}"
        assert f"{label} ({b.phase})" in out.where  # landed exactly where planned
        killed = [e for e in t.events if e.get("killed")]
        assert [(e["op"], e.get("step") or e.get("kind")) for e in killed] == [
            (ev["op"], ev.get("step") or ev.get("kind"))
        ]


def test_instants_after_the_agent_finished_are_not_exercised_with_a_hint(
    good: tuple[AgentSpec, Zygote], tmp_path: Path
) -> None:
    spec, zygote = good
    result = campaign(
        spec, [{"kill": {"at": "time", "count": 4, "within": "30s"}}], tmp_path, launcher=zygote
    )
    late = [t for t in result.trials if t.status == "not exercised"]
    assert late, [t.landed() for t in result.trials]  # 30 s is far past a run of ~0.1 s
    assert "lower `within` to about how long the agent works" in late[0].outcomes[0].why_not
    assert not [t for t in result.trials if t.status == "passed" and not t.exercised]


def test_a_keyless_duplicate_is_caught_by_exactly_once_judged_by_content(tmp_path: Path) -> None:
    spec = agent("keyless_effect")
    with TrialRunner(spec, str(tmp_path / "trials")) as runner:
        golden = runner.golden()  # a keyless effect no longer fails the golden run
        assert sum(golden.effects.values()) == 1
        kill = Fault.make("kill", 1, op="effect", name="notify", nth=1, phase="in_doubt")
        t = runner.run(Plan((kill,), "kill", 7, 0), golden)
    assert t.exercised
    assert t.status == "failed"
    root = t.root_cause
    assert root is not None
    assert root.name == "exactly_once"
    assert "DUPLICATED notify" in root.message
    assert "2 sends of the same payload, no key" in root.message
    assert "pass a key derived from the run id" in root.hint


def test_the_good_agent_is_not_duplicated_by_the_same_in_doubt_kill(
    good: tuple[AgentSpec, Zygote], tmp_path: Path
) -> None:
    spec, zygote = good
    with TrialRunner(spec, str(tmp_path / "trials"), launcher=zygote) as runner:
        golden = runner.golden()
        kill = Fault.make("kill", 1, op="effect", name="notify", nth=1, phase="in_doubt")
        t = runner.run(Plan((kill,), "kill", 7, 0), golden)
    assert t.exercised
    assert t.ok, [str(c) for c in t.failed]


def test_a_harmless_corruption_after_an_in_doubt_kill_is_not_blamed(tmp_path: Path) -> None:
    # the duplicate comes from the key that changes per attempt; deleting the lock file (the
    # agent recreates it) harms nothing: exactly_once is the root cause, with its hint
    with TrialRunner(agent("fresh_key_effect"), str(tmp_path / "trials")) as runner:
        golden = runner.golden()
        plan = Plan(
            (
                Fault.make("kill", 1, op="effect", name="notify", nth=1, phase="in_doubt"),
                Fault.make("corrupt", 2, how="delete", path="{state_dir}/lock", seed=1),
            ),
            "corrupt",
            7,
            0,
        )
        t = runner.run(plan, golden)
    assert t.exercised, t.landed()
    root = t.root_cause
    assert root is not None
    assert root.name == "exactly_once", [str(c) for c in t.failed]
    assert "different keys" in root.message
    assert "the key changes between attempts" in root.hint
    blamed = {c.name: c for c in t.failed}
    if "corruption_detected" in blamed:  # shown, but as a consequence
        assert blamed["corruption_detected"].cause == "exactly_once"


def test_a_loud_refusal_of_damaged_state_is_recognised_by_its_stderr(tmp_path: Path) -> None:
    plan_faults = (
        Fault.make("kill", 1, op="step_started", name="notify", nth=1),
        Fault.make("corrupt", 2, how="bitflip", path="{state_dir}/state.json", seed=3),
    )
    for name, refused in (("loud_refusal", True), ("good_agent", True)):
        with TrialRunner(agent(name), str(tmp_path / name)) as runner:
            golden = runner.golden()
            t = runner.run(Plan(plan_faults, "corrupt", 7, 0), golden)
        assert t.exercised, t.landed()
        assert t.ok == refused, [str(c) for c in t.failed]
        det = next(c for c in t.checks if c.name == "corruption_detected")
        assert det.message.startswith("refused"), det
    # without the pattern, exit 1 is a crash: four checks would fail, one is the root
    strict = Expect(refuse_patterns=())
    with TrialRunner(agent("loud_refusal"), str(tmp_path / "strict"), expect=strict) as runner:
        golden = runner.golden()
        t = runner.run(Plan(plan_faults, "corrupt", 7, 0), golden)
    assert not t.ok
    root = t.root_cause
    assert root is not None
    assert root.name == "corruption_detected"
    consequences = {c.name: c.cause for c in t.failed if c is not root}
    assert consequences.get("completes") == "corruption_detected"
    assert all(cause for cause in consequences.values()), consequences


# -- disks that fill where you say, file operations swept ----------------------------------------


def _need_tmpfs_and_strace() -> None:
    from crashpoint.faults import _strace
    from crashpoint.faults._disk import capabilities

    caps = capabilities()
    if not caps.tmpfs:
        pytest.skip(f"no tmpfs in a mount namespace here: {caps.tmpfs_reason}")
    ok, why = _strace.available()
    if not ok:
        pytest.skip(f"strace unavailable: {why}")


def test_an_over_large_capacity_never_fills_and_the_family_says_so(tmp_path: Path) -> None:
    _need_tmpfs_and_strace()
    result = campaign(
        agent("good_agent"),
        [{"disk_full": {"mechanism": "tmpfs", "capacity": "1MiB", "count": 2}}],
        tmp_path,
    )
    assert [t.status for t in result.trials] == ["not exercised"] * 2
    [msg] = result.unexercised()
    assert "capacity 1 MiB never filled: lower it or use the write-point mode" in msg


def test_a_disk_full_sweep_catches_an_agent_that_swallows_enospc(tmp_path: Path) -> None:
    _need_tmpfs_and_strace()
    bad = campaign(
        agent("swallows_enospc"), [{"disk_full": {"mechanism": "tmpfs"}}], tmp_path / "bad"
    )
    points = bad.golden.writes["tmpfs"]
    assert len(bad.trials) == len(points) >= 2  # one trial per write point
    assert all(t.exercised for t in bad.trials), [t.landed() for t in bad.trials]
    assert bad.failures
    for t in bad.failures:  # the swallowed ENOSPC, then a kill: the "completed" step reruns
        assert re.search(r"fired: (ENOSPC|short write)", t.landed())  # the kernel refused it
        assert "then killed at its next event" in t.landed()
        root = t.root_cause
        assert root is not None
        assert root.name == "resumes_from_last_completed"
        assert "hit a full disk" in root.hint  # the warning on its stderr, surfaced
    good = campaign(agent("good_agent"), [{"disk_full": {"mechanism": "tmpfs"}}], tmp_path / "good")
    assert good.ok, [(t.landed(), [str(c) for c in t.failed]) for t in good.trials]
    assert all(t.status == "passed" for t in good.trials)


@pytest.mark.parametrize(
    "via",
    [
        # slow: real kills at traced operations' fast cover: [strace, replayed] (every operation
        # once, where planned) and test_kill_replay's [torn_checkpoint] (each traced operation
        # killed for real, the same verdicts as replayed)
        pytest.param("strace", marks=pytest.mark.slow),
        "strace, replayed",
        "audit hook",
    ],
)
def test_a_fileop_sweep_hits_every_operation_of_the_golden_run_once(
    via: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashpoint.faults import _strace

    if via.startswith("strace") and not _strace.available()[0]:
        pytest.skip(f"strace unavailable: {_strace.available()[1]}")
    if via == "audit hook":
        monkeypatch.setenv("CRASHPOINT_NO_STRACE", "1")
    replayed = via == "strace, replayed"  # else every kill is a real one
    fam = {"kill": {"at": "fileop", "replay": replayed}}
    result = campaign(agent("good_agent"), [fam], tmp_path)
    assert result.golden.recorded_by.startswith(via.split(",")[0])
    kills = [t.attempts[0].killed_by for t in result.trials]
    assert all(("replayed from the golden run" in k) == replayed for k in kills), kills
    ops = result.golden.fileops
    assert ops
    assert [t.plan.faults[0].arg("fileop") for t in result.trials] == ops
    landed = [t.outcomes[0].where for t in result.trials]
    assert all(t.exercised for t in result.trials), [t.landed() for t in result.trials]
    assert landed == [t.plan.faults[0].arg("label") for t in result.trials]  # where planned
    assert len(set(landed)) == len(ops)  # every operation once
    assert result.ok
    if via.startswith("strace"):  # writes and fsyncs are operations too (not the audit hook's)
        assert {"write", "fsync"} <= {o["op"] for o in ops}


def test_a_fileop_sweep_finds_temp_files_named_after_the_process(tmp_path: Path) -> None:
    from crashpoint.faults import _strace

    if not _strace.available()[0]:
        pytest.skip(f"strace unavailable: {_strace.available()[1]}")
    result = campaign(agent("pid_named_temp"), [{"kill": {"at": "fileop"}}], tmp_path)
    ops = result.golden.fileops
    per_run = [o for o in ops if ".state.json.*.tmp" in o["path"]]
    assert per_run, ops  # the pid is shown as *, and the kill waits for the call's count
    assert all(o.get("anywhere") for o in per_run)
    assert all(t.exercised for t in result.trials), [t.landed() for t in result.trials]
    assert result.ok
