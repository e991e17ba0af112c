"""The ``backing`` fault family on paper and its parts in one process: its options, its plans,
the ``no_silent_failure`` check on hand-made histories, the harness's SQLite lock and its
trace reading, the proxy's counters, and the ledger's hooks. The family end to end, with real
agents, is tests/crash/test_backing_faults.py."""

from __future__ import annotations

import os
import socket
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from crashpoint.errors import FaultSpecError
from crashpoint.faults import SqliteLock, TcpProxy, find_sqlite_database, sqlite_lock_refusals
from crashpoint.harness import (
    Attempt,
    Expect,
    Golden,
    Ledger,
    Plan,
    ScenarioError,
    family_from_spec,
    load_scenario,
    plan_for,
)
from crashpoint.harness._checker import TrialFacts, run_checks
from crashpoint.harness._checker._silent import check_no_silent_failure

STEPS = ("fetch", "parse", "rank")


def golden(steps: tuple[str, ...] = STEPS, open_: tuple[str, ...] = ()) -> Golden:
    """A golden run of ``steps``, each started and completed (those in ``open_`` only
    started, as an interrupt() leaves a node)."""
    events: list[dict[str, Any]] = []
    for s in steps:
        events.append({"op": "step_started", "step": s, "i": len(events), "attempt": 1})
        if s not in open_:
            events.append({"op": "step_completed", "step": s, "i": len(events), "attempt": 1})
    return Golden(list(steps), events, Counter(), b"ok\n", 0.1)


# -- options ----------------------------------------------------------------------------------


def test_defaults_and_name() -> None:
    fam = family_from_spec({"backing": {"service": "sqlite"}})
    assert fam.name == "backing@sqlite:lock"
    assert not fam.systematic
    pg = family_from_spec({"backing": {"service": "postgres", "at": "every-step", "for": "2s"}})
    assert pg.name == "backing@postgres:restart@every-step"
    assert pg.systematic
    assert dict(pg.chain[0][1])["for"] == 2.0
    assert pg.points(golden()) == 3  # one trial per step of the golden run


@pytest.mark.parametrize(
    ("opts", "option", "words"),
    [
        ({}, "service", "backing.service must be sqlite"),
        ({"service": "mysql"}, "service", "backing.service must be sqlite"),
        ({"service": "sqlite", "do": "restart"}, "do", "must be lock"),
        ({"service": "postgres", "do": "lock"}, "do", "must be restart or partition"),
        ({"service": "postgres", "path": "{state_dir}/x.db"}, "path", "goes with service: sqlite"),
        ({"service": "postgres", "how": "blackhole"}, "how", "do: partition"),
        ({"service": "postgres", "do": "partition", "shutdown": "fast"}, "shutdown", "do: restart"),
        ({"service": "sqlite", "lock": "shared"}, "lock", "immediate, exclusive"),
        ({"service": "sqlite", "within": "1s"}, "within", "goes with at: time"),
        ({"service": "sqlite", "for": 0}, "for", "more than 0"),
        ({"service": "sqlite", "for": "11m"}, "for", "at most 600s"),
        ({"service": "sqlite", "then": "stop"}, "then", "kill, continue"),
        ({"service": "sqlite", "at": "every-boundary"}, "at", "random, every-step, time"),
        ({"service": "sqlite", "path": "/etc/passwd"}, "path", "must start with {state_dir}"),
        ({"service": "sqlite", "path": "{state_dir}/../x"}, "path", "climbs out"),
        ({"service": "sqlite", "hold": "1s"}, "hold", "unknown option"),
    ],
)
def test_bad_options_are_refused(opts: dict[str, Any], option: str, words: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        family_from_spec({"backing": opts})
    assert words in str(info.value), str(info.value)
    assert info.value.option == option


def test_a_scenario_names_the_line_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "x.scenario.yaml"
    bad.write_text(
        'name: x\nagent:\n  command: ["{python}", "-c", "pass"]\nfaults:\n'
        "  - backing: {service: sqlite, lock: shared}\n"
    )
    with pytest.raises(ScenarioError) as info:
        load_scenario(bad)
    assert "x.scenario.yaml:5 (key 'faults[0].backing.lock')" in str(info.value)
    good = tmp_path / "y.scenario.yaml"
    good.write_text(
        'name: y\nagent:\n  command: ["{python}", "-c", "pass", "{postgres}"]\nfaults:\n'
        "  - backing: {service: postgres, do: partition, how: blackhole, for: 500ms}\n"
        "expect: {no_silent_failure: false}\n"
    )
    sc = load_scenario(good)
    assert sc.agent.uses("postgres")
    assert not sc.expect.no_silent_failure
    # then: kill needs an attempt after the kill
    again = tmp_path / "z.scenario.yaml"
    again.write_text(good.read_text().replace("expect:", "restarts: 0\nexpect:"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(again)
    assert "(key 'restarts')" in str(info.value)
    assert "raise restarts to 1 or more, or set then: continue" in str(info.value)
    again.write_text(again.read_text().replace("500ms}", "500ms, then: continue}"))
    assert load_scenario(again).restarts == 0


# -- plans ------------------------------------------------------------------------------------


def test_plans_begin_at_a_step_by_identity() -> None:
    g = golden()
    fam = family_from_spec({"backing": {"service": "sqlite", "at": "every-step", "for": 0.5}})
    plans = [plan_for(fam, g, 7, k, boundary=k) for k in range(fam.points(g))]
    where = [(f.arg("op"), f.arg("name"), f.arg("nth")) for p in plans for f in p.faults]
    assert where == [("step_started", s, 1) for s in STEPS]
    (f,) = plans[1].faults
    assert f.kind == "backing"
    assert f.attempt == 1
    assert f.arg("for") == 0.5
    assert f.arg("service") == "sqlite"
    assert f.arg("do") == "lock"
    assert str(f) == "SQLite lock of {state_dir}/** for 0.5s in attempt 1 at step_started:parse"
    # a pure function of the inputs: the same plan again, and from JSON
    assert plan_for(fam, g, 7, 1, boundary=1) == plans[1]
    assert Plan.from_json(plans[1].to_json()) == plans[1]


def test_at_time_draws_an_instant_and_a_chain_counts_from_the_resume_point() -> None:
    g = golden(("fetch", "parse", "parse", "rank"))
    timed = family_from_spec({"backing": {"service": "sqlite", "at": "time", "within": "2s"}})
    (f,) = plan_for(timed, g, 1, 0).faults
    assert f.arg("op") is None
    assert 0 <= f.arg("seconds") < 2
    chain = family_from_spec([{"kill": {"at": "random"}}, {"backing": {"service": "postgres"}}])
    for k in range(12):
        _kill, backing = plan_for(chain, g, 3, k).faults
        assert backing.attempt == 2
        assert backing.arg("op") == "step_started"
        assert backing.arg("nth") >= 1


# -- no_silent_failure ------------------------------------------------------------------------


def facts(
    events: list[tuple[int, str, str]],
    exits: dict[int, int | None],
    g: Golden | None = None,
    race: dict[str, Any] | None = None,
    stderr: bytes = b"step parse: database is locked\n",
) -> TrialFacts:
    evs = [
        {"i": i, "attempt": a, "op": op, "step": s, "t": float(i)}
        for i, (a, op, s) in enumerate(events)
    ]
    attempts = [
        Attempt(n, [], rc, None if rc is not None else 9, False, 0.1, b"", stderr)
        for n, rc in exits.items()
    ]
    return TrialFacts(
        g or golden(), Plan(()), Expect(), attempts, evs, Counter(), "c", [], 0,
        {"race": race or {}},
    )  # fmt: skip


def run(*steps: str, attempt: int = 1, done: bool = True) -> list[tuple[int, str, str]]:
    out = []
    for s in steps:
        out.append((attempt, "step_started", s))
        if done:
            out.append((attempt, "step_completed", s))
    return out


def test_exit_0_with_a_step_left_open_fails() -> None:
    f = facts([*run("fetch"), (1, "step_started", "parse")], {1: 0})
    r = check_no_silent_failure(f)
    assert not r.ok
    assert "attempt 1 exited 0 but never completed step 'parse'" in r.message
    assert "database is locked" in r.message
    assert "busy timeout" in r.hint


def test_exit_0_with_steps_never_reached_fails_unless_a_crash_took_the_report() -> None:
    bailed = facts(run("fetch"), {1: 0})
    r = check_no_silent_failure(bailed)
    assert not r.ok
    assert "'parse', 'rank'" in r.message
    assert "never reported completed" in r.message
    # attempt 1 was killed inside parse after its write was durable: attempt 2 rightly skips it
    resumed = facts(
        [*run("fetch"), (1, "step_started", "parse"), *run("rank", attempt=2)], {1: None, 2: 0}
    )
    assert check_no_silent_failure(resumed).ok


@pytest.mark.parametrize(
    "case",
    ["complete", "non-zero", "interrupt", "resumers", "no steps", "off"],
)
def test_what_is_not_a_silent_failure(case: str) -> None:
    g, race, exits = None, None, {1: 0}
    events = run(*STEPS)
    if case == "non-zero":  # a clear failure: the restart (or completes) judges it
        events, exits = [*run("fetch"), (1, "step_started", "parse")], {1: 1}
    elif case == "interrupt":  # the golden run leaves 'parse' open too
        g = golden(open_=("parse",))
        events = [*run("fetch"), (1, "step_started", "parse"), *run("rank")]
    elif case == "resumers":  # a second resumer found the run taken and stopped
        events = [*run(*STEPS, attempt=1), (2, "step_started", "fetch")]
        exits, race = {1: 0, 2: 0}, {"attempts": [1, 2]}
    elif case == "no steps":
        g, events = Golden([], [], Counter(), b"", 0.0), []
    f = facts(events, exits, g, race)
    if case == "off":
        f = facts([(1, "step_started", "fetch")], exits)
        f.expect = Expect(no_silent_failure=False)
        assert "no_silent_failure" not in {c.name for c in run_checks(f)}
        return
    assert check_no_silent_failure(f).ok


def test_it_is_the_root_cause_of_the_missing_output() -> None:
    f = facts([*run("fetch"), (1, "step_started", "parse")], {1: 0})
    by = {c.name: c for c in run_checks(f)}
    assert not by["no_silent_failure"].ok
    assert not by["no_silent_failure"].cause
    assert by["same_output"].cause == "no_silent_failure"


# -- the SQLite lock ------------------------------------------------------------------------


def make_db(path: Path, wal: bool = False) -> None:
    db = sqlite3.connect(path)
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()


@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal"])
@pytest.mark.parametrize("mode", ["immediate", "exclusive"])
def test_the_lock_refuses_a_writer_until_released(tmp_path: Path, wal: bool, mode: str) -> None:
    path = tmp_path / "a.db"
    make_db(path, wal)
    lock = SqliteLock(str(path), mode)
    assert lock.acquire() == ""
    assert lock.held
    assert lock.held_since > 0
    other = sqlite3.connect(path, timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("INSERT INTO t VALUES (1)")
    other.rollback()
    lock.release()
    lock.release()  # idempotent
    other.execute("INSERT INTO t VALUES (1)")
    other.commit()
    assert other.execute("SELECT count(*) FROM t").fetchone() == (1,)
    other.close()


def test_the_lock_waits_out_a_writer_then_says_why(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    make_db(path)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    t0 = time.monotonic()
    why = SqliteLock(str(path)).acquire(timeout=0.2)
    assert time.monotonic() - t0 >= 0.15
    assert "held a lock of a.db itself" in why
    writer.execute("ROLLBACK")
    writer.close()
    assert "is gone" in SqliteLock(str(tmp_path / "none.db")).acquire()


def test_find_database_stays_inside_the_folders(tmp_path: Path) -> None:
    state, outside = tmp_path / "state", tmp_path / "outside"
    state.mkdir()
    outside.mkdir()
    (state / "notes.txt").write_text("not a database")
    make_db(outside / "real.db")
    os.symlink(outside / "real.db", state / "link.db")  # a link is never a candidate
    os.link(outside / "real.db", state / "hard.db")  # nor a file with another hard link
    pattern = f"{state}/**"
    assert find_sqlite_database(pattern, [str(state)]) is None
    make_db(state / "b.db")
    make_db(state / "a.db", wal=True)
    assert find_sqlite_database(pattern, [str(state)]) == str(state / "a.db")


def test_lock_refusals_reads_the_refused_requests_in_the_window(tmp_path: Path) -> None:
    db = "/s/a.db"
    lines = [
        "10 100.0 fcntl(3</s/a.db>, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, "
        "l_start=1073741825, l_len=1}) = -1 EAGAIN (Resource temporarily unavailable)",
        "10 101.0 fcntl(3</s/a.db>, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, "
        "l_start=1073741825, l_len=1}) = -1 EAGAIN (Resource temporarily unavailable)",
        "10 101.1 fcntl(4</s/a.db-shm>, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, "
        "l_start=120, l_len=1}) = -1 EAGAIN (Resource temporarily unavailable)",
        "10 101.2 fcntl(3</s/a.db>, F_SETLK, {l_type=F_RDLCK, l_whence=SEEK_SET, "
        "l_start=1073741824, l_len=1}) = 0",
        "10 101.3 fcntl(5</s/other.db>, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, "
        "l_start=1073741825, l_len=1}) = -1 EAGAIN (Resource temporarily unavailable)",
        "10 101.4 fcntl(3</s/a.db>, F_GETFD) = 0x1 (flags FD_CLOEXEC)",
        "10 102.5 fcntl(3</s/a.db>, F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, "
        "l_start=1073741825, l_len=1}) = -1 EAGAIN (Resource temporarily unavailable)",
    ]
    trace = tmp_path / "t.strace"
    trace.write_text("\n".join(lines) + "\n")
    got = sqlite_lock_refusals(str(trace), db, 100.5, 102.0)
    assert [c.time for c in got] == [101.0, 101.1]
    assert sqlite_lock_refusals(str(tmp_path / "missing"), db, 0, 1e12) == []


# -- the proxy's counters and the ledger's hooks ---------------------------------------------


def test_the_proxy_counts_what_a_partition_cut_and_left_hanging() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    with TcpProxy("127.0.0.1", server.getsockname()[1]) as proxy:
        c1 = socket.create_connection((proxy.host, proxy.port), timeout=5)
        peer, _ = server.accept()
        deadline = time.monotonic() + 5
        while proxy.live < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        proxy.partition("blackhole")
        assert proxy.cut == 1
        c2 = socket.create_connection((proxy.host, proxy.port), timeout=5)
        while proxy.hung < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proxy.hung == 1
        proxy.heal()
        proxy.retarget("127.0.0.1", 9)
        assert proxy.target == ("127.0.0.1", 9)
        for s in (c1, c2, peer):
            s.close()
    server.close()


def test_the_ledger_calls_before_reply_and_kills_with_a_label() -> None:
    seen: list[str] = []
    with Ledger() as ledger:
        ledger.before_reply = lambda ev: seen.append(f"{ev['op']}:{ev['step']}")
        ledger.kill_when = lambda ev: "backing" if ev["op"] == "step_completed" else ""
        assert ledger.handle({"op": "step_started", "step": "a", "attempt": 1}) == {"ok": True}
        assert ledger.handle({"op": "step_completed", "step": "a", "attempt": 1}) is None
        assert seen == ["step_started:a"]  # a killed event is not answered
        assert ledger.killed[-1]["kill"] == "backing"
        ledger.reset()
        assert ledger.before_reply is None
        assert ledger.kill_when is None


# -- the docs show what the gate runs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "heading"),
    [
        ("scenarios/README.md", "### The `backing` family"),
        ("docs/concepts/harness.md", "### Backing services"),
    ],
)
def test_the_docs_examples_are_the_shipped_scenarios(page: str, heading: str) -> None:
    root = Path(__file__).resolve().parents[2]
    section = (root / page).read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    shown = [yaml.safe_load(b.split("```", 1)[0]) for b in section.split("```yaml")[1:]]
    shipped = {
        name: yaml.safe_load((root / "scenarios" / name).read_text())
        for name in ("sqlite-lock.scenario.yaml", "postgres-outage.scenario.yaml")
    }
    assert shown
    for block in shown:
        match = [
            n for n, sc in shipped.items() if sc["agent"]["command"] == block["agent"]["command"]
        ]
        assert match, block
        assert block["faults"] == shipped[match[0]]["faults"]
    for name in shipped:
        sc = load_scenario(root / "scenarios" / name)
        assert all(f.family.chain[0][0] == "backing" for f in sc.families)
