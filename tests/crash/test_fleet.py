"""A fleet of real worker processes over a real PostgreSQL: kills at every boundary, a killed
client connection, two workers racing, a stolen lease, a SIGSTOPped worker, a partition, and
the 3-worker campaign. Effects are counted by the FakeTarget (outside the workers); one writer
is judged from the fencing generation stored with every record."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import psutil
import pytest
from fake_target import FakeTarget

pytest.importorskip(
    "psycopg",
    reason="psycopg (PostgreSQL driver) is not installed: pip install 'crashpoint[postgres]'",
)

import _pgdb
from crashpoint.checkpoint import PostgresStore, run_reducer, submit

# one database for the module, emptied before each test (not one created and dropped per test)
pg_module_database, pg_dsn = _pgdb.pg_module_database, _pgdb.pg_dsn

if TYPE_CHECKING:
    from conftest import Child, Children

AGENT = str(Path(__file__).parent / "fleet_agent.py")
STEPS = ("fetch", "write", "publish")
LEASE = "1"
#: Probe events of one attempt: 0 hello, then per step started / effect / completed.
BOUNDARIES = [(i, "before") for i in range(1, 10)] + [(i, "in_doubt") for i in (2, 5, 8)]
#: The default run's kills: the first boundary and the last in-doubt window (the rest: -m slow).
QUICK = {(1, "before"), (8, "in_doubt")}


class WorkerKiller(FakeTarget):
    """Kill the agent's process group AND its worker's (the whole worker dies mid-step)."""

    def _killpg(self, pid: int) -> None:
        try:
            worker = psutil.Process(pid).ppid()
            os.killpg(os.getpgid(worker), signal.SIGKILL)
        except (psutil.Error, ProcessLookupError):
            self.errors.append(f"no worker above pid {pid}")
        super()._killpg(pid)


def worker(
    children: Children,
    dsn: str,
    name: str,
    target: FakeTarget,
    *,
    think: float = 0.0,
    extra: tuple[str, ...] = (),
) -> Child:
    # the password goes in the environment (PGPASSWORD), not in argv, which any user reads
    url = urlsplit(dsn)
    password = unquote(url.password or "")
    dsn = url._replace(netloc=f"{url.username}@{url.hostname}:{url.port}").geturl()
    return children.spawn(
        [
            sys.executable,
            "-m",
            "crashpoint",
            "fleet",
            "work",
            "--store",
            dsn,
            "--lease-seconds",
            LEASE,
            "--worker",
            name,
            "--until-idle",
            "--poll",
            "0.1",
            "--timeout",
            "60",
            *extra,
            "--",
            sys.executable,
            AGENT,
            dsn,
            "{run_id}",
        ],
        env={
            "CRASHPOINT_LEDGER": target.address,
            "FLEET_LEASE": LEASE,
            "FLEET_THINK": str(think),
            "PGPASSWORD": password,
        },
    )


def generations(store: PostgresStore, run_id: str) -> list[int]:
    with store._tx() as cur:
        cur.execute(
            store._q("SELECT generation FROM {records} WHERE run_id = %s ORDER BY seq"), (run_id,)
        )
        return [int(r[0]) for r in cur.fetchall()]


def judge(store: PostgresStore, target: FakeTarget, runs: list[str], *, in_doubt: int = 0) -> None:
    """Every run completed with every step; each effect applied once (the target's count);
    re-deliveries only for effects left in doubt; records' generations never go back."""
    for rid in runs:
        state = store.read(rid, reducer=run_reducer).state
        assert state["status"] == "completed", (rid, state["status"], store.meta(rid))
        assert state["order"] == list(STEPS), rid  # 0 lost steps
        gens = generations(store, rid)
        assert gens == sorted(gens), f"{rid}: a stale writer's record landed: {gens}"
    keys = {f"{rid}:{i}.{s}:put:0" for rid in runs for i, s in enumerate(STEPS)}
    assert dict(target.applied) == dict.fromkeys(keys, 1)  # 0 lost, 0 duplicate effects
    redelivered = sum(n - 1 for n in target.deliveries.values())
    assert redelivered <= in_doubt, dict(target.deliveries)
    assert not target.errors


def wait_for_a_step(store: PostgresStore, run_id: str) -> None:
    deadline = time.monotonic() + 60
    while not store.read(run_id, reducer=run_reducer).state.get("order"):
        assert time.monotonic() < deadline, "no step was recorded"
        time.sleep(0.05)


def wait_all(*ws: Child, timeout: float = 60.0) -> None:
    for w in ws:
        rc = w.wait(timeout)
        assert rc in (0, -9), (rc, w.stderr_text())


# slow: the other boundaries' fast cover: the QUICK kills (a lease lost before and in doubt)
@pytest.mark.parametrize(
    "kill",
    [
        pytest.param(b, marks=() if b in QUICK else pytest.mark.slow, id=f"{b[0]}-{b[1]}")
        for b in BOUNDARIES
    ],
)
def test_killed_worker_loses_its_run_to_another(
    children: Children, pg_dsn: str, kill: tuple[int, Any]
) -> None:
    store = PostgresStore(pg_dsn, worker="test")
    assert submit(store, "r1")
    assert not submit(store, "r1")
    with WorkerKiller() as target:
        target.arm_kill(*kill)
        a = worker(children, pg_dsn, "A", target)
        assert a.wait(60) == -9, a.stderr_text()
        assert store.lease("r1").holder == "A"  # type: ignore[union-attr]  # not released
        b = worker(children, pg_dsn, "B", target)  # waits for A's lease to expire
        wait_all(b)
        judge(store, target, ["r1"], in_doubt=1 if kill[1] == "in_doubt" else 0)
        # submit took generation 1 (no records), A 2, B 3
        assert store.lease("r1").generation == 3  # type: ignore[union-attr]
        assert set(generations(store, "r1")) <= {2, 3}
        assert generations(store, "r1")[-1] == 3
    store.close()


def test_two_workers_race_for_one_run(children: Children, pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, worker="test")
    submit(store, "r1")
    with FakeTarget() as target:
        ws = [worker(children, pg_dsn, n, target, think=0.2) for n in ("A", "B")]
        wait_all(*ws)
        judge(store, target, ["r1"])
        assert set(generations(store, "r1")) == {2}  # one claim, one writer
    store.close()


def test_stolen_lease_kills_the_agent_and_its_writes_are_refused(
    children: Children, pg_dsn: str
) -> None:
    # the thief's lease lasts 2s (not the default 30s): A claims the run again once it expires
    store = PostgresStore(pg_dsn, worker="test", lease_seconds=2.0)
    submit(store, "r1")
    with FakeTarget() as target:
        a = worker(children, pg_dsn, "A", target, think=1.0)
        wait_for_a_step(store, "r1")
        stolen = store.take_over("r1", "thief")
        assert stolen == 3  # submit 1, A 2
        wait_all(a)  # A's renewal is refused: it kills its agent, then claims again (gen 3)
        out = "\n".join(iter(lambda: a.read_line(0.1), None))
        assert "r1: lost" in out, out
        judge(store, target, ["r1"], in_doubt=1)
        gens = generations(store, "r1")
        assert 3 not in gens, gens  # the thief wrote nothing
        assert gens[-1] == 4, gens  # A again, at the next generation
    store.close()


def test_sigstopped_worker_is_fenced_after_its_ttl(children: Children, pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, worker="test")
    submit(store, "r1")
    with FakeTarget() as target:
        a = worker(children, pg_dsn, "A", target, think=0.5)
        wait_for_a_step(store, "r1")
        os.killpg(a.pid, signal.SIGSTOP)
        agent_pgid = [p.pid for p in psutil.Process(a.pid).children()]
        for pid in agent_pgid:
            os.killpg(pid, signal.SIGSTOP)
        b = worker(children, pg_dsn, "B", target)
        wait_all(b)  # B claims after A's TTL and finishes the run
        for pid in agent_pgid:
            os.killpg(pid, signal.SIGCONT)
        os.killpg(a.pid, signal.SIGCONT)
        wait_all(a)
        judge(store, target, ["r1"], in_doubt=1)
        assert generations(store, "r1")[-1] == 3
    store.close()


def test_killed_client_connection_mid_run(children: Children, pg_server: Any, pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, worker="test")
    submit(store, "r1")
    db = pg_dsn.rsplit("/", 1)[1]
    with FakeTarget() as target:
        a = worker(children, pg_dsn, "A", target, think=0.5)
        wait_for_a_step(store, "r1")
        for pid in pg_server.backend_pids(db):
            pg_server.psql(f"SELECT pg_terminate_backend({pid})")
        store.close()  # ours was terminated too
        store = PostgresStore(pg_dsn, worker="test")
        wait_all(a)
        judge(store, target, ["r1"], in_doubt=1)
    store.close()


def test_partition_between_a_worker_and_the_database(
    children: Children, pg_server: Any, pg_dsn: str
) -> None:
    from crashpoint.faults import TcpProxy

    store = PostgresStore(pg_dsn, worker="test")
    submit(store, "r1")
    with FakeTarget() as target, TcpProxy("127.0.0.1", pg_server.port) as proxy:
        a = worker(children, proxy.dsn(pg_dsn), "A", target, think=0.5)
        wait_for_a_step(store, "r1")
        proxy.partition()
        b = worker(children, pg_dsn, "B", target)  # on the other side of the partition
        wait_all(b)
        proxy.heal()
        wait_all(a)
        judge(store, target, ["r1"], in_doubt=1)
    store.close()


def _campaign(children: Children, pg_dsn: str, n_runs: int, seed: int) -> None:
    rng = random.Random(seed)
    # a stolen run's lease lasts 2s (not the default 30s): a worker claims it again soon after
    store = PostgresStore(pg_dsn, worker="test", lease_seconds=2.0)
    runs = [f"run{i:02d}" for i in range(n_runs)]
    for rid in runs:
        submit(store, rid)
    kills = 0
    with FakeTarget() as target:
        names = iter(f"w{i}" for i in range(1000))
        ws = [worker(children, pg_dsn, next(names), target, think=0.05) for _ in range(3)]
        stolen = stopped = False
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = sum(store.meta(r).get("status") == "completed" for r in runs)
            if done == n_runs:
                break
            time.sleep(rng.uniform(0.1, 0.4))
            live = [w for w in ws if w.popen.poll() is None]
            if not live:
                ws.append(worker(children, pg_dsn, next(names), target, think=0.05))
                continue
            victim = rng.choice(live)
            if not stolen and done >= 2:
                held = [
                    r
                    for r in runs
                    if (le := store.lease(r)) and not le.expired and le.holder.startswith("w")
                ]
                if held:
                    store.take_over(held[0], "thief")
                    stolen = True
                    continue
            if not stopped and done >= 4:
                frozen = [psutil.Process(victim.pid), *psutil.Process(victim.pid).children()]
                for p in frozen:
                    os.killpg(p.pid, signal.SIGSTOP)
                time.sleep(float(LEASE) * 2.5)
                # the agents first: the worker, once continued, may kill its agent at once
                # (its lease is lost), and that group is then gone
                for p in reversed(frozen):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGCONT)
                stopped = True
                continue
            if kills < 4 and rng.random() < 0.5:
                for p in [psutil.Process(victim.pid), *psutil.Process(victim.pid).children()]:
                    os.killpg(p.pid, signal.SIGKILL)
                kills += 1
                ws.append(worker(children, pg_dsn, next(names), target, think=0.05))
        for w in ws:
            w.wait(60)
        assert stolen
        assert stopped
        assert kills
        judge(store, target, runs, in_doubt=kills + 2)
    store.close()


# slow: fast cover: test_stolen_lease_kills_the_agent_and_its_writes_are_refused, the QUICK kills
@pytest.mark.slow
def test_campaign_three_workers_kills_a_stolen_lease(children: Children, pg_dsn: str) -> None:
    _campaign(children, pg_dsn, 12, seed=14)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(5))
def test_campaign_sweep(children: Children, pg_dsn: str, seed: int) -> None:
    _campaign(children, pg_dsn, 30, seed)


@pytest.mark.parametrize(
    ("script", "status", "reason"),
    [
        # a flood on stderr: the worker keeps the tail (bounded), and its last line is the reason
        (
            "import sys; sys.stderr.write('x' * 4_000_000 + '\\nboom: the tool failed\\n'); "
            "sys.exit(1)",
            "failed",
            "exit 1: boom: the tool failed",
        ),
        # another owner has the run (exit 73) and said nothing: lost, not a crash of the worker
        ("import sys; sys.exit(73)", "lost", "exit 73"),
    ],
)
def test_an_attempt_s_failure_is_reported_from_its_exit_and_stderr_tail(
    pg_dsn: str, script: str, status: str, reason: str
) -> None:
    from crashpoint.checkpoint import FleetWorker

    store = PostgresStore(pg_dsn, worker="w-tail", lease_seconds=5)
    submit(store, "r1")
    lines: list[str] = []
    fleet = FleetWorker(
        store,
        command=lambda run_id: [sys.executable, "-c", script],
        max_attempts=3,
        log=lines.append,
    )
    (outcome,) = fleet.run_once()
    assert (outcome.status, outcome.reason) == (status, reason), lines
    store.close()
