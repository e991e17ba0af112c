"""The ``network`` fault family end to end: real agents (no crashpoint import) POST a webhook to
the HTTP stand-in, which fails the planned request.

- ``tests/agents/net_retry.py`` (urllib) retries a failed POST. Under a timeout (the service
  applied the request, the reply never came) its keyless retry is applied again: exactly_once
  fails with the duplicate; with ``--keyed`` the retry carries the same Idempotency-Key and is
  deduplicated: the trial passes. A reset is answered before anything was applied: the keyless
  retry is no duplicate there.
- A fault on a call the agent never makes did not fire: the trial is not exercised, never a
  pass, and the campaign says why.
- An agent that retries without a cap against a failing service: ``no_retry_storm`` fails.
- ``tests/agents/curl_agent.sh`` (a shell agent with curl against ``{http}``) is judged the same
  way: a kill campaign finds the keyless duplicate; the keyed one passes.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from _forked import forking, warm
from crashpoint.harness import AgentSpec, Campaign, CampaignResult, Zygote, family_from_spec

ROOT = Path(__file__).resolve().parents[2]
NET_RETRY = ROOT / "tests" / "agents" / "net_retry.py"
CURL_AGENT = ROOT / "tests" / "agents" / "curl_agent.sh"
SH = shutil.which("sh") or "/bin/sh"

needs_curl = pytest.mark.skipif(
    shutil.which("curl") is None, reason="curl is not on PATH (apt-get install curl)"
)


def net_retry(*flags: str) -> AgentSpec:
    return AgentSpec(command=(sys.executable, str(NET_RETRY), "{state_dir}", *flags), timeout=30)


def campaign(
    agent: AgentSpec, fault: dict[str, object], tmp_path: Path, **kw: object
) -> CampaignResult:
    if kw.get("launcher") is not None:
        agent = warm(agent)
    return Campaign(
        agent,
        [family_from_spec(fault)],
        str(tmp_path / "report"),
        name="net",
        seed=3,
        restarts=2,
        **kw,
    ).run()  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """net_retry.py's golden runs and attempts fork from one zygote (these tests are about the
    network faults' verdicts, not about spawning; the curl agent is spawned)."""
    with forking(warm(net_retry())) as z:
        yield z


TIMEOUT = {"network": {"call": "POST /hook", "fail": "timeout"}}


def test_a_keyless_retry_after_a_timeout_is_a_duplicate(zygote: Zygote, tmp_path: Path) -> None:
    result = campaign(net_retry(), TIMEOUT, tmp_path, launcher=zygote)
    (t,) = result.trials
    assert t.exercised, t.landed()
    assert "timeout for POST /hook #1 in attempt 1 (applied, reply withheld)" in t.landed()
    assert t.status == "failed"
    assert t.root_cause is not None
    assert t.root_cause.name == "exactly_once"
    eo = next(c for c in t.checks if c.name == "exactly_once")
    assert "DUPLICATED POST /hook" in eo.message
    assert "no key" in eo.message
    assert t.attempts[0].returncode == 0  # the agent retried and finished: no crash needed
    assert not result.ok


def test_a_keyed_retry_after_a_timeout_passes(zygote: Zygote, tmp_path: Path) -> None:
    result = campaign(net_retry("--keyed"), TIMEOUT, tmp_path, launcher=zygote)
    (t,) = result.trials
    assert t.status == "passed", [str(c) for c in t.failed] + [t.landed()]
    assert t.duplicates == 1  # the retry reached the service and was deduplicated by its key
    assert result.ok


def test_a_keyless_retry_after_a_reset_is_no_duplicate(zygote: Zygote, tmp_path: Path) -> None:
    """A reset is answered before the service acts: nothing to duplicate."""
    result = campaign(
        net_retry(),
        {"network": {"call": "POST /hook", "fail": ["reset", 503], "times": 2}},
        tmp_path,
        launcher=zygote,
    )
    assert [t.status for t in result.trials] == ["passed", "passed"], [
        (t.landed(), [str(c) for c in t.failed]) for t in result.trials
    ]
    assert all("2 of 2 requests failed" in t.landed() for t in result.trials)


def test_a_fault_on_a_call_the_agent_never_makes_is_not_exercised(
    zygote: Zygote, tmp_path: Path
) -> None:
    result = campaign(
        net_retry("--keyed"), {"network": {"call": "POST /elsewhere"}}, tmp_path, launcher=zygote
    )
    (t,) = result.trials
    assert t.status == "not exercised"
    assert "never made a POST /elsewhere request" in t.landed()
    assert "POST /hook" in t.landed()  # what it did call
    assert not result.ok
    (msg,) = result.unexercised()
    assert "family network@POST /elsewhere:timeout" in msg


def test_a_retry_storm_is_reported(zygote: Zygote, tmp_path: Path) -> None:
    storm = net_retry("--keyed", "--retries", "30", "--no-backoff")
    result = campaign(
        storm,
        {"network": {"call": "POST /hook", "fail": 503, "times": 25}},
        tmp_path,
        launcher=zygote,
    )
    (t,) = result.trials
    assert t.exercised
    check = next(c for c in t.checks if c.name == "no_retry_storm")
    assert not check.ok
    assert "attempt 1 sent POST /hook 26 times (golden run: 1)" in check.message
    assert "cap the retries" in check.hint
    # the same agent within its cap: no storm
    capped = campaign(
        net_retry("--keyed"),
        {"network": {"call": "POST /hook", "fail": 503, "times": 3}},
        tmp_path / "capped",
        launcher=zygote,
    )
    assert capped.ok, [str(c) for t in capped.trials for c in t.failed]


def test_any_sweeps_the_golden_runs_calls(zygote: Zygote, tmp_path: Path) -> None:
    result = campaign(
        net_retry("--keyed"), {"network": {"fail": ["timeout", 500]}}, tmp_path, launcher=zygote
    )
    assert [t.plan.describe() for t in result.trials] == [
        "timeout for POST /hook #1 in attempt 1",
        "HTTP 500 for POST /hook #1 in attempt 1",
    ]
    assert result.ok, [str(c) for t in result.trials for c in t.failed]


def curl_agent(*flags: str) -> AgentSpec:
    return AgentSpec(command=(SH, str(CURL_AGENT), "{state_dir}", *flags, "{http}"), timeout=30)


KILLS = {"kill": {"at": "every-boundary"}}


@needs_curl
def test_the_keyless_curl_agent_duplicates_its_webhook_after_a_kill(tmp_path: Path) -> None:
    result = campaign(curl_agent(), KILLS, tmp_path)
    assert not result.ok
    dup = [t for t in result.trials if t.root_cause and t.root_cause.name == "exactly_once"]
    assert dup, [(t.plan.describe(), t.status) for t in result.trials]
    assert "in_doubt" in dup[0].plan.describe()
    assert "DUPLICATED POST /hook" in str(dup[0].root_cause)


@needs_curl
def test_the_keyed_curl_agent_passes_kills_and_a_timeout(tmp_path: Path) -> None:
    result = campaign(curl_agent("--keyed"), KILLS, tmp_path)
    assert result.ok, [(t.plan.describe(), [str(c) for c in t.failed]) for t in result.trials]
    timed = campaign(curl_agent("--keyed"), TIMEOUT, tmp_path / "timeout")
    assert timed.ok, [(t.landed(), [str(c) for c in t.failed]) for t in timed.trials]
    keyless = campaign(curl_agent(), TIMEOUT, tmp_path / "keyless")
    (t,) = keyless.trials
    assert t.root_cause is not None
    assert t.root_cause.name == "exactly_once"


SCENARIO = ROOT / "tests" / "scenarios" / "network.scenario.yaml"


def _gate(path: Path, report: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crashpoint", "run", str(path), "--report", str(report), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        start_new_session=True,
    )


# slow: fast cover: test_the_keyed_curl_agent_passes_kills_and_a_timeout, the keyless tests above
@pytest.mark.slow
def test_the_network_scenario_passes_the_gate_and_fails_without_the_key(tmp_path: Path) -> None:
    ok = _gate(SCENARIO, tmp_path / "ok")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    assert "network@any:reset|timeout|503|429" in ok.stdout
    text = SCENARIO.read_text()
    keyless = tmp_path / "agents" / "keyless.scenario.yaml"
    keyless.parent.mkdir()
    shutil.copy(NET_RETRY, tmp_path / "agents" / "net_retry.py")
    keyless.write_text(
        text.replace('"--keyed",', "").replace("{scenario_dir}/../agents/", "{scenario_dir}/")
    )
    bad = _gate(keyless, tmp_path / "bad")
    assert bad.returncode == 1, bad.stdout[-3000:] + bad.stderr[-2000:]
    assert "FAIL" in bad.stdout
    assert "exactly_once" in (tmp_path / "bad" / "gate.json").read_text()
