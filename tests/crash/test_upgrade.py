"""Upgrade crashes and always-replay, end to end, with real processes.

``tests/agents/versioned.py`` is an order agent on a JSON file: load -> charge (effect
``charge_card``) -> notify (``email``, then ``sms``). Version A is the plain script; each
trial of an ``upgrade`` family kills A at one boundary of its golden run and resumes the run
under version B. A compatible B (``--v2``: other code, the same history) passes every
boundary; a B that renames the charge step (``--rename``) or sends the sms first
(``--reorder``) is caught by ``replay_divergence``, with a diff of the event lines where the
resumed run parts from the golden run. Under ``always_replay`` the agent resumes with its own
code: ``--shuffle`` (notifications in a set's order, which the string-hash seed of each
process decides) is caught, the deterministic agent passes. A version B that does not run at
all fails every trial with why; a crash that never happens leaves B untried (not exercised);
a failing trial's folder holds divergence.txt and replays.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from crashpoint.errors import ReplayError
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignResult,
    CheckResult,
    Fault,
    FaultFamily,
    Golden,
    Plan,
    TrialResult,
    family_from_spec,
    replay,
)

ROOT = Path(__file__).resolve().parents[2]
AGENT = str(ROOT / "tests" / "agents" / "versioned.py")
A = AgentSpec(command=("{python}", AGENT, "--state", "{state_dir}"), timeout=20)
#: golden boundaries: 0 before step_started load ... 6 before step_started notify, 8 before
#: effect email, 9 email in doubt
BEFORE_CHARGE, BEFORE_NOTIFY, EMAIL_IN_DOUBT = 2, 6, 9


def to(*flags: str) -> dict[str, Any]:
    return {"upgrade": {"to": {"command": ["{python}", AGENT, "--state", "{state_dir}", *flags]}}}


def campaign(
    tmp_path: Path,
    spec: dict[str, Any],
    agent: AgentSpec = A,
    only: list[int] | None = None,
    **kw: Any,
) -> CampaignResult:
    return Campaign(
        agent, [family_from_spec(spec)], str(tmp_path / "report"), name="up", seed=5, **kw
    ).run(only=only)


def divergence(t: TrialResult) -> CheckResult:
    return next(c for c in t.checks if c.name == "replay_divergence")


#: one boundary of each kind, of the 12 (9 events, 3 in-doubt windows): the first, before an
#: effect, an effect in doubt, before a step after the first effect, the last
EACH_KIND = [0, 3, 4, BEFORE_NOTIFY, 11]


def test_a_compatible_upgrade_passes_at_each_kind_of_boundary(tmp_path: Path) -> None:
    r = campaign(tmp_path, to("--v2"), only=EACH_KIND)
    assert [t.plan.index for t in r.trials] == EACH_KIND
    assert all(t.status == "passed" for t in r.trials), [t.failed for t in r.trials]
    t = r.trials[EACH_KIND.index(BEFORE_NOTIFY)]
    assert "attempt 2 resumed under version B" in t.landed()
    assert "--v2" in t.attempts[1].argv  # attempt 2 ran B, attempt 1 A
    assert "--v2" not in t.attempts[0].argv
    c = divergence(t)
    assert "attempt 2 (version B) continued as the golden run did from golden event #5" in (
        c.message
    )
    assert "version B's own crash-free run is the same as A's (9 events)" in c.message


# slow: an exhaustive sweep; fast cover: test_a_compatible_upgrade_passes_at_each_kind_of_boundary
@pytest.mark.slow
def test_a_compatible_upgrade_passes_at_every_boundary(tmp_path: Path) -> None:
    r = campaign(tmp_path, to("--v2"))
    assert len(r.trials) == 12  # one per boundary: 9 events and 3 in-doubt windows
    assert all(t.status == "passed" for t in r.trials), [t.failed for t in r.trials]


def test_an_upgrade_that_renames_a_step_is_caught_with_the_diff(tmp_path: Path) -> None:
    r = campaign(tmp_path, to("--rename"), only=[BEFORE_CHARGE])
    (t,) = r.trials
    assert t.status == "failed"
    assert t.exercised  # the kill landed and B ran
    assert t.root_cause is not None
    assert t.root_cause.name == "replay_divergence"
    c = divergence(t)
    assert "expected 'step_started charge' (golden event #2), got 'step_started bill'" in (
        c.message
    )
    diff = c.message.splitlines()
    assert "    -step_started charge" in diff
    assert "    +step_started bill" in diff
    assert any(line.startswith("    +++ attempt 2 (version B: {python}") for line in diff)
    assert "B's own crash-free run parts from A's too, at golden event #2" in c.message
    assert "changed the workflow" in c.hint
    folder = Path(t.folder)
    assert "+step_started bill" in (folder / "divergence.txt").read_text()
    again = replay(str(folder))  # the evidence replays: B again, the same divergence
    assert {x.name for x in again.failed} == {"replay_divergence"}


def test_version_b_secrets_stay_out_of_the_evidence_and_replay_takes_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-version-b-0123456789"  # noqa: S105 (a fake secret, to be redacted)
    spec = to("--rename")
    spec["upgrade"]["to"]["env"] = {"API_TOKEN": secret}
    (t,) = campaign(tmp_path, spec, only=[BEFORE_CHARGE]).trials
    assert t.status == "failed"
    folder = Path(t.folder)
    leaked = [p for p in folder.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert leaked == []
    assert "<redacted:API_TOKEN_B>" in (folder / "plan.json").read_text()
    with pytest.raises(ReplayError, match="API_TOKEN are redacted"):
        replay(str(folder))
    monkeypatch.setenv("API_TOKEN", secret)
    again = replay(str(folder))
    assert {x.name for x in again.failed} == {"replay_divergence"}
    assert again.attempts[1].argv[-1] == "--rename"


def test_an_upgrade_that_reorders_two_effects_is_caught(tmp_path: Path) -> None:
    r = campaign(tmp_path, to("--reorder"), only=[BEFORE_NOTIFY, EMAIL_IN_DOUBT])
    before, in_doubt = r.trials
    c = divergence(before)
    assert not c.ok
    assert "expected 'effect email" in c.message
    assert "got 'effect sms" in c.message
    assert "    +effect sms " in c.message
    # the email was applied before the crash: sending only the sms after it is no divergence
    assert divergence(in_doubt).ok, divergence(in_doubt)
    assert not r.ok


def test_a_nondeterministic_agent_is_caught_by_always_replay(tmp_path: Path) -> None:
    shuffled = AgentSpec(command=(*A.command, "--shuffle"), timeout=20)
    r = campaign(tmp_path, {"always_replay": {}}, shuffled, only=[0, BEFORE_CHARGE, 4])
    assert all(t.exercised for t in r.trials)
    failed = [t for t in r.trials if not divergence(t).ok]
    assert failed, "three resumes of six notifications in set order all matched by chance"
    c = divergence(failed[0])
    assert 'effect notify {"channel":' in c.message
    assert "+++ attempt 2 (resumed from attempt 1's crash)" in c.message
    assert "set or dict order" in c.hint


def test_a_deterministic_agent_passes_always_replay(tmp_path: Path) -> None:
    r = campaign(tmp_path, {"always_replay": {}}, only=EACH_KIND)
    assert [t.plan.index for t in r.trials] == EACH_KIND
    assert all(t.status == "passed" for t in r.trials), [t.failed for t in r.trials]
    assert "attempt 2 resumed from attempt 1's crash" in r.trials[0].landed()


# slow: an exhaustive sweep; fast cover: test_a_deterministic_agent_passes_always_replay
@pytest.mark.slow
def test_a_deterministic_agent_passes_always_replay_at_every_boundary(tmp_path: Path) -> None:
    r = campaign(tmp_path, {"always_replay": {}})
    assert len(r.trials) == 12
    assert all(t.status == "passed" for t in r.trials), [t.failed for t in r.trials]


def test_a_version_b_on_another_interpreter(tmp_path: Path) -> None:
    """``to.python``: {python} is B's interpreter (here a wrapper that runs the agent with
    --reorder, so only B running under it explains the divergence)."""
    py = tmp_path / "venv-b" / "python"
    py.parent.mkdir()
    py.write_text(f'#!/bin/sh\nexec {sys.executable} "$@" --reorder\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    r = campaign(tmp_path, {"upgrade": {"to": {"python": str(py)}}}, only=[BEFORE_NOTIFY])
    (t,) = r.trials
    assert t.attempts[1].argv[0] == str(py)
    assert "got 'effect sms" in divergence(t).message


def test_a_version_b_that_does_not_run_fails_every_trial_with_why(tmp_path: Path) -> None:
    broken = {"upgrade": {"to": {"command": ["{python}", "-c", "raise SystemExit(3)"]}}}
    r = campaign(tmp_path, broken, only=[0, 1])
    assert [t.status for t in r.trials] == ["failed", "failed"]
    c = r.trials[0].checks[0]
    assert c.name == "replay_divergence"
    assert c.message.startswith("version B ({python} -c 'raise SystemExit(3)') failed its own")
    assert "exit 3" in c.message
    assert not r.trials[0].attempts  # nothing was run under a B that cannot run


def test_an_upgrade_whose_crash_never_happens_is_not_exercised(tmp_path: Path) -> None:
    def plan(fam: FaultFamily, golden: Golden, seed: int, index: int) -> Plan:
        never = Fault.make("kill", 1, op="step_started", name="no_such_step", nth=1)
        up = Fault.make("upgrade", 2, to={"env": {"V": "2"}}, label="env V")
        return Plan((never, up), fam.name, seed, index)

    r = campaign(tmp_path, {"upgrade": {"to": {"env": {"V": "2"}}}}, only=[0], plan_hook=plan)
    (t,) = r.trials
    assert t.status == "not exercised"
    assert "attempt 2 never ran: attempt 1 completed (exit 0) first" in t.landed()
    assert [a.returncode for a in t.attempts] == [0]
    assert os.path.isdir(r.report_dir)
