"""The recipe the how-to for unmodified agents recommends catches what it promises.

A Node.js agent written the ordinary way (``tests/agents/node_state.js``: a webhook per ticket
with an Idempotency-Key, progress in ``state.json``) rewrites its state in place with
``fs.writeFileSync`` (open with O_TRUNC, then write). A kill -9 keeps what it wrote, so kills
at every boundary pass it; the recipe's file-operation kills (between the truncate and the
write) and power cuts (data not yet on disk) leave ``state.json`` empty, and every restart dies
in ``JSON.parse``: the recipe FAILS it. Its twin (``--atomic``: temp file, fsync, rename,
folder fsync) PASSES the same recipe. The recipe is read from the how-to page itself, and
``crashpoint init`` writes the same one.

The fast test (the in-place agent) runs one ticket and two power cuts; the slow ones run its
atomic twin the same way, and the recipe as written (four tickets, twenty power cuts).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from crashpoint.cli import main
from crashpoint.faults import _strace
from crashpoint.harness import (
    AgentSpec,
    Campaign,
    CampaignResult,
    HarnessResult,
    family_from_spec,
    load_scenario,
)

ROOT = Path(__file__).resolve().parents[2]
HOWTO = ROOT / "docs" / "how-to" / "test-without-changing-code.md"
AGENT = ROOT / "tests" / "agents" / "node_state.js"
NODE = shutil.which("node")
STRACE_OK, STRACE_WHY = _strace.available()

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node (Node.js) is not on PATH: the agent is in JS"),
    pytest.mark.skipif(
        not STRACE_OK,
        reason=f"strace cannot trace here ({STRACE_WHY}): file-operation kills of a Node.js "
        "agent and power cuts are recorded with strace",
    ),
]


def recipe() -> list[dict[str, Any]]:
    """The ``faults:`` of the scenario in the how-to's "2. Write the scenario"."""
    section = HOWTO.read_text().split("## 2. Write the scenario", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block, "the how-to's section 2 has no yaml block"
    faults: list[dict[str, Any]] = yaml.safe_load(block.group(1))["faults"]
    return faults


def run(tmp_path: Path, *flags: str, tickets: int, power_cuts: int | None) -> CampaignResult:
    faults = recipe()
    if power_cuts is not None:  # the fast variant: fewer power cuts than the recipe's
        faults = [
            {"power_loss": {**f["power_loss"], "count": power_cuts}} if "power_loss" in f else f
            for f in faults
        ]
    agent = AgentSpec(
        command=(
            NODE or "node",
            str(AGENT),
            "{state_dir}",
            "{http}/hook",
            "--tickets",
            str(tickets),
            *flags,
        ),
        timeout=30,
    )
    return Campaign(
        agent,
        [family_from_spec(f) for f in faults],
        str(tmp_path / "report"),
        name="node-" + ("atomic" if flags else "in-place"),
        seed=5,
        restarts=3,
    ).run()


def families(result: CampaignResult) -> dict[str, dict[str, Any]]:
    return result.families()


def test_the_howto_recipe_and_crashpoint_init_are_the_same(tmp_path: Path) -> None:
    kinds = [next(iter(f)) for f in recipe()]
    assert kinds == ["kill", "kill", "power_loss"]
    assert [f.get("kill", {}).get("at") for f in recipe()][:2] == ["every-boundary", "fileop"]
    target = tmp_path / "agent.scenario.yaml"
    assert main(["init", str(target), "--command", f"node {AGENT} {{state_dir}} {{http}}"]) == 0
    written = [f.family for f in load_scenario(target).families]
    assert written == [family_from_spec(f) for f in recipe()]


def check_in_place_fails(result: CampaignResult, *, power_must_fail: bool) -> None:
    fams = families(result)
    report = HarnessResult(result).report()
    assert not result.ok, report
    # what the old recipe ran: every boundary kill passes this agent
    assert fams["kill@every-boundary"]["passed"] == fams["kill@every-boundary"]["planned"] > 0
    # the file-operation kills catch the torn rewrite: killed between truncate and write
    assert fams["kill@fileop"]["failed"] > 0, report
    if power_must_fail:
        assert fams["power_loss@posix"]["failed"] > 0, report
    torn = [t for t in result.failures if t.plan.family == "kill@fileop"]
    for t in torn:
        assert t.root_cause is not None
        assert t.root_cause.name == "completes"
        # the error, not the last stack frame or Node's version line
        assert "SyntaxError: Unexpected end of JSON input" in t.root_cause.message
        assert "write {state_dir}/state.json" in t.plan.describe()


def check_atomic_passes(result: CampaignResult) -> None:
    fams = families(result)
    assert result.ok, HarnessResult(result).report()
    for name in ("kill@every-boundary", "kill@fileop", "power_loss@posix"):
        assert fams[name]["exercised"] == fams[name]["planned"] > 0, (name, fams[name])


def test_the_recipe_fails_a_node_agent_that_rewrites_its_state_in_place(tmp_path: Path) -> None:
    check_in_place_fails(run(tmp_path, tickets=1, power_cuts=2), power_must_fail=False)


# slow: the recipe's passing side's fast cover: test_power_loss.py's test_temp_fsync_rename_and_
# folder_fsync_passes_every_state[posix] (an atomic writer passes every power-cut state) and
# test_proof.py's test_a_fileop_sweep_hits_every_operation_of_the_golden_run_once (a correct
# agent passes a file-operation kill sweep); the recipe itself: the in-place test above
@pytest.mark.slow
def test_the_recipe_passes_its_atomic_twin(tmp_path: Path) -> None:
    check_atomic_passes(run(tmp_path, "--atomic", tickets=1, power_cuts=2))


@pytest.mark.slow
@pytest.mark.parametrize("twin", ["in-place", "atomic"])
def test_the_recipe_as_written(tmp_path: Path, twin: str) -> None:
    if twin == "atomic":
        check_atomic_passes(run(tmp_path, "--atomic", tickets=4, power_cuts=None))
    else:
        check_in_place_fails(run(tmp_path, tickets=4, power_cuts=None), power_must_fail=True)
