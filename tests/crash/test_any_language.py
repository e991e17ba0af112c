"""Any language: agents that are not Python speak the wire protocol and are judged the same way.

``tests/agents/shell_agent.sh`` is a POSIX-sh agent (3 steps, 1 effect) that reaches the ledger's
HTTP front with curl. Written correctly (state replaced atomically with mv, an effect key derived
from the run id) it passes a kill-at-every-boundary campaign; with a key that changes per attempt
(``--fresh-key``: the shell's pid in the key) the kill in the effect's in-doubt window makes it
send twice, and ``exactly_once`` fails. The minimal clients in docs/reference/wire-protocol.md
(sh + curl over HTTP, Node.js over the Unix socket) are run against a real ledger.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from crashpoint.harness import (
    AgentProcess,
    AgentSpec,
    Campaign,
    CampaignResult,
    Fault,
    Ledger,
    Plan,
    TrialRunner,
    family_from_spec,
)

ROOT = Path(__file__).resolve().parents[2]
SHELL_AGENT = ROOT / "tests" / "agents" / "shell_agent.sh"
WIRE_DOC = ROOT / "docs" / "reference" / "wire-protocol.md"
SH = shutil.which("sh") or "/bin/sh"

needs_curl = pytest.mark.skipif(
    shutil.which("curl") is None,
    reason="curl is not on PATH: the shell agents reach the ledger's HTTP front with curl "
    "(Debian/Ubuntu: apt-get install curl)",
)
needs_node = pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not on PATH: the Node.js example needs it"
)

STEPS = ["greet", "send", "finish"]
OUTPUT = b'{"agent":"sh","greeting":"hello from sh","steps":["greet","send","finish"]}\n'


def shell_agent(*flags: str) -> AgentSpec:
    return AgentSpec(command=(SH, str(SHELL_AGENT), "{state_dir}", *flags), timeout=15)


def every_boundary(agent: AgentSpec, tmp_path: Path) -> CampaignResult:
    return Campaign(
        agent,
        [family_from_spec({"kill": {"at": "every-boundary"}})],
        str(tmp_path / "report"),
        name="shell",
        seed=7,
        restarts=2,
    ).run()


@needs_curl
def test_the_shell_agent_passes_a_kill_at_every_boundary(tmp_path: Path) -> None:
    result = every_boundary(shell_agent(), tmp_path)
    golden = result.golden
    assert golden.steps == STEPS
    assert golden.output == OUTPUT
    assert [e["op"] for e in golden.events] == [
        "step_started",
        "step_completed",
        "step_started",
        "effect",
        "step_completed",
        "step_started",
        "step_completed",
    ]
    assert all(e["via"] == "http" and e["attempt"] == 1 for e in golden.events)
    assert sum(golden.effects.values()) == 1
    # 7 events, each killed before it is acted on, plus the effect's in-doubt window
    assert len(result.trials) == 8
    assert result.ok, "\n".join(
        f"{t.plan.describe()}: {[str(c) for c in t.failed]}" for t in result.failures
    )
    assert all(len(t.attempts) == 2 and t.attempts[0].signal == 9 for t in result.trials)
    in_doubt = [t for t in result.trials if "in_doubt" in t.plan.describe()]
    assert len(in_doubt) == 1
    assert in_doubt[0].duplicates == 1  # its retry reused the key: deduplicated


@needs_curl
def test_a_shell_agent_with_a_fresh_key_per_attempt_fails_exactly_once(tmp_path: Path) -> None:
    result = every_boundary(shell_agent("--fresh-key"), tmp_path)
    assert not result.ok
    (bad,) = result.failures  # only the in-doubt kill makes it send twice
    assert "in_doubt" in bad.plan.describe()
    assert [c.name for c in bad.failed] == ["exactly_once"]
    assert "DUPLICATED send_message" in bad.failed[0].message
    assert bad.duplicates == 0  # two keys: nothing for the ledger to deduplicate
    assert (Path(bad.folder) / "REPLAY").is_file()


@needs_curl
def test_the_shell_agents_events_are_attributed_to_its_attempts(tmp_path: Path) -> None:
    runner = TrialRunner(shell_agent(), str(tmp_path / "t"), keep_passing=True)
    golden = runner.golden()
    plan = Plan((Fault.make("kill", 1, index=3, phase="in_doubt", label="effect"),), "kill", 7, 0)
    result = runner.run(plan, golden)
    assert result.ok, [str(c) for c in result.failed]
    history = [
        json.loads(x) for x in (Path(result.folder) / "history.jsonl").read_text().splitlines()
    ]
    pids = {a: {e["pid"] for e in history if e["attempt"] == a} for a in (1, 2)}
    assert all(len(p) == 1 and None not in p for p in pids.values()), pids
    assert pids[1] != pids[2]  # the $$ of each attempt's shell
    effects = [e for e in history if e["op"] == "effect"]
    assert [(e["attempt"], e["applied"], e["key"]) for e in effects] == [
        (1, True, "run-1:send_message:0"),
        (2, False, "run-1:send_message:0"),
    ]
    assert effects[0]["killed"] == "in_doubt"
    # attempt 2 resumed at "send": the step after the last one it had recorded as done
    assert [e.get("step") for e in history if e["attempt"] == 2 and e["op"] == "step_started"] == [
        "send",
        "finish",
    ]


@needs_curl
def test_the_shell_agent_runs_alone_outside_the_harness(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    ex = (
        AgentProcess([SH, str(SHELL_AGENT), str(tmp_path / "state")], env, timeout=15)
        .start()
        .wait()
    )
    assert (ex.returncode, ex.stdout) == (0, OUTPUT)


# -- the minimal clients of the wire-protocol page -----------------------------------------------


def doc_agents(lang: str) -> list[str]:
    """The ```LANG agent blocks of docs/reference/wire-protocol.md."""
    text = WIRE_DOC.read_text()
    return re.findall(rf"^```{lang} agent\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize(
    "lang",
    [
        pytest.param("sh", marks=needs_curl),
        pytest.param("js", marks=needs_node),
    ],
)
def test_the_wire_protocol_examples_run_against_a_real_ledger(lang: str, tmp_path: Path) -> None:
    (code,) = doc_agents(lang)
    script = tmp_path / f"agent.{lang}"
    script.write_text(code)
    argv = [SH, str(script)] if lang == "sh" else [shutil.which("node") or "node", str(script)]
    with Ledger(http=True) as ledger:
        for attempt in (1, 2):
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                **ledger.env(),
                "CRASHPOINT_ATTEMPT": str(attempt),
                "CRASHPOINT_RUN_ID": "run-1",
            }
            proc = AgentProcess(argv, env, cwd=str(tmp_path), timeout=15).start()
            ledger.begin_attempt(attempt, proc.pid)
            ex = proc.wait()
            assert ex.returncode == 0, ex.stderr.decode()
            assert json.loads(ex.stdout)["applied"] is (attempt == 1)
        events = [(e["attempt"], e["op"], e.get("step") or e.get("key")) for e in ledger.events]
    assert events == [
        (a, op, what)
        for a in (1, 2)
        for op, what in [
            ("step_started", "fetch"),
            ("step_completed", "fetch"),
            ("effect", "run-1:send_email:0"),
        ]
    ]
