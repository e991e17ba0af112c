"""File operations swept, not drawn: real agents, real kills, real files.

For each agent the golden run's file operations are recorded, then each operation gets an
attempt armed to be killed exactly there: the kill must land at that operation (the trace or
the landing line says so), every operation is hit once, and the files left on disk are the
ones a crash at that point leaves. Agents: a Python agent saving JSON with temp + rename
(through strace, and through the audit hook when strace is switched off), a POSIX shell
agent (``printf >`` and ``mv``), a Python agent writing with sqlite3 (writes done in C), and
ones where the kill cannot land where planned, which ``landed`` must say.

Every process is started by the ``children`` fixture (own session, tree killed and reaped).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest

from crashpoint.faults import _strace
from crashpoint.faults._fileops import (
    Armed,
    FileOp,
    Watch,
    arm,
    landed,
    op_of,
    record_golden,
    recorder,
)

OK, WHY = _strace.available()
needs_strace = pytest.mark.skipif(not OK, reason=f"strace cannot trace here: {WHY}")
SH = shutil.which("sh") or "/bin/sh"

JSON_AGENT = textwrap.dedent("""
    import json, os, sys
    d, steps = sys.argv[1], int(sys.argv[2])
    state = os.path.join(d, "ckpt.json")
    n = 0
    if os.path.exists(state):
        with open(state) as f:
            n = json.load(f)["n"]
    while n < steps:
        n += 1
        tmp = state + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"n": n}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, state)
    print("done", n)
""")

SHELL_AGENT = textwrap.dedent("""
    set -e
    d="$1"
    n=0
    if [ -f "$d/s.json" ]; then n=$(cat "$d/s.json"); fi
    while [ "$n" -lt 2 ]; do
      n=$((n + 1))
      printf '%d' "$n" > "$d/s.tmp"
      mv "$d/s.tmp" "$d/s.json"
    done
    echo done
""")

SQLITE_AGENT = textwrap.dedent("""
    import os, sqlite3, sys
    db = sqlite3.connect(os.path.join(sys.argv[1], "db.sqlite"))
    db.execute("create table t (x)")
    db.commit()
    for i in range(3):
        db.execute("insert into t values (?)", (i,))
        db.commit()
    print("rows", db.execute("select count(*) from t").fetchone()[0])
""")

THREAD_AGENT = textwrap.dedent("""
    import os, sys, threading
    fd = os.open(os.path.join(sys.argv[1], "f"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.write(fd, b"m")
    def more():
        os.write(fd, b"t")
        os.write(fd, b"t")
    t = threading.Thread(target=more)
    t.start()
    t.join()
    print("done")
""")


def script(tmp_path: Path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def start_env(armed: Armed) -> dict[str, str]:
    base = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    return armed.environ(base)


def run(children, armed: Armed, argv: list[str], *, watch: bool = False) -> int:
    """Run one attempt to its end; with ``watch`` the agent's whole process group is killed
    as soon as the armed kill landed (what the harness does)."""
    child = children.spawn(armed.wrap(argv), env=start_env(armed))
    w = Watch(armed, lambda: os.killpg(child.pid, signal.SIGKILL)) if watch else None
    try:
        return child.wait(60)
    finally:
        if w is not None:
            w.stop()


def golden_ops(children, tmp_path: Path, argv_for, *, use_strace: bool) -> list[FileOp]:
    state = tmp_path / "golden"
    state.mkdir()
    rec = recorder(str(tmp_path / "golden-run"), use_strace=use_strace)
    assert run(children, rec, argv_for(state)) == 0
    return record_golden(rec, {"state_dir": str(state)})


def sweep(
    children,
    tmp_path: Path,
    ops: list[FileOp],
    argv_for,
    check,
    *,
    use_strace: bool,
    watch: bool = False,
) -> list[str]:
    """Arm a kill at each operation in turn; return where each landed."""
    where = []
    for i, op in enumerate(ops):
        state = tmp_path / f"trial-{i}"
        state.mkdir()
        a = arm(
            op,
            {"state_dir": str(state)},
            str(tmp_path / f"trial-{i}-attempt-1"),
            use_strace=use_strace,
        )
        rc = run(children, a, argv_for(state), watch=watch)
        land = landed(a, attempt=1)
        assert land.fired, f"{op.label()}: {land.why_not}"
        assert land.why_not == ""
        if use_strace:  # the one call killed is this operation, on the trial's file
            killed = [c for c in _strace.parse(a.trace) if c.result is None]
            assert [(op_of(c), c.path) for c in killed] == [
                (op.op, op.path.replace("{state_dir}", str(state)))
            ], op.label()
        else:
            [line] = (tmp_path / f"trial-{i}-attempt-1.landing.jsonl").read_text().splitlines()
            assert json.loads(line)["n"] == op.n
        check(state, op, rc, ops[: i + 1])
        where.append(land.where)
    return where


# -- (a), (b): a Python agent saving JSON with temp + rename --------------------------------------


def json_argv(tmp_path: Path, steps: int = 3):
    agent = script(tmp_path, "agent.py", JSON_AGENT)
    return lambda state: [sys.executable, agent, str(state), str(steps)]


def json_disk(state: Path, op: FileOp, rc: int, _done: list[FileOp]) -> None:
    """A kill before the k-th save's operation leaves save k-1 in ckpt.json, and ckpt.json.tmp
    as far as save k got."""
    assert rc == -signal.SIGKILL, op.label()
    ckpt, tmp = state / "ckpt.json", state / "ckpt.json.tmp"
    saved = json.loads(ckpt.read_text())["n"] if ckpt.exists() else 0
    assert saved == op.n - 1, op.label()
    if op.op.startswith(("open", "openat")):
        assert not tmp.exists(), op.label()  # killed before the open: not even created
    elif op.op == "write":
        assert tmp.read_text() == "", op.label()  # created and truncated, nothing written
    else:  # fsync, rename: written, not yet renamed
        assert json.loads(tmp.read_text()) == {"n": op.n}, op.label()


@needs_strace
def test_a_sweep_kills_a_json_agent_once_at_each_file_operation(tmp_path: Path, children) -> None:
    argv_for = json_argv(tmp_path)
    ops = golden_ops(children, tmp_path, argv_for, use_strace=True)
    per_save = [
        "openat(w) {state_dir}/ckpt.json.tmp",
        "write {state_dir}/ckpt.json.tmp",
        "fsync {state_dir}/ckpt.json.tmp",
        "rename {state_dir}/ckpt.json.tmp -> {state_dir}/ckpt.json",
    ]
    assert [o.label() for o in ops] == [f"{s} #{k}" for k in (1, 2, 3) for s in per_save]
    assert sweep(children, tmp_path, ops, argv_for, json_disk, use_strace=True) == [
        o.label() for o in ops
    ]  # every operation hit, once, in order


def test_without_strace_the_audit_hook_sweeps_a_python_agent(
    tmp_path: Path, children, monkeypatch
) -> None:
    monkeypatch.setenv("CRASHPOINT_NO_STRACE", "1")
    use_strace, why = _strace.available()
    assert (use_strace, why) == (False, "disabled by CRASHPOINT_NO_STRACE")
    argv_for = json_argv(tmp_path)
    ops = golden_ops(children, tmp_path, argv_for, use_strace=use_strace)
    assert [o.label() for o in ops] == [
        s
        for k in (1, 2, 3)
        for s in (
            f"open(w) {{state_dir}}/ckpt.json.tmp #{k}",
            f"rename {{state_dir}}/ckpt.json.tmp -> {{state_dir}}/ckpt.json #{k}",
        )
    ]
    assert all(o.via == "audit" for o in ops)
    assert sweep(children, tmp_path, ops, argv_for, json_disk, use_strace=use_strace) == [
        o.label() for o in ops
    ]


# -- (c): a shell agent ---------------------------------------------------------------------------


def shell_disk(state: Path, op: FileOp, rc: int, done: list[FileOp]) -> None:
    it = sum(1 for o in done if o.op.startswith("open"))  # the loop's pass the kill hit
    assert rc in (-signal.SIGKILL, 128 + signal.SIGKILL), op.label()  # mv's death ends sh
    saved = state / "s.json"
    assert (saved.read_text() if saved.exists() else "") == ("" if it == 1 else str(it - 1))
    tmp = state / "s.tmp"
    if op.op.startswith("open"):
        assert not tmp.exists(), op.label()
    elif op.op == "write":
        assert tmp.read_text() == "", op.label()
    else:
        assert op.op.startswith("rename"), op.label()
        assert tmp.read_text() == str(it), op.label()


@needs_strace
def test_a_sweep_kills_a_shell_agent_at_each_file_operation(tmp_path: Path, children) -> None:
    agent = script(tmp_path, "agent.sh", SHELL_AGENT)

    def argv_for(state: Path) -> list[str]:
        return [SH, agent, str(state)]

    ops = golden_ops(children, tmp_path, argv_for, use_strace=True)
    shapes = [(o.op if not o.op.startswith("rename") else "rename*", o.path, o.n) for o in ops]
    # the second mv may use another rename call (renameat2 refused with EEXIST, then renameat)
    assert [(op, path) for op, path, _ in shapes] == [
        ("openat(w)", "{state_dir}/s.tmp"),
        ("write", "{state_dir}/s.tmp"),
        ("rename*", "{state_dir}/s.tmp"),
    ] * 2
    assert all(o.path2 == "{state_dir}/s.json" for o in ops if o.op.startswith("rename"))
    assert sweep(children, tmp_path, ops, argv_for, shell_disk, use_strace=True, watch=True) == [
        o.label() for o in ops
    ]


# -- (d): SQLite, written from C ------------------------------------------------------------------


@needs_strace
def test_sqlite_writes_from_c_are_operations_and_a_kill_lands_in_a_commit(
    tmp_path: Path, children
) -> None:
    agent = script(tmp_path, "agent.py", SQLITE_AGENT)

    def argv_for(state: Path) -> list[str]:
        return [sys.executable, agent, str(state)]

    ops = golden_ops(children, tmp_path, argv_for, use_strace=True)
    db_writes = [o for o in ops if (o.op, o.path) == ("pwrite64", "{state_dir}/db.sqlite")]
    journal = [o for o in ops if o.path == "{state_dir}/db.sqlite-journal"]
    assert len(db_writes) >= 4  # at least one page write per commit
    assert {"openat(w)", "pwrite64", "fdatasync", "unlink"} <= {o.op for o in journal}
    assert any(o.op == "fdatasync" and o.path == "{state_dir}" for o in ops)  # the folder

    # the audit hook cannot see any of it: that is why strace is used
    audit = tmp_path / "audit"
    audit.mkdir()
    assert golden_ops(children, audit, argv_for, use_strace=False) == []

    last_unlink = [o for o in journal if o.op == "unlink"][-1]
    for i, op in enumerate([db_writes[-1], last_unlink]):
        state = tmp_path / f"trial-{i}"
        state.mkdir()
        a = arm(op, {"state_dir": str(state)}, str(tmp_path / f"trial-{i}-att"), use_strace=True)
        assert run(children, a, argv_for(state)) == -signal.SIGKILL
        land = landed(a, attempt=1)
        assert land == (True, op.label(), ""), land.why_not
        # killed inside the last commit: its hot journal rolls the row back on open
        assert (state / "db.sqlite-journal").exists()
        with sqlite3.connect(state / "db.sqlite") as db:
            assert db.execute("select count(*) from t").fetchone()[0] == 2


# -- (e), (f): kills that cannot land where planned ----------------------------------------------


@pytest.mark.parametrize(
    "use_strace",
    [pytest.param(True, marks=needs_strace, id="strace"), pytest.param(False, id="audit")],
)
def test_an_operation_the_attempt_never_reaches_is_not_fired(
    tmp_path: Path, children, use_strace: bool
) -> None:
    ops = golden_ops(children, tmp_path, json_argv(tmp_path, steps=3), use_strace=use_strace)
    third = [o for o in ops if o.op.startswith("open") and o.n == 3]
    assert len(third) == 1
    state = tmp_path / "trial"
    state.mkdir()
    a = arm(third[0], {"state_dir": str(state)}, str(tmp_path / "trial-att"), use_strace=use_strace)
    assert run(children, a, json_argv(tmp_path, steps=1)(state)) == 0  # it saves only once
    assert not a.landing_seen()
    fired, where, why = landed(a, attempt=1)
    assert (fired, where) == (False, "")
    assert (
        why == f"the agent never did {third[0].op} {{state_dir}}/ckpt.json.tmp a 3rd time "
        "in attempt 1: it did it once"
    )


@needs_strace
def test_a_kill_counted_in_another_thread_is_reported_not_passed(tmp_path: Path, children) -> None:
    agent = script(tmp_path, "agent.py", THREAD_AGENT)

    def argv_for(state: Path) -> list[str]:
        return [sys.executable, agent, str(state)]

    ops = golden_ops(children, tmp_path, argv_for, use_strace=True)
    writes = [o for o in ops if o.op == "write"]
    assert [(o.n, o.when, o.shared) for o in writes] == [(1, 1, True), (2, 1, True), (3, 2, True)]
    results = {}
    for op in writes[1:]:
        state = tmp_path / f"trial-{op.n}"
        state.mkdir()
        a = arm(op, {"state_dir": str(state)}, str(tmp_path / f"trial-{op.n}-att"), use_strace=True)
        assert run(children, a, argv_for(state)) == -signal.SIGKILL
        results[op.n] = landed(a, attempt=1)
    # write #2 was the thread's 1st: strace's when=1 fires at the main thread's write first
    fired, where, why = results[2]
    assert (fired, where) == (False, "write {state_dir}/f #1")
    assert "not at write {state_dir}/f #2" in why
    assert "per process and thread" in why
    # write #3 is the thread's 2nd, and no other thread writes twice: it lands
    assert results[3] == (True, "write {state_dir}/f #3", "")


def test_the_injected_hook_still_imports_the_agents_own_sitecustomize(
    tmp_path: Path, children
) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import sys\nsys.stderr.write('theirs ran\\n')\n")
    state = tmp_path / "golden"
    state.mkdir()
    rec = recorder(str(tmp_path / "g"), use_strace=False)
    env = rec.environ({"PYTHONPATH": str(theirs)})
    agent = script(tmp_path, "agent.py", JSON_AGENT)
    child = children.spawn([sys.executable, agent, str(state), "1"], env=env)
    assert child.wait(60) == 0
    assert "theirs ran" in child.stderr_text()
    assert [o.label() for o in record_golden(rec, {"state_dir": str(state)})] == [
        "open(w) {state_dir}/ckpt.json.tmp #1",
        "rename {state_dir}/ckpt.json.tmp -> {state_dir}/ckpt.json #1",
    ]
