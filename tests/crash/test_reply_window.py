"""The window no agent can close, on real processes (issue 23): an agent that saves the
model's reply at its first chance (atomically: temp file, fsync, rename, folder fsync) passes
``no_repeated_llm_calls: fail`` under kills at every file operation and every boundary, though
some kills land after the reply arrived and before it could be durable; its twin that saves
the reply only after its next call fails, on that check."""

from __future__ import annotations

import sys
from pathlib import Path

from crashpoint.harness import AgentSpec, CrashHarness, HarnessResult

AGENT = Path(__file__).resolve().parents[1] / "agents" / "reply_window.py"


def _run(tmp_path: Path, save: str, faults: list[dict[str, object]]) -> HarnessResult:
    harness = CrashHarness(str(tmp_path / save), seed=23)
    return harness.run(
        AgentSpec(
            (
                sys.executable,
                str(AGENT),
                "--state",
                "{state_dir}",
                "--hook",
                "{http}/hook",
                "--save",
                save,
            ),
            timeout=30,
        ),
        faults=faults,
        no_repeated_llm_calls="fail",
        restarts=3,
    )


FILEOPS = [{"kill": {"at": "fileop", "count": 6}}]


def test_saving_the_reply_at_its_first_chance_passes_file_operation_kills(
    tmp_path: Path,
) -> None:
    r = _run(tmp_path, "first", FILEOPS)
    assert r.ok, r.report()
    s = r.summary()
    assert s["exercised"] == s["ran"] > 0, r.report()
    # at least one kill landed in the window and was excused, saying so
    notes = [
        c.message
        for t in r.campaign.trials
        for c in t.checks
        if c.name == "no_repeated_llm_calls"
        and "the window before the first durable write" in c.message
    ]
    assert notes, r.report()


def test_saving_the_reply_late_fails_on_the_re_billed_call(tmp_path: Path) -> None:
    r = _run(tmp_path, "late", [{"kill": {"at": "every-boundary"}}])
    assert not r.ok
    assert "no_repeated_llm_calls" in r.failed_checks(), r.report()
    msgs = [
        c.message
        for t in r.campaign.failures
        for c in t.failed
        if c.name == "no_repeated_llm_calls"
    ]
    assert any("after a restart" in m for m in msgs), msgs
