"""PostgresStore against a real PostgreSQL server (the ``pg_dsn`` fixture): records, reads,
leases and fencing, claims with SKIP LOCKED, corruption, budgets, DSN redaction. No mocks."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

psycopg = pytest.importorskip(
    "psycopg",
    reason="psycopg (PostgreSQL driver) is not installed: pip install 'crashpoint[postgres]'",
)

import _pgdb  # noqa: E402
from crashpoint.checkpoint import (  # noqa: E402
    PostgresStore,
    SnapshotPolicy,
    Store,
    is_store_url,
    open_run,
    open_store,
    run_reducer,
)
from crashpoint.errors import (  # noqa: E402
    CheckpointCorrupt,
    CheckpointError,
    DiskBudgetExceeded,
    LeaseLost,
    RunLocked,
    RunNotFound,
)

# one database for the module, emptied before each test (not one created and dropped per test)
pg_module_database, pg_dsn = _pgdb.pg_module_database, _pgdb.pg_dsn

if TYPE_CHECKING:
    from conftest import Children


def wait_for(cond: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    end = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what or cond}")
        time.sleep(0.05)


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    s = PostgresStore(pg_dsn, worker="w-main")
    yield s
    s.close()


def rows(dsn: str, query: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query, args).fetchall()


def test_the_shared_database_is_empty_for_each_test(pg_dsn: str) -> None:
    """What this module's ``pg_dsn`` (one database, emptied per test) must leave of a test: no
    schema, no table, no session (a lease holder's connection, a lock). Fails if the reset
    keeps any of them."""
    holder = PostgresStore(pg_dsn, worker="left-behind")
    with holder.open("r") as j:  # tables in schema crashpoint; the store's session stays open
        j.append({"n": 1})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA other_schema; CREATE TABLE public.t (x int)")
    locker = psycopg.connect(pg_dsn)
    locker.execute("SELECT pg_advisory_lock(7)")  # a session with a lock, left open
    try:
        _pgdb.empty(pg_dsn)
        schemas = rows(
            pg_dsn,
            "SELECT nspname FROM pg_namespace WHERE nspname !~ '^pg_' "
            "AND nspname <> 'information_schema' ORDER BY 1",
        )
        assert schemas == [("public",)]
        assert rows(pg_dsn, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'") == [(0,)]
        others = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        assert rows(pg_dsn, others + " AND pid <> pg_backend_pid()") == [(0,)]
        assert rows(pg_dsn, "SELECT pg_try_advisory_lock(7)") == [(True,)]
    finally:
        locker.close()
        holder.close()


def test_append_read_and_list(store: PostgresStore) -> None:
    with store.open("r1") as j:
        assert j.generation == 1
        assert [j.append({"n": i}) for i in range(3)] == [1, 2, 3]
        j.set_meta(status="running")
        assert store.lease("r1").holder == "w-main"  # type: ignore[union-attr]
        assert [r.locked for r in store.runs()] == [True]
    assert store.read("r1").state == {"records": [{"n": 0}, {"n": 1}, {"n": 2}]}
    assert store.meta("r1")["status"] == "running"
    info = store.runs()
    assert [(r.run_id, r.status, r.locked) for r in info] == [("r1", "running", False)]
    assert info[0].size == store.usage(refresh=True) > 0
    assert store.exists("r1")
    assert not store.exists("r2")
    assert store.run_ids() == ["r1"]
    with store.open("r1") as j:  # the released lease is taken again: a new generation
        assert j.generation == 2
        assert j.seq == 3
    with pytest.raises(RunNotFound):
        store.open("nope", create=False)
    with pytest.raises(RunNotFound):
        store.read("nope")


def test_records_are_rows_and_a_snapshot_deletes_what_it_covers(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn, snapshots=SnapshotPolicy(min_bytes=200, ratio=1.0))
    with s.open("r") as j:
        for i in range(40):
            j.append({"i": i, "pad": "x" * 20})
    n_rec = rows(pg_dsn, "SELECT count(*) FROM crashpoint.records")[0][0]
    n_snap = rows(pg_dsn, "SELECT count(*) FROM crashpoint.snapshots")[0][0]
    assert n_snap == 1
    assert n_rec < 40
    assert [r["i"] for r in s.read("r").state["records"]] == list(range(40))
    # O(N): total bytes written grow linearly, the state is never rewritten per step
    assert s.bytes_written < 40 * 60 * 4
    s.close()


def test_a_second_writer_is_refused_while_the_lease_is_live(pg_dsn: str) -> None:
    a = PostgresStore(pg_dsn, worker="a")
    b = PostgresStore(pg_dsn, worker="b")
    with a.open("r") as j:
        j.append(1)
        with pytest.raises(RunLocked, match="worker a"):
            b.open("r", lock_timeout=0.2)
        with pytest.raises(RunLocked):  # the same process, the same worker: still one writer
            a.open("r")
    with b.open("r") as j:
        assert j.generation == 2


def test_a_stale_writer_gets_lease_lost_and_its_record_never_lands(pg_dsn: str) -> None:
    a = PostgresStore(pg_dsn, worker="a")
    j = a.open("r")
    j.append({"n": 1})
    gen = a.take_over("r", "thief")
    assert gen == j.generation + 1
    with pytest.raises(LeaseLost) as info:
        j.append({"n": "stale"})
    assert info.value.generation == 1
    assert info.value.current == 2
    with pytest.raises(LeaseLost):  # and meta too
        j.set_meta(status="completed")
    j.close()
    got = rows(pg_dsn, "SELECT seq, generation FROM crashpoint.records ORDER BY seq")
    assert got == [(1, 1)]
    assert a.lease("r").holder == "thief"  # type: ignore[union-attr]
    assert a.read("r").state == {"records": [{"n": 1}]}


def test_the_good_path_writes_under_the_current_generation(pg_dsn: str) -> None:
    """The fence has a good path: the new holder writes after a take-over."""
    a = PostgresStore(pg_dsn, worker="a")
    a.open("r").close()
    a.take_over("r", "b")
    b = PostgresStore(pg_dsn, worker="b")
    with b.open("r") as j:  # adopts b's lease: same generation
        assert j.adopted
        assert j.generation == 2
        j.append("x")
    assert a.lease("r").holder == "b"  # type: ignore[union-attr]  # adopted: not released


def test_renew_release_and_lease(store: PostgresStore) -> None:
    store.open("r").close()
    [(rid, gen)] = store.claim("w1")
    assert rid == "r"
    assert gen == 2
    lease = store.lease("r")
    assert lease is not None
    assert lease.holder == "w1"
    assert not lease.expired
    assert lease.expires_at > time.time() - 60
    assert store.renew("r", "w1", gen)
    assert not store.renew("r", "w1", gen - 1)
    assert not store.renew("r", "other", gen)
    assert store.claim("w2") == []  # held
    store.release("r", "w1", gen)
    assert store.lease("r").expired  # type: ignore[union-attr]
    assert store.claim("w2") == [("r", 3)]


def test_claim_skips_finished_dead_lettered_and_hitl_runs(store: PostgresStore) -> None:
    for rid, status in [
        ("a", "running"),
        ("b", "completed"),
        ("c", "paused"),
        ("d", "decided"),
        ("e", "failed"),
        ("f", "running"),
    ]:
        with store.open(rid) as j:
            j.set_meta(status=status)
    assert store.record_attempt("f", "boom") == 1
    assert store.record_attempt("f", "boom again") == 2
    store.dead_letter("f", "poison")
    assert store.dead_lettered() == [("f", 2, "poison")]
    got = sorted(r for r, _ in store.claim("w", limit=10))
    assert got == ["a", "e"]
    got = sorted(r for r, _ in store.claim("w2", limit=10, auto_resume_hitl=True))
    assert got == ["d"]


def test_two_claimers_get_disjoint_runs(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn)
    for i in range(20):
        store.open(f"r{i:02d}").close()
    got: dict[str, list[tuple[str, int]]] = {}
    barrier = threading.Barrier(2)

    def claimer(name: str) -> None:
        s = PostgresStore(pg_dsn)  # its own connection
        barrier.wait()
        mine: list[tuple[str, int]] = []
        while batch := s.claim(name, limit=3):
            mine += batch
        got[name] = mine
        s.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in ("x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    x = {r for r, _ in got["x"]}
    y = {r for r, _ in got["y"]}
    assert not x & y
    assert x | y == {f"r{i:02d}" for i in range(20)}
    holders = dict(rows(pg_dsn, "SELECT run_id, holder FROM crashpoint.leases"))
    assert all(holders[r] == "x" for r in x)
    assert all(holders[r] == "y" for r in y)


def test_a_corrupted_row_is_detected_naming_run_and_seq(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn)
    with s.open("r") as j:
        for i in range(3):
            j.append({"i": i})
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # flip a payload byte of record 2
        conn.execute(
            "UPDATE crashpoint.records SET frame = overlay(frame placing "
            "'\\x5a'::bytea from 20 for 1) WHERE seq = 2"
        )
    with pytest.raises(CheckpointCorrupt) as info:
        s.read("r")
    assert "'r'" in str(info.value) or "/r" in str(info.value)
    assert info.value.offset == 2
    assert "checksum" in info.value.reason
    with pytest.raises(CheckpointCorrupt):
        s.open("r")
    damage, torn = s.verify("r")["r"]
    assert [d.offset for d in damage] == [2]
    assert torn == []
    # rollback keeps the valid prefix and says what it lost
    rb = PostgresStore(pg_dsn, on_corrupt="rollback")
    with rb.open("r") as j:
        assert j.recovery
        assert j.recovery.lost_from_seq == 2
        assert j.state == {"records": [{"i": 0}]}
        j.append({"i": "new"})
    assert s.read("r").state == {"records": [{"i": 0}, {"i": "new"}]}


def test_garbage_in_a_row_is_corrupt_not_a_traceback(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn)
    with s.open("r") as j:
        j.append(1)
    for junk in (b"", b"\x00" * 40, b"CP" + b"\xff" * 30):
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("UPDATE crashpoint.records SET frame = %s WHERE seq = 1", (junk,))
        with pytest.raises(CheckpointCorrupt, match="#1"):
            s.read("r")


def test_budget_exceeded_before_anything_is_written(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn, budget_bytes=2000)
    with s.open("r") as j:
        j.append("x" * 500)
        with pytest.raises(DiskBudgetExceeded, match="budget of 2000"):
            j.append("y" * 3000)
        assert j.seq == 1
        j.append("z")  # the run goes on once it fits
    assert s.read("r").state == {"records": ["x" * 500, "z"]}
    assert s.usage() <= 2000


def test_a_finished_run_is_pruned_for_room_but_an_active_one_never(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn, budget_bytes=6000)
    with open_run(s, "done") as run:
        run.step("a", lambda: "x" * 2000)
        run.finish("ok")
    with open_run(s, "live") as run:
        run.step("a", lambda: "y" * 2000)
        run.step("b", lambda: "y" * 1500)  # room is made by pruning the finished run
    assert s.run_ids() == ["live"]
    with open_run(s, "live") as run:
        run.step("a", lambda: "?")
        run.step("b", lambda: "?")
        with pytest.raises(DiskBudgetExceeded):
            run.step("c", lambda: "z" * 9000)
    assert s.run_ids() == ["live"]


def test_dsn_passwords_never_appear(tmp_path: Path) -> None:
    dsn = "postgresql://alice:hunter2secret@127.0.0.1:1/nodb"
    s = PostgresStore(dsn, connect_timeout=2)
    assert "hunter2secret" not in repr(s)
    assert "hunter2secret" not in s.root
    with pytest.raises(CheckpointError) as info:
        s.run_ids()
    assert "hunter2secret" not in str(info.value)
    assert "127.0.0.1" in str(info.value)
    assert (
        info.value.__cause__ is None and info.value.__context__ is None
    ) or "hunter2secret" not in str(info.value.__context__)
    kv = PostgresStore("host=127.0.0.1 port=1 password=hunter2secret dbname=x", connect_timeout=2)
    assert "hunter2secret" not in repr(kv)
    with pytest.raises(CheckpointError) as info:
        kv.exists("r")
    assert "hunter2secret" not in str(info.value)


def test_open_store_picks_the_store_by_url(tmp_path: Path, pg_dsn: str) -> None:
    assert isinstance(open_store(tmp_path / "s"), Store)
    assert is_store_url("postgres://x/y")
    assert not is_store_url(str(tmp_path))
    s = open_store(pg_dsn, schema="other_schema")
    assert isinstance(s, PostgresStore)
    s.open("r").close()
    assert rows(pg_dsn, "SELECT run_id FROM other_schema.runs") == [("r",)]
    with pytest.raises(ValueError, match="schema"):
        PostgresStore(pg_dsn, schema="x; DROP TABLE y")


def test_the_checkpoint_package_does_not_import_psycopg(children: Children) -> None:
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, crashpoint.checkpoint; print('psycopg' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_run_semantics_hold_end_to_end(store: PostgresStore) -> None:
    with open_run(store, "r", steps=["a", "b"]) as run:
        assert run.step("a", lambda: 1) == 1
    calls = []
    with open_run(store, "r", steps=["a", "b"]) as run:
        assert run.step("a", lambda: calls.append("a")) == 1
        run.step("b", lambda: calls.append("b") or 2)
        run.finish({"ok": True})
    assert calls == ["b"]
    assert store.read("r", reducer=run_reducer).state["status"] == "completed"
    assert [r.status for r in store.runs()] == ["completed"]


HOLDER = """
import sys, time
from crashpoint.checkpoint import PostgresStore
store = PostgresStore(sys.argv[1], worker="holder", lease_seconds=float(sys.argv[2]))
j = store.open("r")
j.append({"by": "holder"})
print("ready", j.generation, flush=True)
while True:
    time.sleep(60)
"""


def test_a_killed_holder_loses_its_lease_and_another_worker_takes_the_run(
    children: Children, tmp_path: Path, pg_dsn: str
) -> None:
    """A real process holds the lease (heartbeating), is killed -9; once its lease expires on
    the server's clock, another worker opens the run under a new generation."""
    import signal

    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    child = children.python(script, pg_dsn, "1.0")
    assert child.read_line(timeout=60) == "ready 1", child.stderr_text()
    # as if the holder ran on another machine: no shortcut for a dead local process, only
    # the expiry on the server's clock lets another worker in
    rows(pg_dsn, "UPDATE crashpoint.leases SET local = NULL RETURNING 1")
    other = PostgresStore(pg_dsn, worker="other", lease_seconds=1.0)
    first = other.lease("r")
    assert first is not None
    assert first.holder == "holder"
    # the heartbeat renews it: the expiry moves on, and it never lapses meanwhile
    wait_for(
        lambda: other.lease("r").expires_at > first.expires_at + 0.5,  # type: ignore[union-attr]
        what="a heartbeat renewing the lease",
    )
    with pytest.raises(RunLocked, match="holder"):
        other.open("r")
    assert not other.lease("r").expired  # type: ignore[union-attr]
    child.kill_tree(signal.SIGKILL)
    wait_for(
        lambda: other.lease("r").expired,  # type: ignore[union-attr]
        what="the dead holder's lease to expire",
    )
    with other.open("r") as j:
        assert j.generation == 2
        j.append({"by": "other"})
    assert other.read("r").state == {"records": [{"by": "holder"}, {"by": "other"}]}
    other.close()


def test_the_heartbeat_notices_a_stolen_lease(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn, worker="a", lease_seconds=1.0)
    with s.open("r") as j:
        s.take_over("r", "b")
        wait_for(lambda: j.lease_lost, what="the heartbeat to see the lease gone")
        with pytest.raises(LeaseLost):
            j.append(1)
    assert s.lease("r").holder == "b"  # type: ignore[union-attr]  # never released by a loser
    s.close()


def test_a_restart_on_the_same_machine_takes_a_dead_holders_lease_at_once(
    children: Children, tmp_path: Path, pg_dsn: str
) -> None:
    """kill -9, then restart on the same machine: the dead holder (same kernel boot, same pid
    namespace, pid gone) does not make the restart wait out the 30 s lease."""
    import signal

    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    child = children.python(script, pg_dsn, "30")
    assert child.read_line(timeout=60) == "ready 1", child.stderr_text()
    other = PostgresStore(pg_dsn, worker="other")
    with pytest.raises(RunLocked):  # alive: refused
        other.open("r")
    child.kill_tree(signal.SIGKILL)
    with other.open("r", lock_timeout=10) as j:
        assert j.generation == 2
    other.close()


def test_the_cli_takes_a_postgres_url(pg_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    from crashpoint.cli import main

    s = PostgresStore(pg_dsn, worker="w-cli")
    with open_run(s, "done") as run:
        run.step("a", lambda: 1)
        run.finish("ok")
    j = s.open("held")
    j.append({"x": 1})
    try:
        assert main(["checkpoints", "--store", pg_dsn, "list"]) == 0
        out = capsys.readouterr().out
        assert "HOLDER" in out
        held = next(ln for ln in out.splitlines() if ln.startswith("held"))
        assert held.split()[-1] == "w-cli"
        assert " yes " in held
        assert main(["checkpoints", "--store", pg_dsn, "list", "--json"]) == 0
        got = {r["run_id"]: r for r in json.loads(capsys.readouterr().out)}
        assert got["held"]["holder"] == "w-cli"
        assert got["held"]["locked"] is True
        assert got["done"]["status"] == "completed"
        assert got["done"]["steps_done"] == 1
    finally:
        j.close()
    assert main(["checkpoints", "--store", pg_dsn, "verify"]) == 0
    capsys.readouterr()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE crashpoint.records SET frame = overlay(frame placing "
            "'\\x00'::bytea from 18 for 1) WHERE run_id = 'done' AND seq = 1"
        )
    assert main(["checkpoints", "--store", pg_dsn, "verify"]) == 1
    out = capsys.readouterr().out
    assert "/done at byte 1: record #1" in out
    assert main(["checkpoints", "--store", pg_dsn, "prune", "--keep", "0"]) == 0


def test_claim_skips_a_run_another_claimer_has_locked(pg_dsn: str) -> None:
    """SKIP LOCKED, not waiting: while another transaction holds run a's row (a claimer in
    the middle of taking it), a claim returns b at once instead of blocking on a."""
    s = PostgresStore(pg_dsn)
    for rid in ("a", "b"):
        with s.open(rid) as j:
            j.set_meta(status="running")
    rows(
        pg_dsn,
        "UPDATE crashpoint.runs SET updated = now() - interval '1 hour' "
        "WHERE run_id = 'a' RETURNING 1",
    )  # a is first in line
    with psycopg.connect(pg_dsn) as other:
        other.execute("SELECT 1 FROM crashpoint.runs WHERE run_id = 'a' FOR UPDATE")
        assert s.claim("w", limit=2) == [("b", 2)]
    assert s.claim("w2", limit=2) == [("a", 2)]  # released: now claimable
    s.close()


def test_appending_writes_only_the_new_record(pg_dsn: str) -> None:
    """O(N) per run: without snapshots, every byte written is a record row's frame, once."""
    s = PostgresStore(pg_dsn, snapshots=SnapshotPolicy(enabled=False))
    with s.open("r") as j:
        for i in range(100):
            j.append({"i": i, "pad": "x" * i})
    [(total, n)] = rows(pg_dsn, "SELECT sum(octet_length(frame)), count(*) FROM crashpoint.records")
    assert n == 100
    assert s.bytes_written == total
    assert s.usage() == total
    s.close()


# -- issue 25: a lease bound to a process instance, a rollback that deletes nothing, dead
#    letters through the API and the CLI


def test_one_worker_id_in_two_stores_is_still_one_writer(pg_dsn: str) -> None:
    """The lease binds a process instance, not a name: a second store (a second process, in
    effect) with the same worker id is refused while the first holds the run."""
    a = PostgresStore(pg_dsn, worker="w")
    b = PostgresStore(pg_dsn, worker="w")
    assert a.instance != b.instance
    with a.open("r") as j:
        j.append(1)
        with pytest.raises(RunLocked, match="another process"):
            b.open("r", lock_timeout=0.2)
        assert a.lease("r").instance == a.instance  # type: ignore[union-attr]
    with b.open("r") as j:  # released: b takes it (a new generation)
        assert j.generation == 2
        assert [j.append(2)] == [2]
    a.close()
    b.close()


def test_a_claim_is_adopted_by_one_process_at_a_time_and_handed_back(pg_dsn: str) -> None:
    """A fleet worker's claim (no instance bound) is adopted by the first process of that
    worker id; the second waits; the first one's close hands it back, so the worker's next
    process (a multi-process agent) adopts it at the same generation."""
    s = PostgresStore(pg_dsn, worker="w")
    s.open("r").close()
    [(rid, gen)] = s.claim("w")
    lease = s.lease(rid)
    assert lease is not None
    assert lease.instance == ""
    a = PostgresStore(pg_dsn, worker="w")
    b = PostgresStore(pg_dsn, worker="w")
    ja = a.open(rid)
    assert ja.adopted
    assert ja.generation == gen
    with pytest.raises(RunLocked, match="another process"):
        b.open(rid)
    ja.close()
    after = s.lease(rid)
    assert after is not None
    assert (after.holder, after.generation, after.instance) == ("w", gen, "")
    with b.open(rid) as jb:
        assert jb.adopted
        assert jb.generation == gen
        jb.append("x")
    assert s.renew(rid, "w", gen)  # the worker still holds its claim
    for x in (s, a, b):
        x.close()


def test_a_writer_whose_instance_was_replaced_is_fenced(pg_dsn: str) -> None:
    """Defence in depth: a write checks the lease's instance too, not only its generation."""
    s = PostgresStore(pg_dsn, worker="w")
    j = s.open("r")
    j.append(1)
    rows(pg_dsn, "UPDATE crashpoint.leases SET instance = 'someone-else' RETURNING 1")
    with pytest.raises(LeaseLost, match="another process"):
        j.append(2)
    j.close()
    assert s.read("r").state == {"records": [1]}
    s.close()


def test_a_reused_pid_is_a_dead_holder() -> None:
    """The lease's local key carries the holder's start time: a live pid whose process started
    at another time is a reused pid, and its lease may be taken at once."""
    import os

    from crashpoint.checkpoint.postgres._store import _local_dead, _local_key

    me = _local_key()
    assert me is not None
    assert "@" in me
    assert not _local_dead(me)  # this process: alive
    parent = _local_key(os.getppid())
    assert parent is not None
    assert not _local_dead(parent)
    assert _local_dead(parent.rsplit("@", 1)[0] + "@1")  # same pid, another start: reused
    assert not _local_dead("another-boot:1:" + me.rsplit(":", 1)[1])  # another machine


def test_rollback_past_damage_moves_rows_aside_and_deletes_none(pg_dsn: str) -> None:
    """on_corrupt='rollback' keeps the valid prefix; the damaged record and the acknowledged
    records after it are moved, bytes intact, to the damaged table: never deleted."""
    s = PostgresStore(pg_dsn, snapshots=SnapshotPolicy(enabled=False))
    with s.open("r") as j:
        for i in range(5):
            j.append({"i": i})
    before = dict(rows(pg_dsn, "SELECT seq, frame FROM crashpoint.records ORDER BY seq"))
    rows(
        pg_dsn,
        "UPDATE crashpoint.records SET frame = overlay(frame placing '\\x00'::bytea "
        "from 18 for 1) WHERE seq = 3 RETURNING 1",
    )
    damaged3 = rows(pg_dsn, "SELECT frame FROM crashpoint.records WHERE seq = 3")[0][0]
    r = PostgresStore(pg_dsn, on_corrupt="rollback")
    with r.open("r") as j:
        assert j.seq == 2
        assert j.recovery.lost_from_seq == 3
        assert [m.split()[-5:-3] for m in j.recovery.moved_aside] == [
            ["record", "#3"],
            ["record", "#4"],
            ["record", "#5"],
        ]
        assert j.append({"i": "new"}) == 3
    got = rows(pg_dsn, "SELECT seq, kind, frame, reason FROM crashpoint.damaged ORDER BY seq, kind")
    assert [(seq, kind) for seq, kind, _f, _r in got] == [
        (3, "record"),
        (4, "record"),
        (5, "record"),
    ]
    assert bytes(got[0][2]) == bytes(damaged3)
    assert [bytes(f) for _s, _k, f, _r in got[1:]] == [bytes(before[4]), bytes(before[5])]
    assert "record #3" in got[0][3]
    assert [x["i"] for x in r.read("r").state["records"]] == [0, 1, "new"]
    r.remove("r")  # the run's moved-aside rows go with it
    assert rows(pg_dsn, "SELECT count(*) FROM crashpoint.damaged") == [(0,)]
    s.close()
    r.close()


def test_dead_letters_are_listed_retried_and_cleared(pg_dsn: str) -> None:
    from crashpoint.checkpoint.postgres import submit
    from crashpoint.errors import RunStateError

    s = PostgresStore(pg_dsn)
    for rid in ("p", "ok"):
        submit(s, rid)
    assert s.record_attempt("p", "boom") == 1
    s.dead_letter("p", "failed on all 1 attempts; last: boom")
    assert s.dead_lettered() == [("p", 1, "failed on all 1 attempts; last: boom")]
    assert [rid for rid, _ in s.claim("w", limit=5)] == ["ok"]  # never the dead letter
    with pytest.raises(RunStateError, match="not dead-lettered"):
        s.retry_dead_letter("ok")
    with pytest.raises(RunNotFound):
        s.retry_dead_letter("nope")
    assert s.retry_dead_letter("p") == 1
    assert s.dead_lettered() == []
    assert s.rows("p") == 0  # the journal is untouched
    [(rid, gen)] = s.claim("w2")
    assert rid == "p"
    s.dead_letter("p", "again")
    with pytest.raises(RunLocked):  # a live lease holds it: nothing changes
        s.clear_dead_letter("p")
    s.release("p", "w2", gen)
    with pytest.raises(RunStateError):
        s.clear_dead_letter("ok")
    s.clear_dead_letter("p")
    assert not s.exists("p")
    assert s.exists("ok")
    s.close()


def test_the_cli_lists_retries_and_clears_dead_letters(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from crashpoint.checkpoint.postgres import submit
    from crashpoint.cli import main

    s = PostgresStore(pg_dsn)
    for rid in ("a", "b", "fine"):
        submit(s, rid)
        if rid != "fine":
            s.record_attempt(rid, "exit 1: boom")
            s.dead_letter(rid, "failed on all 1 attempts; last: exit 1: boom")
    with open_run(s, "sup", steps=["x"]) as run:  # a supervisor's dead letter: in the journal
        run.journal.append({"t": "finish", "status": "dead", "reason": "failed 3x"})
        run.journal.set_meta(status="dead", reason="failed 3x", resumes=3)
    base = ["checkpoints", "--store", pg_dsn, "dead"]
    assert main(base) == 1
    out = capsys.readouterr().out
    assert "a: dead-lettered by a fleet after 1 attempt: failed on all 1 attempts" in out
    assert "sup: dead-lettered by a supervisor after 3 attempts: failed 3x" in out
    assert "fine" not in out
    assert main([*base, "--retry", "fine"]) == 2  # not a dead letter: refused, nothing changes
    assert "not dead-lettered" in capsys.readouterr().err
    assert main([*base, "--retry", "sup"]) == 2
    assert "rollback" in capsys.readouterr().err
    assert len(s.dead_lettered()) == 2
    assert main([*base, "--retry", "a", "--clear", "b", "sup"]) == 0
    out = capsys.readouterr().out
    assert "a: retried (it had 1 attempt)" in out
    assert "b: cleared" in out
    assert s.dead_lettered() == []
    assert not s.exists("b")
    assert not s.exists("sup")
    assert sorted(rid for rid, _ in s.claim("w", limit=5)) == ["a", "fine"]
    assert main([*base, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    s.close()


def test_the_watchdog_cuts_only_the_socket_it_was_armed_for() -> None:
    """Past its deadline the watchdog shuts the armed socket down (the blocked reader sees
    EOF); a socket whose fd number was reused since (another inode) is left alone."""
    import os
    import socket

    from crashpoint.checkpoint.postgres._store import _WATCHDOG, _cut

    class Conn:
        _cp_fired = False

    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        other = os.fstat(c.fileno())
        _cut(a.fileno(), (other.st_dev, other.st_ino))  # a's fd, c's inode: a reused fd
        b.sendall(b"x")
        assert a.recv(1) == b"x"  # untouched
        conn = Conn()
        start = time.monotonic()
        _WATCHDOG.arm(a.fileno(), 0.3, conn)  # type: ignore[arg-type]
        assert a.recv(1) == b""  # blocked until the watchdog shut it down
        assert 0.2 < time.monotonic() - start < 5
        assert conn._cp_fired
        key = _WATCHDOG.arm(c.fileno(), 0.3, Conn())  # type: ignore[arg-type]
        _WATCHDOG.disarm(key)  # the call came back in time: nothing is cut
        time.sleep(0.5)
        d.sendall(b"y")
        assert c.recv(1) == b"y"
    finally:
        for s in (a, b, c, d):
            s.close()
