"""Human approval across process exits and kills.

pause -> the process exits 75 -> a restart without a decision stays paused (75, no new effect)
-> approve (``decide()`` or ``crashpoint checkpoints approve``) -> the next start completes with
the golden output. Deny -> the run ends as denied (77) and publish never reaches the target.
A decision is all or nothing: killed anywhere inside ``decide`` (failpoints in its journal and
meta writes) or right after it, the run either has the whole decision or none.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fake_target import FakeTarget
from resume_check import DEMO, DENIED, PAUSED, Attempt, Finished, run_attempt, run_to_end

import _pgdb
from crashpoint.checkpoint import decide, plan, run_reducer

# PostgresStore's variants: one database for the module, emptied before each test (not one
# created and dropped per test); store_factory asks for this pg_dsn
pg_module_database, pg_dsn = _pgdb.pg_module_database, _pgdb.pg_dsn

if TYPE_CHECKING:
    from conftest import Children, StoreFactory

RUN = "demo"


class Agent:
    """The demo agent with ``--approval`` on one state folder, one fake target, many starts;
    its store is the file store in the state folder, or PostgresStore (``store_factory``)."""

    def __init__(
        self, children: Children, state: Path, target: FakeTarget, stores: StoreFactory
    ) -> None:
        self.children, self.state, self.target, self.n = children, state, target, 0
        self.location = str(state / "checkpoints") if stores.kind == "file" else stores.location()
        self.store = (
            stores.make()
            if stores.kind != "file"
            else stores.make(str(state.relative_to(stores.base) / "checkpoints"))
        )

    def start(self) -> Attempt:
        self.n += 1
        return run_attempt(
            self.children,
            [*DEMO, "--state", str(self.state), "--approval", "--store", self.location],
            env={"CRASHPOINT_LEDGER": self.target.address},
            number=self.n,
            target=self.target,
        )

    def effects(self) -> list[str]:
        return [kind for kind, _, _ in self.target.applications]

    def decision(self) -> dict[str, object] | None:
        state = self.store.read(RUN, reducer=run_reducer).state
        return state["pauses"]["approve"]["decision"]


@pytest.fixture(scope="module")
def golden_stdout(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The output of a run that never paused, never crashed (one for the module: the same
    for every test; read line by line, as :func:`run_to_end` reads an attempt's)."""
    state = tmp_path_factory.mktemp("golden") / "state"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CRASHPOINT_FAILPOINTS", "CRASHPOINT_LEDGER")
    }
    end = subprocess.run(
        [*DEMO, "--state", str(state)],
        capture_output=True,
        env=env,
        timeout=60,
        start_new_session=True,
        check=False,
    )
    assert end.returncode == 0, end.stderr
    return b"".join(line + b"\n" for line in end.stdout.splitlines())


def paused_agent(
    children: Children,
    tmp_path: Path,
    target: FakeTarget,
    stores: StoreFactory,
    *,
    restart: bool = False,
) -> Agent:
    """An agent that ran up to its approval and exited 75; with ``restart``, then restarted
    without a decision (still 75, nothing new: shown by the approve and deny tests)."""
    agent = Agent(children, tmp_path / "state", target, stores)
    first = agent.start()
    assert first.returncode == PAUSED, first.stderr
    assert b"paused at 'approve'" in first.stderr
    assert agent.effects() == ["send_notification"]
    if not restart:
        return agent
    again = agent.start()
    assert again.returncode == PAUSED, again.stderr
    assert not [e for e in again.events if e.op in ("step_started", "effect")]
    assert agent.effects() == ["send_notification"]  # nothing new without a decision
    assert [ln.action for ln in plan(agent.store, RUN)].count("wait") == 1
    return agent


def test_approve_with_decide_then_resume_completes(
    children: Children, tmp_path: Path, store_factory: StoreFactory, golden_stdout: bytes
) -> None:
    with FakeTarget() as target:
        agent = paused_agent(children, tmp_path, target, store_factory, restart=True)
        assert decide(agent.store, RUN, approved=True, note="looks good") == "approve"
        done = agent.start()
        assert done.returncode == 0, done.stderr
        assert done.stdout == golden_stdout
        assert agent.effects() == ["send_notification", "publish"]
        assert [e.name for e in done.events if e.op == "step_started"] == ["approve", "publish"]
        decision = agent.decision()
        assert decision is not None
        assert (decision["approved"], decision["note"]) == (True, "looks good")


# slow on PostgresStore: fast cover: test_approve_with_decide_then_resume_completes[postgres] and
# test_a_decision_survives_a_kill_at_any_point[postgres-in-decide-...] (processes on PostgresStore),
# the file variant here, tests/unit/test_run_semantics.py (decide on both stores, in-process)
@pytest.mark.parametrize(
    "store_factory", ["file", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)
def test_deny_ends_the_run_as_denied_and_never_publishes(
    children: Children, tmp_path: Path, store_factory: StoreFactory
) -> None:
    with FakeTarget() as target:
        agent = paused_agent(children, tmp_path, target, store_factory, restart=True)
        decide(agent.store, RUN, approved=False, note="not this one")
        for _ in range(2):  # denied is final: a second start does not publish either
            denied = agent.start()
            assert denied.returncode == DENIED, denied.stderr
            assert b"denied" in denied.stderr
            assert b"not this one" in denied.stderr
        assert agent.effects() == ["send_notification"]
        assert agent.store.meta(RUN)["status"] == "denied"
        assert next(ln.action for ln in plan(agent.store, RUN)) == "done"


# slow on PostgresStore: fast cover: test_approve_with_decide_then_resume_completes[postgres] and
# test_a_decision_survives_a_kill_at_any_point[postgres-in-decide-...] (processes on PostgresStore),
# the file variant here, tests/unit/test_run_semantics.py (decide on both stores, in-process)
@pytest.mark.parametrize(
    "store_factory", ["file", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)
def test_decide_refuses_a_run_that_is_not_waiting(
    children: Children, tmp_path: Path, store_factory: StoreFactory
) -> None:
    from crashpoint.errors import RunStateError

    with FakeTarget() as target:
        agent = paused_agent(children, tmp_path, target, store_factory)
        decide(agent.store, RUN, approved=True)
        with pytest.raises(RunStateError, match="not waiting for a decision"):
            decide(agent.store, RUN, approved=False)  # the first decision stands
        assert agent.decision()["approved"] is True  # type: ignore[index]


CLI = [sys.executable, "-c", "from crashpoint.cli import main; main()"]


def cli(children: Children, *args: str) -> Finished:
    return run_to_end(children, [*CLI, *args])


# slow: PostgresStore's fast cover: test_approve_with_decide_then_resume_completes[postgres],
# test_deny_ends_the_run_as_denied_and_never_publishes[postgres]; the CLI's: the file variants
@pytest.mark.parametrize(
    "store_factory", ["file", pytest.param("postgres", marks=pytest.mark.slow)], indirect=True
)
@pytest.mark.parametrize("deny", [False, True])
def test_approve_from_the_cli(
    children: Children,
    tmp_path: Path,
    store_factory: StoreFactory,
    golden_stdout: bytes,
    deny: bool,
) -> None:
    with FakeTarget() as target:
        agent = paused_agent(children, tmp_path, target, store_factory)
        store = agent.location
        flags = ["--deny"] if deny else []
        res = cli(
            children,
            "checkpoints",
            "approve",
            RUN,
            *flags,
            "--note",
            "from the cli",
            "--store",
            store,
        )
        assert res.returncode == 0, res.stderr
        assert agent.decision() is not None
        assert agent.decision()["note"] == "from the cli"  # type: ignore[index]
        end = agent.start()
        if deny:
            assert end.returncode == DENIED
            assert agent.effects() == ["send_notification"]
        else:
            assert end.returncode == 0, end.stderr
            assert end.stdout == golden_stdout
            assert agent.effects() == ["send_notification", "publish"]


# -- a decision is all or nothing, whatever kills its writer -------------------------------------

DECIDE = """
import os, signal, sys
from crashpoint.checkpoint import decide, open_store
decide(open_store(sys.argv[1]), "demo", approved=True, note="killed or not")
if sys.argv[2] == "kill-after":
    os.kill(os.getpid(), signal.SIGKILL)
"""

KILLS = [
    ("kill-after", ""),  # decide returned, then the process died
    ("in-decide", "journal.write=kill@1"),  # before the decision's bytes were written
    ("in-decide", "journal.after_write=kill@1"),  # written, not yet fdatasync'ed
    ("in-decide", "journal.after_sync=kill@1"),  # durable, append not returned
    ("in-decide", "atomic.after_temp=kill@1"),  # meta.json's temp file written
    ("in-decide", "atomic.after_rename=kill@1"),  # meta.json replaced, folder not synced
]


CLI_KILLS = [("cli", fp) for _, fp in KILLS[1:]]


#: The kills that stay in the default run: every kill of the file store's decide, one through
#: the CLI; on PostgresStore one inside decide.
FAST_KILLS = {
    *(("file", w, fp) for w, fp in KILLS),
    ("file", "cli", "journal.after_write=kill@1"),
    ("postgres", "in-decide", "journal.after_sync=kill@1"),
}


# slow: the others' fast cover: FAST_KILLS (each kill point on the file store, the CLI's
# decision killed once, PostgresStore killed inside decide; killed after it: [file-kill-after])
@pytest.mark.parametrize(
    ("store_factory", "when", "failpoints"),
    [
        pytest.param(
            store,
            w,
            fp,
            id=f"{store}-{w}-{fp}" if fp else f"{store}-{w}",
            marks=() if (store, w, fp) in FAST_KILLS else pytest.mark.slow,
        )
        for store in ("file", "postgres")
        for w, fp in KILLS + CLI_KILLS
    ],
    indirect=["store_factory"],
)
def test_a_decision_survives_a_kill_at_any_point(
    children: Children,
    tmp_path: Path,
    store_factory: StoreFactory,
    golden_stdout: bytes,
    when: str,
    failpoints: str,
) -> None:
    with FakeTarget() as target:
        agent = paused_agent(children, tmp_path, target, store_factory)
        if when == "cli":
            argv = [
                *CLI,
                "checkpoints",
                "approve",
                RUN,
                "--note",
                "killed or not",
                "--store",
                agent.location,
            ]
        else:
            argv = [sys.executable, "-c", DECIDE, agent.location, when]
        proc = run_to_end(children, argv, env={"CRASHPOINT_FAILPOINTS": failpoints})
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        decision = agent.decision()
        # all or nothing: the whole decision, or the run still waits for one
        assert decision is None or (
            decision["approved"] is True and decision["note"] == "killed or not"
        )
        if failpoints == "journal.write=kill@1":
            assert decision is None
        elif failpoints.startswith(("journal.after_sync", "atomic")) or when == "kill-after":
            assert decision is not None  # it had been made durable before the kill
        if decision is None:
            again = agent.start()
            assert again.returncode == PAUSED, again.stderr
            decide(agent.store, RUN, approved=True, note="killed or not")
        assert not agent.store.verify(RUN)[RUN][0]  # no damage beyond a repairable tail
        done = agent.start()
        assert done.returncode == 0, done.stderr
        assert done.stdout == golden_stdout
        assert sorted(agent.effects()) == ["publish", "send_notification"]
        assert len(target.applications) == 2
