"""Run semantics in-process: replay, the determinism guard, in-doubt policies, checkpointing.

A crash is simulated by an exception that escapes the ``with open_run(...)`` block: the journal
is closed with whatever it had, exactly as a kill would leave it (an effect whose ``fn`` had
applied to the fake target but whose result was never recorded stays in doubt). The next
``open_run`` is the restart. One test does the same with a real SIGKILL (a failpoint in the
demo agent) against the fake target of tests/crash.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import _pgdb
from crashpoint import probe
from crashpoint._fsio import FsOps
from crashpoint.checkpoint import (
    Checkpointing,
    Run,
    Store,
    decide,
    open_run,
    plan,
    run_reducer,
)
from crashpoint.errors import EffectInDoubt, ResumeMismatch, RunPaused

# one database for the module, emptied before each test (not one created and dropped per test)
pg_module_database, pg_dsn = _pgdb.pg_module_database, _pgdb.pg_dsn

if TYPE_CHECKING:
    from conftest import Children, StoreFactory

RUN = "run-1"


class Crash(Exception):
    """Stands in for the process dying at this point."""


class Target:
    """A deduplicating outside world: applies each key once, remembers every call."""

    def __init__(self) -> None:
        self.applied: Counter[str] = Counter()
        self.calls: list[str] = []

    def send(self, payload: Any, key: str) -> bool:
        self.calls.append(key)
        fresh = key not in self.applied
        self.applied[key] += int(fresh)
        return fresh

    def happened(self, payload: Any, key: str) -> tuple[bool, Any]:
        return key in self.applied, "reconciled"


@pytest.fixture(autouse=True)
def _no_ledger(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Outside the harness: the probe is a no-op unless a test records it."""
    monkeypatch.delenv(probe.ENV_LEDGER, raising=False)
    monkeypatch.delenv("CRASHPOINT_FAILPOINTS", raising=False)
    probe.reset()
    yield
    probe.reset()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    """The file store, then PostgresStore: every test below runs against both."""
    return store_factory.make()  # type: ignore[no-any-return]


def attempt(store: Store, body: Callable[[Run], Any], **kw: Any) -> Any:
    """One attempt: open (or resume) the run and run ``body``; a Crash ends it like a kill."""
    with open_run(store, RUN, **kw) as run:
        try:
            return body(run)
        except Crash:
            return "crashed"


# -- replay ----------------------------------------------------------------------------------------


def test_completed_steps_replay_without_running_again(store: Store) -> None:
    calls: Counter[str] = Counter()
    crash_at = ["c"]

    def body(run: Run) -> Any:
        out = []
        for name in ("a", "b", "c"):

            def fn(name: str = name) -> str:
                calls[name] += 1
                if name in crash_at:
                    raise Crash
                return name.upper()

            out.append(run.step(name, fn))
        return run.finish(out)

    assert attempt(store, body, steps=["a", "b", "c"]) == "crashed"
    crash_at.clear()
    assert attempt(store, body, steps=["a", "b", "c"]) == ["A", "B", "C"]
    assert calls == {"a": 1, "b": 1, "c": 2}  # only the step that never completed ran again
    assert attempt(store, body, steps=["a", "b", "c"]) == ["A", "B", "C"]  # finished: all replay
    assert calls == {"a": 1, "b": 1, "c": 2}


def test_a_finished_effect_returns_its_result_without_calling_again(store: Store) -> None:
    target = Target()
    crash = [True]

    def body(run: Run) -> Any:
        def notify() -> Any:
            sent = run.effect("email", {"to": "ops"}, target.send)
            if crash:
                raise Crash  # the effect's result is recorded, the step is not
            return sent

        return run.step("notify", notify)

    assert attempt(store, body) == "crashed"
    crash.clear()
    assert attempt(store, body) is True  # the recorded result of the first call
    assert len(target.calls) == 1


def test_effect_keys_are_deterministic(store: Store) -> None:
    target = Target()

    def body(run: Run) -> Any:
        run.step("prep", lambda: 1)
        return run.step(
            "send",
            lambda: (
                [run.effect("email", i, target.send) for i in range(2)]
                + [run.effect("sms", 0, target.send)]
            ),
        )

    attempt(store, body)
    assert target.calls == [f"{RUN}:1.send:email:0", f"{RUN}:1.send:email:1", f"{RUN}:1.send:sms:0"]


# -- the determinism guard -------------------------------------------------------------------------


def two_steps_then_crash(run: Run) -> Any:
    run.step("fetch", lambda: 1)
    run.step("parse", lambda: 2)
    raise Crash


@pytest.mark.parametrize(
    ("declared", "pos", "recorded", "requested"),
    [
        (["fetch", "summarise", "write"], 1, "parse", "summarise"),  # a step renamed
        (["fetch", "parse"], 2, "write", "<end>"),  # a step dropped
        (["fetch", "parse", "check", "write"], 2, "write", "check"),  # a step inserted
    ],
)
def test_a_changed_step_list_is_a_resume_mismatch(
    store: Store, declared: list[str], pos: int, recorded: str, requested: str
) -> None:
    attempt(store, two_steps_then_crash, steps=["fetch", "parse", "write"])
    with pytest.raises(ResumeMismatch) as info:
        open_run(store, RUN, steps=declared)
    err = info.value
    assert (err.position, err.recorded, err.requested) == (pos, recorded, requested)
    assert repr(recorded) in str(err)
    assert repr(requested) in str(err)
    # nothing of the refused attempt was mixed into the run; the old code can still finish it
    assert store.read(RUN, reducer=run_reducer).state["order"] == ["fetch", "parse"]
    with open_run(store, RUN, steps=["fetch", "parse", "write"]) as run:
        assert run.step("fetch", lambda: 0) == 1
        assert run.step("parse", lambda: 0) == 2


@pytest.mark.parametrize("steps", [None, ["fetch", "parse", "write"]], ids=["dynamic", "declared"])
def test_code_asking_for_another_step_at_a_recorded_position(
    store: Store, steps: list[str] | None
) -> None:
    attempt(store, two_steps_then_crash, steps=steps)
    ran: list[str] = []
    with open_run(store, RUN, steps=steps) as run:
        run.step("fetch", lambda: ran.append("fetch"))
        with pytest.raises(ResumeMismatch) as info:
            run.step("validate", lambda: ran.append("validate"))
    assert (info.value.position, info.value.recorded, info.value.requested) == (
        1,
        "parse",
        "validate",
    )
    assert ran == []
    assert store.read(RUN, reducer=run_reducer).state["order"] == ["fetch", "parse"]


# -- in-doubt policies -----------------------------------------------------------------------------


def in_doubt_run(
    store: Store,
    target: Target,
    policy: str,
    reconcile: Callable[..., Any] | None = None,
    apply_then_crash: bool = True,
) -> Callable[[Run], Any]:
    """A run whose effect applies (or not) and then crashes before its result is recorded."""
    crash = [True]

    def send(payload: Any, key: str) -> Any:
        if crash:
            crash.clear()
            if apply_then_crash:
                target.send(payload, key)
            raise Crash
        return target.send(payload, key)

    def body(run: Run) -> Any:
        run.step("write", lambda: "report")
        sent = run.step(
            "publish",
            lambda: run.effect(
                "publish",
                {"doc": 1},
                send,
                policy=policy,  # type: ignore[arg-type]
                reconcile=reconcile,
            ),
        )
        return run.finish({"sent": sent})

    assert attempt(store, body, steps=["write", "publish"]) == "crashed"
    eff = next(iter(store.read(RUN, reducer=run_reducer).state["effects"].values()))
    assert (eff["status"], eff["policy"]) == ("intent", policy)
    return body


KEY = f"{RUN}:1.publish:publish:0"


def test_retry_sends_again_with_the_same_key(store: Store) -> None:
    target = Target()
    body = in_doubt_run(store, target, "retry")
    assert target.calls == [KEY]
    assert attempt(store, body) == {"sent": False}  # deduplicated by the target
    assert target.calls == [KEY, KEY]
    assert target.applied == {KEY: 1}
    attempt(store, body)
    assert target.calls == [KEY, KEY]  # done: never again


@pytest.mark.parametrize("applied", [True, False])
def test_reconcile_asks_the_target_first(store: Store, applied: bool) -> None:
    target = Target()
    asked: list[str] = []

    def reconcile(payload: Any, key: str) -> tuple[bool, Any]:
        asked.append(key)
        return target.happened(payload, key)

    body = in_doubt_run(store, target, "reconcile", reconcile, apply_then_crash=applied)
    result = attempt(store, body)
    assert asked == [KEY]
    if applied:  # it happened: recorded from the reconcile answer, not sent again
        assert result == {"sent": "reconciled"}
        assert target.calls == [KEY]
    else:  # it did not: sent now, with the same key
        assert result == {"sent": True}
        assert target.calls == [KEY]
    assert target.applied == {KEY: 1}
    state = store.read(RUN, reducer=run_reducer).state
    assert state["effects"][KEY]["via"] == ("reconcile" if applied else "call")


@pytest.mark.parametrize("approved", [True, False])
def test_ask_pauses_until_a_human_decides(store: Store, approved: bool) -> None:
    target = Target()
    body = in_doubt_run(store, target, "ask")
    for _ in range(2):  # paused, and paused again on restart without a decision
        with pytest.raises(RunPaused) as info:
            attempt(store, body)
        assert info.value.step == f"effect:{KEY}"
        assert target.calls == [KEY]
    assert [ln.action for ln in plan(store, RUN)].count("wait") == 1
    assert decide(store, RUN, approved=approved, note="checked") == f"effect:{KEY}"
    result = attempt(store, body)
    if approved:  # send again, same key; the target deduplicates
        assert result == {"sent": False}
        assert target.calls == [KEY, KEY]
    else:  # treated as done, never sent again
        assert result == {"sent": None}
        assert target.calls == [KEY]
        assert store.read(RUN, reducer=run_reducer).state["effects"][KEY]["via"] == "human"
    assert target.applied == {KEY: 1}


def test_fail_stops_with_effect_in_doubt(store: Store) -> None:
    target = Target()
    body = in_doubt_run(store, target, "fail")
    for _ in range(2):
        with pytest.raises(EffectInDoubt) as info:
            attempt(store, body)
        assert (info.value.key, info.value.kind) == (KEY, "publish")
    assert target.calls == [KEY]


def test_the_recorded_policy_wins_over_a_changed_one(store: Store) -> None:
    target = Target()
    in_doubt_run(store, target, "fail")

    def retry_now(run: Run) -> Any:
        run.step("write", lambda: "report")
        return run.step(
            "publish", lambda: run.effect("publish", {"doc": 1}, target.send, policy="retry")
        )

    with pytest.raises(EffectInDoubt):
        attempt(store, retry_now)
    assert target.calls == [KEY]


# -- plan ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["retry", "reconcile", "ask", "fail"])
def test_plan_names_the_in_doubt_effect_and_its_policy(store: Store, policy: str) -> None:
    in_doubt_run(store, Target(), policy, reconcile=Target().happened)
    lines = plan(store, RUN)
    assert [(ln.action, ln.what) for ln in lines if ln.action != "in-doubt"] == [
        ("replay", "#0 write"),
        ("run", "#1 publish"),
    ]
    [doubt] = [ln for ln in lines if ln.action == "in-doubt"]
    assert KEY in doubt.what
    assert "publish" in doubt.what
    assert f"policy {policy}" in doubt.why
    assert {"retry": "same key", "reconcile": "reconcile", "ask": "human", "fail": "EffectInDoubt"}[
        policy
    ] in doubt.why


# -- checkpointing: when steps become durable, and when the probe hears of them --------------------
# FILE STORE ONLY: these count the file journal's fdatasyncs through its FsOps seam.


class CountingFs(FsOps):
    """Real I/O; counts fdatasyncs and knows which fds hold bytes not yet synced."""

    def __init__(self) -> None:
        self.fdatasyncs = 0
        self.dirty: set[int] = set()

    def write(self, fd: int, data: bytes) -> None:
        super().write(fd, data)
        self.dirty.add(fd)

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self.fdatasyncs += 1
        self.dirty.discard(fd)

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self.dirty.discard(fd)

    def close(self, fd: int) -> None:
        super().close(fd)
        self.dirty.discard(fd)


class Observed:
    """A run's probe events, each with the fdatasync count at that moment, and every
    step_completed that came while some written byte was not yet synced."""

    def __init__(self, fs: CountingFs, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fs = fs
        self.log: list[tuple[str, str, int]] = []
        self.unsynced_announcements: list[str] = []
        monkeypatch.setattr(probe, "step_started", self._started)
        monkeypatch.setattr(probe, "step_completed", self._completed)

    def _started(self, step: str) -> None:
        self.log.append(("started", step, self.fs.fdatasyncs))

    def _completed(self, step: str) -> None:
        if self.fs.dirty:
            self.unsynced_announcements.append(step)
        self.log.append(("completed", step, self.fs.fdatasyncs))

    def completed(self) -> list[str]:
        return [s for op, s, _ in self.log if op == "completed"]


SIX = [
    ("s0", "step"),
    ("s1", "step"),
    ("s2", "step"),
    ("s3", "step"),
    ("s4", "step"),
    ("s5", "step"),
]


def run_steps(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cp: Checkpointing,
    steps: list[tuple[str, str]] = SIX,
) -> tuple[Observed, list[int], list[list[str]]]:
    """Run ``steps``; return the observer, the fdatasyncs of each step, and what the probe
    had heard completed after each step."""
    fs = CountingFs()
    seen = Observed(fs, monkeypatch)
    per_step, heard = [], []
    with open_run(Store(tmp_path / "store", fs=fs), RUN, checkpointing=cp) as run:
        for name, kind in steps:
            before = fs.fdatasyncs
            run.step(name, lambda name=name: name, kind=kind)  # type: ignore[arg-type]
            per_step.append(fs.fdatasyncs - before)
            heard.append(seen.completed())
        run.finish("done")
    assert seen.unsynced_announcements == [], "step_completed sent before its record synced"
    assert seen.completed() == [name for name, _ in steps]  # every step announced, once
    return seen, per_step, heard


def test_event_mode_syncs_and_announces_every_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, per_step, heard = run_steps(tmp_path, monkeypatch, Checkpointing.event())
    assert per_step == [1] * 6
    assert heard == [[f"s{j}" for j in range(i + 1)] for i in range(6)]


def test_interval_mode_is_a_group_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, per_step, heard = run_steps(tmp_path, monkeypatch, Checkpointing.interval(4))
    assert per_step == [0, 0, 0, 1, 0, 0]
    assert heard[2] == []
    assert heard[3] == ["s0", "s1", "s2", "s3"]
    assert heard[5] == heard[3]
    # s4, s5 are announced by finish(), after the sync that makes them durable


def test_after_tools_adds_a_sync_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [("plan", "step"), ("search", "tool"), ("draft", "step"), ("edit", "step")]
    _, per_step, heard = run_steps(
        tmp_path, monkeypatch, Checkpointing.interval(10, after_tools=True), steps
    )
    assert per_step == [0, 1, 0, 0]
    assert heard[1] == ["plan", "search"]
    assert heard[3] == ["plan", "search"]


def test_before_llm_adds_a_sync_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    steps = [("plan", "step"), ("search", "step"), ("summarise", "llm"), ("edit", "step")]
    seen, per_step, heard = run_steps(
        tmp_path, monkeypatch, Checkpointing.interval(10, before_llm=True), steps
    )
    assert per_step == [0, 0, 1, 0]  # the sync happens before the llm step starts
    started = next(i for i, e in enumerate(seen.log) if e[:2] == ("started", "summarise"))
    assert [e[1] for e in seen.log[:started] if e[0] == "completed"] == ["plan", "search"]
    assert heard[2] == ["plan", "search"]


def test_hybrid_syncs_by_count_or_by_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, per_step, _ = run_steps(tmp_path / "a", monkeypatch, Checkpointing.hybrid(3, 3600.0))
    assert per_step == [0, 0, 1, 0, 0, 1]
    _, per_step, _ = run_steps(tmp_path / "b", monkeypatch, Checkpointing.hybrid(100, 1e-9))
    assert per_step == [1] * 6  # every step is past the time limit


def test_the_sync_check_has_teeth(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library that announced steps before syncing them would fail the checks above."""
    monkeypatch.setattr(Run, "_sync_flag", lambda self, want: False)
    with pytest.raises(AssertionError, match="before its record synced"):
        run_steps(tmp_path, monkeypatch, Checkpointing.event())


# -- a real kill in the in-doubt window ------------------------------------------------------------
# FILE STORE ONLY: the demo agent's default store (the same kill against PostgresStore runs in
# tests/unit/test_http_effect.py and tests/crash/test_approval.py).

CRASH_DIR = Path(__file__).resolve().parents[1] / "crash"


def test_real_kill_in_the_in_doubt_window_retries_with_the_same_key(
    children: Children, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(CRASH_DIR))
    from resume_check import DEMO, Golden, run_trial, violations

    golden = Golden.of(run_trial(children, [*DEMO, "--state", str(tmp_path / "golden")]))
    state = tmp_path / "killed"
    plans = []

    def look(_: object) -> None:
        plans.append(plan(Store(state / "checkpoints"), "demo"))

    trial = run_trial(
        children,
        [*DEMO, "--state", str(state)],
        on_exit=look,
        env={"CRASHPOINT_FAILPOINTS": "effect.after_call=kill@1"},
    )
    assert [a.returncode for a in trial.attempts] == [-9, 0]
    sends = [e for e in trial.events if e.op == "effect" and e.kind == "send_notification"]
    assert [(e.attempt, e.applied) for e in sends] == [("1", True), ("2", False)]
    assert sends[0].name == sends[1].name  # the same key, deduplicated by the target
    assert violations(golden, trial) == []
    # the plan for the killed run: four steps replay, the notification is in doubt (retry)
    lines = plans[0]
    assert [(ln.action, ln.what.split(" key=")[0]) for ln in lines] == [
        ("replay", "#0 plan"),
        ("replay", "#1 search"),
        ("replay", "#2 summarise"),
        ("replay", "#3 write_report"),
        ("in-doubt", "effect send_notification"),
        ("run", "#4 notify"),
        ("run", "#5 publish"),
    ]
    assert sends[0].name in lines[4].what
    assert "policy retry" in lines[4].why


def test_plan_cli_prints_the_plan_for_a_run_killed_in_doubt(
    children: Children, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(CRASH_DIR))
    from resume_check import DEMO, run_to_end

    cli = [sys.executable, "-c", "from crashpoint.cli import main; main()"]
    if run_to_end(children, [*cli, "checkpoints", "plan", "--help"]).returncode != 0:
        pytest.skip("plan subcommand not available")
    killed = run_to_end(
        children,
        [*DEMO, "--state", str(tmp_path)],
        env={"CRASHPOINT_FAILPOINTS": "effect.after_call=kill@1"},
    )
    assert killed.returncode == -9
    shown = run_to_end(
        children, [*cli, "checkpoints", "plan", "demo", "--store", str(tmp_path / "checkpoints")]
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.decode().splitlines()
    assert [ln.split()[:2] for ln in lines] == [
        ["replay", "#0"],
        ["replay", "#1"],
        ["replay", "#2"],
        ["replay", "#3"],
        ["in-doubt", "effect"],
        ["run", "#4"],
        ["run", "#5"],
    ]
    assert "demo:4.notify:send_notification:0" in lines[4]
    assert "policy retry" in lines[4]


@pytest.mark.parametrize(
    "result",
    [None, "yes", {"approved": "yes"}, {"approved": True, "by": 7}, {"approved": True, "extra": 1}],
)
def test_a_recorded_approval_that_is_not_a_decision_is_corrupt(store: Store, result: Any) -> None:
    """An approval step's recorded result with a valid checksum but not a decision (an edited or
    forged journal): replaying it is ``CheckpointCorrupt`` naming the step, never a raw
    KeyError/TypeError inside the agent."""
    from crashpoint.errors import CheckpointCorrupt

    with open_run(store, "approval", steps=["review"]) as run:
        run.journal.append({"t": "step", "name": "review", "result": result})
    with (
        open_run(store, "approval", steps=["review"]) as run,
        pytest.raises(CheckpointCorrupt, match="approval step 'review' is not a decision"),
    ):
        run.approval("review")


def test_a_recorded_approval_replays_as_the_decision(store: Store) -> None:
    with open_run(store, "approval", steps=["review"]) as run:
        run.journal.append(
            {"t": "step", "name": "review", "result": {"approved": True, "note": "ok", "by": "ann"}}
        )
    with open_run(store, "approval", steps=["review"]) as run:
        assert run.approval("review").by == "ann"
