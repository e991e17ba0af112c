"""The MCP tool-server stand-in end to end: a real agent (``tests/agents/mcp_tickets.py``, the
``mcp`` client SDK, no crashpoint import) opens a ticket through a ``tools/call``, over
streamable HTTP (``{mcp}``) or stdio (``{mcp_stdio}``), and is killed at every boundary. The
agent that sends the tool's idempotency key passes; the one that calls the tool again without
it after a crash in the in-doubt window (the ticket opened, the reply not yet read) is caught by
``exactly_once``. A ``network`` timeout on the call (applied, the reply withheld) catches the
keyless agent without a kill."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from _forked import forking, warm
from _lazy import needs
from crashpoint.harness import AgentSpec, Campaign, CampaignResult, Zygote, family_from_spec

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "tests" / "agents" / "mcp_tickets.py"
TOOLS = {
    "create_ticket": {
        "description": "Open a ticket",
        "input_schema": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "request_id": {"type": "string"}},
            "required": ["title"],
        },
        "effect": "ticket",
        "key": "request_id",
        "reply": "opened: {title}",
    }
}

pytestmark = needs("mcp", reason="the agent uses the mcp client SDK (pip install mcp)")


def spec(*flags: str) -> AgentSpec:
    return AgentSpec(
        command=(sys.executable, str(AGENT), "{state_dir}", *flags),
        timeout=60,
        services={"mcp": {"tools": TOOLS}},
    )


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    """One warm interpreter that imported mcp (seconds of CPU) for the module's campaigns: the
    same script, their flags differ."""
    with forking(warm(spec())) as z:
        yield z


def campaign(
    tmp_path: Path, zygote: Zygote, fault: dict[str, object], *flags: str
) -> CampaignResult:
    # forked from a zygote that imported mcp once: these tests are about the tool call's key
    forks = zygote.forks
    result = Campaign(
        warm(spec(*flags)),
        [family_from_spec(fault)],
        str(tmp_path / "report"),
        name="mcp",
        seed=3,
        restarts=2,
        launcher=zygote,
    ).run()
    assert zygote.forks > forks, "fork mode was not used"
    return result


KILL = {"kill": {"at": "every-boundary"}}


def test_a_keyed_tool_call_survives_a_kill_at_every_boundary_over_http(
    tmp_path: Path, zygote: Zygote
) -> None:
    result = campaign(tmp_path, zygote, KILL, "--http", "{mcp}")
    assert result.trials
    for t in result.trials:
        assert t.exercised, t.landed()
        assert t.status == "passed", [str(c) for c in t.failed] + [t.landed()]
    assert result.ok
    golden = [e for e in result.golden.events if e.get("mcp_tool")]
    assert [(e["kind"], e["key"], e["payload"]) for e in golden] == [
        ("ticket", "job-42:create_ticket", {"title": "disk full on db-1"})
    ]
    assert b"opened: disk full on db-1" in result.golden.output


def test_a_keyless_tool_call_repeated_after_a_crash_is_caught_over_http(
    tmp_path: Path, zygote: Zygote
) -> None:
    result = campaign(tmp_path, zygote, KILL, "--http", "{mcp}", "--keyless")
    assert not result.ok
    caught = [t for t in result.trials if t.status == "failed"]
    assert caught, [t.landed() for t in result.trials]
    for t in caught:
        assert t.root_cause is not None
        assert t.root_cause.name == "exactly_once", [str(c) for c in t.failed]
        assert "ticket" in t.root_cause.message


# slow: fast cover: the HTTP tests above (the same stand-in behind the relay) and the relay with
# the real client in tests/unit/test_mcp_standin.py
@pytest.mark.slow
@pytest.mark.parametrize("keyless", [False, True])
def test_the_stdio_transport_is_judged_the_same(
    tmp_path: Path, zygote: Zygote, keyless: bool
) -> None:
    # the reply withheld (the ticket opened): the agent gives up after 2 s, exits 1, and the
    # harness starts it again
    flags = ("--stdio", "{mcp_stdio}", "--timeout", "2", *(("--keyless",) if keyless else ()))
    fault = {"network": {"call": "mcp create_ticket", "fail": "timeout"}}
    result = campaign(tmp_path, zygote, fault, *flags)
    (t,) = result.trials
    assert t.exercised, t.landed()
    if keyless:
        assert t.status == "failed"
        assert t.root_cause is not None
        assert t.root_cause.name == "exactly_once", [str(c) for c in t.failed]
    else:
        assert t.status == "passed", [str(c) for c in t.failed] + [t.landed()]


def _gate(path: Path, report: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crashpoint", "run", str(path), "--report", str(report), "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        start_new_session=True,
    )


# slow: fast cover: the tests above (the gate runs the shipped scenarios themselves)
@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "check"),
    [("mcp-tools", "exactly_once"), ("anthropic-stream", "same_output")],
)
def test_the_shipped_scenarios_pass_and_fail_without_the_fix(
    tmp_path: Path, scenario: str, check: str
) -> None:
    path = ROOT / "scenarios" / f"{scenario}.scenario.yaml"
    ok = _gate(path, tmp_path / "ok")
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    bad = tmp_path / "scenarios" / "broken.scenario.yaml"
    bad.parent.mkdir()
    text = path.read_text().replace(', "--fixed"]', "]")
    bad.write_text(text.replace("{scenario_dir}/..", str(ROOT)))
    res = _gate(bad, tmp_path / "bad")
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-2000:]
    assert check in (tmp_path / "bad" / "gate.json").read_text()
