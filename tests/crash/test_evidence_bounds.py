"""The harness's evidence is bounded, secret-free and safe, and what an agent writes outside its
folders is seen: real agents (tests/crash/leaky_agent.py), real campaigns, real reports.

- an agent leaving a big state leaves evidence within the per-trial and per-campaign limits,
  and each trial says what was left out;
- an agent writing 10 MiB to $TMPDIR writes into a private folder that is measured, reported
  and removed; one writing to /tmp directly is reported (and its file left alone);
- after a failing ``crashpoint run`` no byte of any report file holds an agent.env value or the
  canary, files are 0600 and folders 0700, and ``crashpoint replay`` still reproduces the trial
  (the redacted values come back from the scenario file);
- a harness with 256 file descriptors, whose agent holds 600 ledger connections, completes its
  campaign and writes gate.json.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashpoint.cli import main
from crashpoint.errors import ReplayError
from crashpoint.harness import AgentSpec, Campaign, Expect, family_from_spec, replay
from crashpoint.harness._report import tree_size
from crashpoint.pytest_plugin._summary import summary_table

AGENT = str(Path(__file__).with_name("leaky_agent.py"))
MIB = 1 << 20
TOKEN = "sk-test-SECRET-0123456789"  # noqa: S105 (a fake secret, to be redacted)
URL = "https://internal.example/s3cr3t-path"
CANARY_PREFIX = b"sk-crashpoint-canary-"


def agent(timeout: float = 30.0, **env: str) -> AgentSpec:
    return AgentSpec(
        (sys.executable, AGENT, "{state_dir}"), timeout=timeout, env=tuple(sorted(env.items()))
    )


def campaign(tmp_path: Path, spec: AgentSpec, count: int = 2, **kw: Any) -> Campaign:
    return Campaign(
        spec,
        [family_from_spec({"kill": {"at": "random", "count": count}})],
        str(tmp_path / "report"),
        name="leaky",
        seed=3,
        restarts=1,
        **kw,
    )


def files_under(root: Path) -> Iterator[Path]:
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            yield Path(dirpath) / n


# -- evidence size ---------------------------------------------------------------------------


def test_evidence_stays_within_its_limits_for_an_agent_leaving_a_big_state(tmp_path: Path) -> None:
    # every trial fails; a state 3x the trial's limit, the campaign's 1.5x it (small: cheap)
    spec = agent(LEAK_STATE_MIB="6", LEAK_EXIT_AFTER_FIRST="3")
    camp = campaign(
        tmp_path, spec, count=3, evidence_per_trial=2 * MIB, evidence_per_campaign=3 * MIB
    )
    result = camp.run()
    assert [t.ok for t in result.trials] == [False] * 3
    slack = 64 * 1024  # the JSON files, REPLAY and the history, never cut
    for t in result.trials:
        size = tree_size(t.folder)
        assert size == t.evidence_bytes
        assert size <= 2 * MIB + slack, f"trial {t.plan.index}: {size >> 20} MiB of evidence"
        assert t.evidence_omitted, "a 6 MiB state fitted in 2 MiB?"
        saved = json.loads((Path(t.folder) / "result.json").read_text())
        assert saved["evidence_omitted"] == t.evidence_omitted
        assert any("left out" in m and "evidence limit" in m for m in t.evidence_omitted)
    total = sum(tree_size(t.folder) for t in result.trials)
    assert total <= 3 * MIB + 3 * slack, f"{total >> 20} MiB of evidence for 3 trials"
    assert "campaign's evidence limit" in " ".join(result.trials[-1].evidence_omitted)
    assert tree_size(str(tmp_path / "report" / "trials" / "golden")) <= 2 * MIB + slack
    assert result.summary()["evidence"]["trials_cut"] == 3


def test_without_a_tight_limit_the_copies_are_whole(tmp_path: Path) -> None:
    """The good path: a small state is kept whole, crash copies included, nothing left out."""
    result = campaign(tmp_path, agent(LEAK_STATE_MIB="1", LEAK_EXIT_AFTER_FIRST="3"), count=1).run()
    (t,) = result.trials
    assert not t.ok
    assert t.evidence_omitted == []
    folder = Path(t.folder)
    assert (folder / "crash-2" / "big-2" / "0.bin").stat().st_size == MIB
    assert (folder / "state" / "big-2" / "0.bin").stat().st_size == MIB


# -- writes outside the folders --------------------------------------------------------------


@pytest.fixture
def system_tmp_tag() -> Iterator[str]:
    tag = secrets.token_hex(3)[:5]  # short: not a secret to redact
    yield tag
    Path(f"/tmp/leaky-agent-{tag}").unlink(missing_ok=True)


def test_writes_to_tmpdir_and_to_tmp_are_measured_and_reported(
    tmp_path: Path, system_tmp_tag: str
) -> None:
    spec = agent(LEAK_TMP_MIB="10", LEAK_SYSTEM_TMP=system_tmp_tag)
    system_tmp_name = f"leaky-agent-{system_tmp_tag}"
    result = campaign(
        tmp_path, spec, count=2, expect=Expect(resumes_from_last_completed=False)
    ).run()  # it starts over
    assert result.ok, result.summary()["failures"]
    for t in result.trials:
        sizes = [a.tmp_bytes for a in t.attempts]
        assert sizes[-1] >= 10 * MIB, sizes  # the attempt that completed wrote its 10 MiB
        assert set(sizes) <= {0, sizes[-1]}
        assert t.tmp_bytes == sum(sizes)
        assert any(o.startswith(f"/tmp/{system_tmp_name} (1.0 MiB") for o in t.outside_writes)
    assert Path("/tmp", system_tmp_name).exists(), "a file in /tmp was removed"
    scratch = [p for p in files_under(tmp_path / "report") if p.name.endswith(".scratch")]
    assert scratch == [], "a private TMPDIR was left behind"
    summary = {**result.summary(), "scenario": "leaky", "family": "kill"}
    assert summary["outside_writes"]["tmp_bytes"] >= 20 * MIB
    assert summary["outside_writes"]["trials_writing_system_tmp"] == 2
    line = next(x for x in summary_table([summary]) if x.startswith("outside its folders"))
    assert f"/tmp/{system_tmp_name}" in line
    assert "private TMPDIRs (removed)" in line


# -- secrets, modes and replay, through `crashpoint run` -------------------------------------

SCENARIO = """\
name: leaky agent
agent:
  command: ["{{python}}", "{agent}", "{{state_dir}}"]
  env: {{API_TOKEN: "{token}", SERVICE_URL: "{url}", LEAK_SECRETS: "1", LEAK_STATE_MIB: "1"}}
  timeout: 30s
faults:
  - kill: {{at: random, count: 2}}
restarts: 1
seed: 5
"""


def test_no_secret_reaches_any_report_file_and_replay_still_works(
    tmp_path: Path,
    children: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scenario = tmp_path / "leaky.scenario.yaml"
    scenario.write_text(SCENARIO.format(agent=AGENT, token=TOKEN, url=URL))
    report = tmp_path / "report"
    run = children.spawn(
        [
            sys.executable,
            "-m",
            "crashpoint",
            "run",
            str(scenario),
            "--report",
            str(report),
            "--quiet",
        ],
        cwd=tmp_path,
    )
    assert run.wait(300) == 1, run.stderr_text()  # the canary leaks into the state: failures
    trials = sorted(report.glob("scenarios/*/trials/trial-*"))
    assert trials, "no failing trial folder"
    stdout = (trials[0] / "attempt-2.stdout").read_text()
    assert stdout == (
        "my secrets: <redacted:API_TOKEN> <redacted:SERVICE_URL> <redacted:OPENAI_API_KEY>\ndone\n"
    )  # it was there, and is redacted
    runner = json.loads((trials[0] / "runner.json").read_text())
    assert runner["agent"]["env"]["API_TOKEN"] == "<redacted:API_TOKEN>"  # noqa: S105
    assert runner["scenario"] == str(scenario)
    _assert_clean(report)

    # `crashpoint replay` in this process, the values not in its environment: they come back
    # from the scenario file (its own process would cost an interpreter importing the harness;
    # the gate above ran in one)
    monkeypatch.delenv("API_TOKEN", raising=False)
    monkeypatch.delenv("SERVICE_URL", raising=False)
    capsys.readouterr()
    code = main(["replay", str(trials[0])])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    lines = out.splitlines()
    assert any(x.startswith("reproduced: ") for x in lines), lines
    (again,) = list((trials[0] / "replays").iterdir())
    replayed = next(again.glob("trial-*"))
    assert (
        (replayed / "attempt-2.stdout")
        .read_text()
        .startswith("my secrets: <redacted:API_TOKEN> <redacted:SERVICE_URL>")
    )  # the values were given
    _assert_clean(report)


def _assert_clean(report: Path) -> None:
    needles = (TOKEN.encode(), URL.encode(), CANARY_PREFIX)
    pytest_junit = report / "junit.xml"  # pytest's own --junitxml: written by pytest
    checked = 0
    for p in files_under(report):
        for n in needles:
            assert n.decode() not in p.name, p
        st = os.lstat(p)
        if stat.S_ISDIR(st.st_mode):
            assert stat.S_IMODE(st.st_mode) == 0o700, p
            continue
        if stat.S_ISREG(st.st_mode):
            data = p.read_bytes()
            for n in needles:
                assert n not in data, f"{n!r} in {p}"
            if p != pytest_junit:
                assert stat.S_IMODE(st.st_mode) == 0o600, p
            checked += 1
    assert checked > 20


def test_replay_without_a_scenario_file_asks_for_the_redacted_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = agent(API_TOKEN=TOKEN, SERVICE_URL=URL, LEAK_SECRETS="1")
    result = campaign(tmp_path, spec, count=1).run()
    (t,) = result.trials
    assert not t.ok
    monkeypatch.delenv("API_TOKEN", raising=False)
    monkeypatch.delenv("SERVICE_URL", raising=False)
    with pytest.raises(
        ReplayError,
        match=r"API_TOKEN, SERVICE_URL are redacted .* Set them in "
        r"the environment .*API_TOKEN=\.\.\. crashpoint replay",
    ):
        replay(t.folder)
    monkeypatch.setenv("API_TOKEN", TOKEN)
    monkeypatch.setenv("SERVICE_URL", URL)
    again = replay(t.folder)
    assert [c.name for c in again.failed] == [c.name for c in t.failed]
    last = Path(again.folder) / f"attempt-{again.attempts[-1].number}.stdout"
    assert last.read_text().startswith("my secrets: <redacted:API_TOKEN> <redacted:SERVICE_URL>")


# -- out of file descriptors -----------------------------------------------------------------

CONNECTIONS = """\
name: many connections
agent:
  command: ["{{python}}", "{agent}", "{{state_dir}}"]
  env: {{LEAK_CONNECTIONS: "600"}}
  timeout: 60s
faults:
  - kill: {{at: random, count: 2}}
restarts: 1
seed: 1
expect: {{resumes_from_last_completed: false}}
"""


# slow: one robustness sweep (600 connections); the bounds' fast cover is the rest of this file
@pytest.mark.slow
def test_a_harness_with_few_descriptors_survives_an_agent_holding_600_connections(
    tmp_path: Path, children: Any
) -> None:
    scenario = tmp_path / "conns.scenario.yaml"
    scenario.write_text(CONNECTIONS.format(agent=AGENT))
    report = tmp_path / "report"
    low = (
        "import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)); "
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
    )
    run = children.spawn(
        [
            sys.executable,
            "-c",
            low,
            "-m",
            "crashpoint",
            "run",
            str(scenario),
            "--report",
            str(report),
            "--quiet",
        ],
        cwd=tmp_path,
    )
    code = run.wait(300)
    assert code == 0, run.stderr_text()
    gate = json.loads((report / "gate.json").read_text())
    assert gate["ok"] is True
    (camp,) = gate["campaigns"]
    assert camp["ledger_refused"]["connections"] >= 2 * (600 - 48)
