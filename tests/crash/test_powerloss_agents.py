"""The power-loss test agents: they run, resume after a kill -9, and sync what they say they sync.

``tests/agents/naive_json.py`` (``open("w")`` + ``json.dump``, no fsync), ``durable_json.py``
(temp file + fsync + ``os.replace`` + folder fsync), ``nodirsync_json.py`` (the same without the
folder fsync) and ``shell_agent.sh`` (``printf > tmp; mv``; ``--durable`` adds ``sync tmp`` and
``sync STATE_DIR``) are what users write. A kill -9 keeps the page cache, so every one of them
must pass a kill at every boundary: only a power cut tells them apart. Their syscalls, recorded
with strace, show the barriers each one has and lacks (what the power-loss model reads).

The power-loss verdicts themselves (naive fails, durable passes, ...) are in test_power_loss.py.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from _forked import run_forked
from crashpoint.faults import _strace
from crashpoint.harness import AgentProcess, AgentSpec, Campaign, CampaignResult, family_from_spec

AGENTS = Path(__file__).resolve().parents[1] / "agents"
SH = shutil.which("sh") or "/bin/sh"
PY_AGENTS = ("naive_json", "durable_json", "nodirsync_json")
STEPS = ["fetch", "summarise", "draft", "review", "send"]
PY_OUTPUT = {"done": STEPS}
SH_OUTPUT = {"agent": "sh", "greeting": "hello from sh", "steps": ["greet", "send", "finish"]}

needs_curl = pytest.mark.skipif(
    shutil.which("curl") is None,
    reason="curl is not on PATH: the shell agent reaches the ledger's HTTP front with curl "
    "(Debian/Ubuntu: apt-get install curl)",
)
STRACE_OK, STRACE_WHY = _strace.available()
needs_strace = pytest.mark.skipif(not STRACE_OK, reason=f"strace cannot trace here: {STRACE_WHY}")


def py_agent(name: str) -> AgentSpec:
    return AgentSpec(command=("{python}", str(AGENTS / f"{name}.py"), "{state_dir}"), timeout=15)


def sh_agent(*flags: str) -> AgentSpec:
    return AgentSpec(
        command=(SH, str(AGENTS / "shell_agent.sh"), "{state_dir}", *flags), timeout=15
    )


def argv(name: str, state: Path) -> list[str]:
    if name.startswith("shell"):
        return [
            SH,
            str(AGENTS / "shell_agent.sh"),
            str(state),
            *(["--durable"] if name == "shell_durable" else []),
        ]
    return [sys.executable, str(AGENTS / f"{name}.py"), str(state)]


def run_alone(cmd: Sequence[str]) -> tuple[int, bytes, bytes]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(AGENTS.parents[1] / "src")}
    ex = AgentProcess(list(cmd), env, timeout=30).start().wait()
    return ex.returncode, ex.stdout, ex.stderr


def campaign(
    agent: AgentSpec, fault: dict[str, Any], tmp_path: Path, seed: int = 7
) -> CampaignResult:
    return Campaign(
        agent,
        [family_from_spec(fault)],
        str(tmp_path / "report"),
        name="powerloss-agents",
        seed=seed,
        restarts=2,
    ).run()


def why(result: CampaignResult) -> str:
    return "\n".join(f"{t.plan.describe()}: {[str(c) for c in t.failed]}" for t in result.failures)


# -- on their own ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["naive_json", "durable_json", "nodirsync_json", "shell", "shell_durable"]
)
def test_each_agent_runs_alone_and_a_second_run_resumes_with_the_same_output(
    name: str, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    outputs = []
    for _ in range(2):  # the second run finds every step done: resumes, does nothing again
        rc, out, err = run_alone(argv(name, state))
        assert rc == 0, err.decode()
        outputs.append(json.loads(out))
    assert outputs[0] == outputs[1] == (SH_OUTPUT if name.startswith("shell") else PY_OUTPUT)
    if not name.startswith("shell"):
        assert json.loads((state / "state.json").read_text())["done"] == STEPS
        assert sorted(p.name for p in state.iterdir()) == ["state.json"]  # no temp file left


def test_the_naive_agent_crashes_on_a_torn_state_file(tmp_path: Path) -> None:
    """What a power cut leaves it: it does not repair or refuse, it raises (as such code does)."""
    state = tmp_path / "state"
    state.mkdir()
    assert run_alone(argv("naive_json", state))[0] == 0
    whole = (state / "state.json").read_bytes()
    (state / "state.json").write_bytes(whole[: len(whole) // 2])  # torn half-way
    rc, out, err = run_alone(argv("naive_json", state))
    assert rc == 1
    assert out == b""
    assert b"json.decoder.JSONDecodeError" in err
    (state / "state.json").write_bytes(b"")  # or never written back at all
    assert b"JSONDecodeError" in run_alone(argv("naive_json", state))[2]


# -- a kill -9 at every boundary: all of them pass (the page cache survives a kill) --------------


def test_the_naive_agent_passes_a_kill_at_every_boundary(tmp_path: Path) -> None:
    # forked from a warm interpreter (41 runs of a plain agent): about its resume, not spawning
    result = run_forked(
        py_agent("naive_json"),
        [family_from_spec({"kill": {"at": "every-boundary"}})],
        str(tmp_path / "report"),
        name="powerloss-agents",
        seed=7,
        restarts=2,
    )
    golden = result.golden
    assert golden.steps == STEPS
    assert json.loads(golden.output) == PY_OUTPUT
    assert [e["op"] for e in golden.events] == ["step_started", "effect", "step_completed"] * 5
    assert sum(golden.effects.values()) == 5
    # 15 events, each killed before it is acted on, + each effect's in-doubt window
    assert len(result.trials) == 20
    assert result.ok, why(result)
    assert all(t.attempts[0].signal == 9 and len(t.attempts) == 2 for t in result.trials)
    in_doubt = [t for t in result.trials if "in_doubt" in t.plan.describe()]
    assert len(in_doubt) == 5
    assert all(t.duplicates == 1 for t in in_doubt)  # each retry reused its key: deduplicated


@pytest.mark.parametrize("name", ["durable_json", "nodirsync_json"])
def test_the_syncing_agents_pass_kills_at_random_boundaries(name: str, tmp_path: Path) -> None:
    """Their resume code is naive_json's, line for line (only the save differs): a few kills."""
    result = campaign(py_agent(name), {"kill": {"at": "random", "count": 4}}, tmp_path)
    assert json.loads(result.golden.output) == PY_OUTPUT
    assert len(result.trials) == 4
    assert result.ok, why(result)
    assert all(t.status == "passed" and t.attempts[0].signal == 9 for t in result.trials)


@needs_curl
def test_the_durable_shell_agent_passes_a_kill_at_every_boundary(tmp_path: Path) -> None:
    result = campaign(sh_agent("--durable"), {"kill": {"at": "every-boundary"}}, tmp_path)
    assert json.loads(result.golden.output) == SH_OUTPUT
    assert len(result.trials) == 8
    assert result.ok, why(result)


# -- the barriers each one has, as strace sees them ---------------------------------------------


def barriers(name: str, tmp_path: Path) -> list[str]:
    """The golden run's syncs and renames under the state folder, in order, as short words:
    ``fsync FILE``, ``fsync .`` (the folder), ``rename A -> B``."""
    state = tmp_path / "state"
    state.mkdir(parents=True)
    out = tmp_path / "trace"
    cmd = _strace.wrap(
        argv(name, state),
        str(out),
        syscalls=("fsync", "fdatasync", "sync", "syncfs", "rename", "renameat", "renameat2"),
    )
    rc, _o, err = run_alone(cmd)
    assert rc == 0, err.decode()
    words = []
    for c in _strace.parse(str(out)):
        if c.result is None or c.errno or not c.path.startswith(str(state)):
            continue  # a failed renameat2(RENAME_NOREPLACE) that mv then retries
        rel = Path(c.path).relative_to(state).as_posix()
        if c.name.startswith("rename"):
            words.append(f"rename {rel} -> {Path(c.path2).relative_to(state).as_posix()}")
        else:
            words.append(f"{c.name} {rel}")
    return words


@needs_strace
def test_the_agents_sync_exactly_what_they_claim(tmp_path: Path) -> None:
    durable = ["fsync state.json.tmp", "rename state.json.tmp -> state.json", "fsync ."]
    assert barriers("naive_json", tmp_path / "a") == []  # nothing is ever synced
    assert barriers("durable_json", tmp_path / "b") == durable * 5
    assert barriers("nodirsync_json", tmp_path / "c") == durable[:2] * 5  # no folder fsync
    assert (
        barriers("shell", tmp_path / "d")
        == ["rename greeting.tmp -> greeting"] + ["rename progress.tmp -> progress"] * 3
    )
    assert (
        barriers("shell_durable", tmp_path / "e")
        == ["fsync greeting.tmp", "rename greeting.tmp -> greeting", "fsync ."]
        + ["fsync progress.tmp", "rename progress.tmp -> progress", "fsync ."] * 3
    )
