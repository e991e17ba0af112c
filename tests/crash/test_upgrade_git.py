"""Upgrades between two commits of a git repository (``upgrade: {to: {rev: ...}}``), end to end.

A real temporary repository holds ``agent.py`` (which runs ``tests/agents/versioned.py`` with
the flags its commit names) at commit A, and on branches a compatible refactor (``v2``), a
renamed step (``rename``) and two reordered effects (``reorder``). The scenario file sits in
the repository; the working tree is A. Each trial kills A and resumes under B, checked out of
the commit into a folder under the campaign's own folder (``git archive``), which is gone when
the campaign ends; nothing is registered in the repository. A bad revision, a folder that is
no repository and a machine without git are one-line errors at the key's line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignInterrupted,
    CampaignResult,
    TrialRunner,
    load_scenario,
    replay,
)
from crashpoint.harness._spec._scenario import ScenarioError

ROOT = Path(__file__).resolve().parents[2]
VERSIONED = str(ROOT / "tests" / "agents" / "versioned.py")
BEFORE_CHARGE, BEFORE_NOTIFY = 2, 6  # golden boundaries (see tests/crash/test_upgrade.py)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

AGENT = """\
import runpy, sys
FLAGS = {flags!r}
sys.argv = [{versioned!r}, *sys.argv[1:], *FLAGS]
runpy.run_path({versioned!r}, run_name="__main__")
"""

SCENARIO = """\
name: up
agent:
  command: ["{{python}}", "{{scenario_dir}}/agent.py", "--state", "{{state_dir}}"]
  timeout: 20s
faults:
  - upgrade:
      to:
        {to}
"""


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
    )
    out = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return out.stdout.strip()


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agent's repository: commit A on main, one branch per version B."""
    r = tmp_path_factory.mktemp("repo")
    git(r, "init", "-q", "-b", "main")
    (r / "agent.py").write_text(AGENT.format(flags=[], versioned=VERSIONED))
    git(r, "add", "agent.py")
    git(r, "commit", "-q", "-m", "version A")
    for branch, flags in (("v2", ["--v2"]), ("rename", ["--rename"]), ("reorder", ["--reorder"])):
        git(r, "checkout", "-q", "-b", branch, "main")
        (r / "agent.py").write_text(AGENT.format(flags=flags, versioned=VERSIONED))
        git(r, "commit", "-q", "-am", f"version B: {branch}")
    git(r, "checkout", "-q", "main")
    return r


def scenario(folder: Path, to: str) -> Path:
    path = folder / "up.scenario.yaml"
    path.write_text(SCENARIO.format(to=to))
    return path


def run(repo: Path, tmp_path: Path, to: str, only: list[int]) -> CampaignResult:
    sc = load_scenario(str(scenario(repo, to)))
    return Campaign(
        sc.agent, [f.family for f in sc.families], str(tmp_path / "report"), name="up", seed=5
    ).run(only=only)


def divergence(r: CampaignResult, i: int = 0) -> Any:
    return next(c for c in r.trials[i].checks if c.name == "replay_divergence")


def leftovers(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "report").rglob("rev-*") if p.is_dir()]


def test_the_rev_is_resolved_to_a_commit_at_load(repo: Path) -> None:
    sc = load_scenario(str(scenario(repo, "rev: v2")))
    ((_kind, opts),) = sc.families[0].family.chain
    to = dict(opts)["to"]
    assert to["rev"] == git(repo, "rev-parse", "v2")  # the full commit id, not the branch
    assert to["repo"] == str(repo)
    assert sc.families[0].family.name == "upgrade@every-boundary"


def test_a_compatible_commit_passes_and_its_checkout_is_removed(repo: Path, tmp_path: Path) -> None:
    r = run(repo, tmp_path, "rev: v2", only=[BEFORE_CHARGE, BEFORE_NOTIFY])
    assert all(t.status == "passed" for t in r.trials), [t.failed for t in r.trials]
    t = r.trials[1]
    assert "attempt 2 resumed under version B" in t.landed()
    a, b = t.attempts[0].argv, t.attempts[1].argv
    assert f"{repo}/agent.py" in a  # A: the working tree
    assert f"{repo}/agent.py" not in b  # B: the commit's checkout
    assert any("/rev-" in part and part.endswith("/agent.py") for part in b), b
    assert "rev " + git(repo, "rev-parse", "v2")[:12] in t.landed()  # B named by its commit
    assert leftovers(tmp_path) == []  # the checkout is gone with the campaign
    assert git(repo, "worktree", "list").count("\n") == 0  # nothing registered in the repo
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""


def test_a_commit_that_renames_a_step_fails_replay_divergence_with_the_diff(
    repo: Path, tmp_path: Path
) -> None:
    r = run(repo, tmp_path, "rev: rename", only=[BEFORE_CHARGE])
    (t,) = r.trials
    assert t.status == "failed"
    assert t.root_cause is not None
    assert t.root_cause.name == "replay_divergence"
    c = divergence(r)
    assert "expected 'step_started charge' (golden event #2), got 'step_started bill'" in (
        c.message
    )
    assert "    +step_started bill" in c.message.splitlines()
    assert leftovers(tmp_path) == []
    again = replay(t.folder)  # the evidence replays: the commit exported again, B again
    assert {x.name for x in again.failed} == {"replay_divergence"}
    assert leftovers(tmp_path) == []


def test_a_commit_that_reorders_two_effects_fails_replay_divergence(
    repo: Path, tmp_path: Path
) -> None:
    r = run(repo, tmp_path, "rev: reorder", only=[BEFORE_NOTIFY])
    c = divergence(r)
    assert not c.ok
    assert "expected 'effect email" in c.message
    assert "got 'effect sms" in c.message


@pytest.mark.parametrize(
    ("to", "key", "says"),
    [
        ("rev: no-such-branch", "faults[0].upgrade.to.rev", "is no commit of the repository"),
        ("rev: '-x'", "faults[0].upgrade.to", "is not a revision"),
        ("{repo: /, rev: main}", "faults[0].upgrade.to.repo", "is not inside a git repository"),
        ("{repo: nowhere, rev: main}", "faults[0].upgrade.to.repo", "does not exist"),
        ("repo: .", "faults[0].upgrade.to", "repo goes with rev"),
    ],
)
def test_a_bad_rev_or_repo_is_a_one_line_error_at_its_key(
    repo: Path, tmp_path: Path, to: str, key: str, says: str
) -> None:
    folder = tmp_path / "sc"
    shutil.copytree(repo, folder)
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(scenario(folder, to)))
    err = info.value
    assert err.key == key, str(err)
    assert err.line in (7, 8), str(err)
    assert says in err.message, err.message
    assert "\n" not in str(err)


def test_no_git_is_a_one_line_error(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sc"
    shutil.copytree(repo, folder)
    path = scenario(folder, "rev: v2")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    assert info.value.key == "faults[0].upgrade.to.rev"
    assert "git is not installed" in info.value.message


def test_a_runner_removes_its_checkouts_when_closed(repo: Path, tmp_path: Path) -> None:
    sc = load_scenario(str(scenario(repo, "rev: v2")))
    runner = TrialRunner(sc.agent, str(tmp_path / "trials"))
    try:
        b, why = runner.version_b({"rev": "v2"})  # from the Python API: resolved here
        assert why == ""
        assert b.scenario_dir != str(repo)
        assert Path(b.scenario_dir, "agent.py").read_text().count("--v2") == 1
        # an absolute path under the repository, in the command, moves into the checkout too
        runner.agent = AgentSpec(command=("{python}", f"{repo}/agent.py"), scenario_dir="/else")
        c, _why = runner.version_b({"rev": "v2"})
        assert c.command[1] == f"{b.scenario_dir}/agent.py"
        assert c.scenario_dir == "/else"  # outside the repository: left alone
        _missing, why = runner.version_b({"rev": "no-such-branch"})
        assert "version B (rev no-such-branch) cannot be checked out" in why
    finally:
        runner.close()
    assert not Path(b.scenario_dir).exists()


def test_an_interrupted_campaign_removes_its_checkout(repo: Path, tmp_path: Path) -> None:
    """Ctrl-C (KeyboardInterrupt, as the signal handlers raise it) after the first trial: the
    campaign stops, and the commit's folder is gone with it."""
    sc = load_scenario(str(scenario(repo, "rev: v2")))
    camp = Campaign(
        sc.agent, [f.family for f in sc.families], str(tmp_path / "report"), name="up", seed=5
    )

    def progress(done: int, total: int, failures: int, res: Any) -> None:
        assert list((tmp_path / "report").rglob("rev-*"))  # B's checkout, while it runs
        raise KeyboardInterrupt

    with pytest.raises(CampaignInterrupted):
        camp.run(only=[BEFORE_NOTIFY], progress=progress)
    assert leftovers(tmp_path) == []
