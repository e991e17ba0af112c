"""File operations as pure logic: identity, JSON, placeholders, what a golden trace yields
(strace's per-thread ``when`` count, relative spellings), and what ``landed`` says about a
trial's trace or audit log. Real processes are in tests/crash/test_fileops.py."""

from __future__ import annotations

import json
import os
import textwrap
import threading
from pathlib import Path

import pytest

from crashpoint.faults import _strace
from crashpoint.faults._fileops import (
    INJECT_DIR,
    Armed,
    FileOp,
    Watch,
    arm,
    explain_empty,
    golden_times,
    landed,
    record_golden,
    recorder,
)

G = "/g/state"
ROOTS = {"state_dir": G, "workdir": "/g"}


def golden(tmp_path: Path, text: str, roots: dict[str, str] = ROOTS) -> list[FileOp]:
    f = tmp_path / "golden.strace"
    f.write_text(textwrap.dedent(text).lstrip("\n"))
    return record_golden(str(f), roots)


def test_identity_is_op_path_and_occurrence() -> None:
    a = FileOp("write", "{state_dir}/a", 2, syscall="write", when=5)
    b = FileOp("write", "{state_dir}/a", 2, syscall="write", when=1, shared=True)
    assert a == b
    assert hash(a) == hash(b)
    assert a != FileOp("write", "{state_dir}/a", 3)
    assert a.label() == "write {state_dir}/a #2"
    r = FileOp("rename", "{state_dir}/a.tmp", 1, path2="{state_dir}/a")
    assert r.label() == "rename {state_dir}/a.tmp -> {state_dir}/a #1"


def test_json_round_trip_keeps_every_field() -> None:
    ops = [
        FileOp(
            "openat(w)",
            "{state_dir}/x.tmp",
            2,
            syscall="openat",
            when=3,
            rel=("x.tmp",),
            shared=True,
        ),
        FileOp("rename", "{workdir}/a", 1, path2="{workdir}/b", via="audit"),
    ]
    for op in ops:
        back = FileOp.from_json(json.loads(json.dumps(op.to_json())))
        assert (back, back.path2, back.via, back.syscall, back.when, back.rel, back.shared) == (
            op,
            op.path2,
            op.via,
            op.syscall,
            op.when,
            op.rel,
            op.shared,
        )


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"op": "write", "n": 1, "syscall": "write", "when": 1}, "key 'path'"),
        ({"op": "write", "path": "/abs/x", "n": 1, "syscall": "write", "when": 1}, "placeholder"),
        (
            {"op": "write", "path": "{state_dir}x", "n": 1, "syscall": "write", "when": 1},
            "a '/' must follow",
        ),
        (
            {
                "op": "write",
                "path": "{state_dir}/../../etc/passwd",
                "n": 1,
                "syscall": "write",
                "when": 1,
            },
            "'..'",
        ),
        (
            {"op": "write", "path": "{state_dir}/a", "n": 0, "syscall": "write", "when": 1},
            "key 'n'",
        ),
        (
            {"op": "write", "path": "{state_dir}/a", "n": True, "syscall": "write", "when": 1},
            "key 'n'",
        ),
        ({"op": "write", "path": "{state_dir}/a", "n": 1}, "key 'syscall'"),
        ({"op": "write", "path": "{state_dir}/a", "n": 1, "via": "magic"}, "key 'via'"),
        ({"op": "", "path": "{state_dir}/a", "n": 1, "via": "audit"}, "key 'op'"),
        (
            {
                "op": "write",
                "path": "{state_dir}/a",
                "n": 1,
                "syscall": "write",
                "when": 1,
                "rel": ["/abs"],
            },
            "absolute",
        ),
        ([1, 2], "a mapping"),
    ],
)
def test_a_bad_plan_entry_says_where_and_what(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        FileOp.from_json(bad, where="plan.json:faults[0]")  # type: ignore[arg-type]
    assert "plan.json:faults[0]" in str(info.value)


def test_a_golden_trace_yields_the_mutating_operations_under_the_folders(tmp_path: Path) -> None:
    ops = golden(
        tmp_path,
        r"""
        10 openat(AT_FDCWD</g>, "/usr/lib/python3/os.py", O_RDONLY) = 3</usr/lib/python3/os.py>
        10 openat(AT_FDCWD</g>, "/g/state/c", O_RDONLY) = -1 ENOENT (No such file or directory)
        10 openat(AT_FDCWD</g>, "state/c.tmp", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</g/state/c.tmp>
        10 write(3</g/state/c.tmp>, "", 9) = 9
        10 write(1<pipe:[55]>, "", 3) = 3
        10 write(4</proc/self/status>, "", 3) = 3
        10 write(5</tmp/elsewhere>, "", 3) = 3
        10 fsync(3</g/state/c.tmp>) = 0
        10 rename("/g/state/c.tmp", "/g/state/c") = 0
        10 unlink("/g/state/missing") = -1 ENOENT (No such file or directory)
        10 openat(AT_FDCWD</g>, "/g/state/c.tmp", O_RDONLY) = -1 ENOENT (No such file or directory)
        10 openat(AT_FDCWD</g>, "/g/state/c.tmp", O_WRONLY|O_CREAT, 0666) = 3</g/state/c.tmp>
        10 clone3({flags=CLONE_VM|CLONE_FS|CLONE_THREAD, ...}, 88) = 11
        11 write(3</g/state/c.tmp>, "", 9) = 9
        10 write(3</g/state/c.tmp>, "", 9) = 9
        10 mkdir("/g/logs", 0777) = 0
        10 rename("/tmp/elsewhere", "/g/state/in") = 0
        10 openat(AT_FDCWD</g>, "/g/state", O_RDONLY|O_DIRECTORY) = 6</g/state>
        10 fdatasync(6</g/state>) = 0
    """,
    )
    rel = ("state/c.tmp",)
    assert [(o.label(), o.syscall, o.when, o.rel, o.shared) for o in ops] == [
        ("openat(w) {state_dir}/c.tmp #1", "openat", 1, rel, False),
        ("write {state_dir}/c.tmp #1", "write", 1, rel, True),
        ("fsync {state_dir}/c.tmp #1", "fsync", 1, rel, False),
        ("rename {state_dir}/c.tmp -> {state_dir}/c #1", "rename", 1, rel, False),
        # strace's when= counts every openat on the file, failed and read-only ones too,
        # and each thread on its own
        ("openat(w) {state_dir}/c.tmp #2", "openat", 3, rel, False),
        ("write {state_dir}/c.tmp #2", "write", 1, rel, True),
        ("write {state_dir}/c.tmp #3", "write", 2, rel, True),
        ("mkdir {workdir}/logs #1", "mkdir", 1, (), False),
        ("rename {state_dir}/in #1", "rename", 1, (), False),  # from outside: by its target
        ("fdatasync {state_dir} #1", "fdatasync", 1, (), False),
    ]


def test_a_timed_golden_trace_says_when_each_operation_started(tmp_path: Path) -> None:
    f = tmp_path / "golden.strace"
    f.write_text(
        textwrap.dedent(
            r"""
            10 1700000000.100000 openat(AT_FDCWD</g>, "/usr/lib/x.py", O_RDONLY) = 3</usr/lib/x.py>
            10 1700000000.200000 openat(AT_FDCWD</g>, "/g/state/t", O_CREAT) = 3</g/state/t>
            10 1700000000.300000 write(3</g/state/t>, "", 9) = 9
            10 1700000000.400000 rename("/g/state/t", "/g/state/c") = 0
            """
        ).lstrip("\n")
    )
    ops = record_golden(str(f), ROOTS)
    assert [o.op for o in ops] == ["openat(w)", "write", "rename"]
    assert golden_times(str(f), ROOTS) == [1700000000.2, 1700000000.3, 1700000000.4]
    untimed = tmp_path / "untimed.strace"
    untimed.write_text('10 rename("/g/state/t", "/g/state/c") = 0\n')
    assert golden_times(str(untimed), ROOTS) == []  # no times: reports place them otherwise


def test_the_most_specific_folder_names_a_path(tmp_path: Path) -> None:
    ops = golden(
        tmp_path, '1 unlink("/g/state/a") = 0\n1 unlink("/g/b") = 0\n1 unlink("/gx/c") = 0\n'
    )
    assert [o.path for o in ops] == ["{state_dir}/a", "{workdir}/b"]


def test_a_folder_reached_through_a_symlink_maps_both_ways(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    ops = golden(
        tmp_path,
        f'''
        1 openat(AT_FDCWD</>, "{link}/a", O_WRONLY|O_CREAT, 0666) = 3<{real}/a>
        1 write(3<{real}/a>, "", 1) = 1
    ''',
        roots={"state_dir": str(link)},
    )
    assert [o.label() for o in ops] == ["openat(w) {state_dir}/a #1", "write {state_dir}/a #1"]
    a = arm(ops[0], {"state_dir": str(link)}, str(tmp_path / "t"), use_strace=True)
    assert set(a.paths) == {f"{link}/a", f"{real}/a"}  # strace's -P compares strings


def test_arming_maps_placeholders_to_the_trials_folders(tmp_path: Path) -> None:
    op = FileOp("openat(w)", "{state_dir}/x.tmp", 2, syscall="openat", when=3, rel=("x.tmp",))
    trial = {"state_dir": str(tmp_path / "t1")}
    s = arm(op, trial, str(tmp_path / "att"), use_strace=True)
    assert s.paths == (str(tmp_path / "t1" / "x.tmp"), "x.tmp")
    assert s.inject == ("openat:signal=KILL:when=3",)
    assert s.syscalls == ("openat",)
    assert s.trace == str(tmp_path / "att.strace")
    assert s.environ({"A": "1"}) == {"A": "1"}
    if _strace.available()[0]:
        argv = s.wrap(["prog"])
        assert "inject=openat:signal=KILL:when=3" in argv
        assert argv[-2:] == ["--", "prog"]
    audit = FileOp("open(w)", "{state_dir}/x.tmp", 2, via="audit")
    b = arm(audit, trial, str(tmp_path / "att"), use_strace=False)
    env = b.environ({"PYTHONPATH": "/theirs", "KEEP": "1"})
    assert env["PYTHONPATH"] == os.pathsep.join([INJECT_DIR, "/theirs"])
    assert env["KEEP"] == "1"
    assert json.loads(env["CRASHPOINT_FILEOP_AT"]) == {
        "op": "open(w)",
        "paths": [str(tmp_path / "t1" / "x.tmp")],
        "n": 2,
    }
    assert env["CRASHPOINT_FILEOP_LOG"] == str(tmp_path / "att.landing.jsonl")
    assert b.wrap(["prog"]) == ["prog"]


def test_arming_refuses_what_cannot_be_armed(tmp_path: Path) -> None:
    op = FileOp("open(w)", "{state_dir}/x", 1, via="audit")
    with pytest.raises(ValueError, match="recorded via audit; arm it with use_strace=False"):
        arm(op, {"state_dir": str(tmp_path)}, str(tmp_path / "a"), use_strace=True)
    with pytest.raises(ValueError, match=r"unknown placeholder \{cache\}.*\{state_dir\}"):
        arm(
            FileOp("open(w)", "{cache}/x", 1, via="audit"),
            {"state_dir": str(tmp_path)},
            str(tmp_path / "a"),
            use_strace=False,
        )


def test_the_recorder_names_its_files(tmp_path: Path) -> None:
    (tmp_path / "g.fileops.jsonl").write_text("stale\n")
    r = recorder(str(tmp_path / "g"), use_strace=False)
    assert r.files == (str(tmp_path / "g.fileops.jsonl"),)
    assert not (tmp_path / "g.fileops.jsonl").exists()  # a stale record is not read back
    assert dict(r.env) == {"CRASHPOINT_FILEOP_RECORD": str(tmp_path / "g.fileops.jsonl")}


def test_an_audit_record_yields_operations(tmp_path: Path) -> None:
    rec = tmp_path / "g.fileops.jsonl"
    lines = [
        {"op": "open(w)", "path": "/g/state/a.tmp", "path2": "", "pid": 1},
        {"op": "rename", "path": "/g/state/a.tmp", "path2": "/g/state/a", "pid": 1},
        {"op": "open(w)", "path": "/elsewhere/x", "path2": "", "pid": 1},
        {"op": "open(w)", "path": "/g/state/a.tmp", "path2": "", "pid": 1},
    ]
    rec.write_text("\n" + "\n".join(map(json.dumps, lines)) + "\nnot json\n")
    ops = record_golden(str(rec), ROOTS)
    assert [(o.label(), o.via) for o in ops] == [
        ("open(w) {state_dir}/a.tmp #1", "audit"),
        ("rename {state_dir}/a.tmp -> {state_dir}/a #1", "audit"),
        ("open(w) {state_dir}/a.tmp #2", "audit"),
    ]


# -- landed, from the evidence ------------------------------------------------------------------

T = "/t/state"


def _armed(tmp_path: Path, op: FileOp, trace: str) -> Armed:
    f = tmp_path / "a.strace"
    f.write_text(textwrap.dedent(trace).lstrip("\n"))
    return Armed("strace", op, (("state_dir", T),), trace=str(f), syscalls=(op.syscall,))


OPEN2 = FileOp("openat(w)", "{state_dir}/x.tmp", 2, syscall="openat", when=2)


def test_landed_when_the_planned_call_was_killed(tmp_path: Path) -> None:
    a = _armed(
        tmp_path,
        OPEN2,
        """
        5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</t/state/x.tmp>
        5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_WRONLY|O_CREAT|O_TRUNC, 0666) = ?
        5 +++ killed by SIGKILL +++
    """,
    )
    assert a.landing_seen()
    assert landed(a, attempt=1) == (True, "openat(w) {state_dir}/x.tmp #2", "")


def test_not_landed_when_the_agent_stopped_short(tmp_path: Path) -> None:
    a = _armed(
        tmp_path,
        OPEN2,
        """
        5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_WRONLY|O_CREAT|O_TRUNC, 0666) = 3</t/state/x.tmp>
        5 +++ exited with 0 +++
    """,
    )
    assert not a.landing_seen()
    assert landed(a, attempt=1) == (
        False,
        "",
        "the agent never did openat(w) {state_dir}/x.tmp a 2nd time in attempt 1: it did it once",
    )


def test_not_landed_when_the_kill_hit_another_occurrence(tmp_path: Path) -> None:
    a = _armed(
        tmp_path,
        OPEN2,
        """
        5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_WRONLY|O_CREAT|O_TRUNC, 0666) = ?
        5 +++ killed by SIGKILL +++
    """,
    )
    fired, where, why = landed(a)
    assert (fired, where) == (False, "openat(w) {state_dir}/x.tmp #1")
    assert "not at openat(w) {state_dir}/x.tmp #2" in why
    assert "per process and thread" in why


def test_not_landed_when_the_kill_hit_a_read(tmp_path: Path) -> None:
    a = _armed(
        tmp_path,
        OPEN2,
        """
        5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_RDONLY) = ?
        5 +++ killed by SIGKILL +++
    """,
    )
    fired, where, why = landed(a)
    assert (fired, where) == (False, "openat {state_dir}/x.tmp")
    assert "not a file operation of the golden run" in why


def test_not_landed_without_a_trace(tmp_path: Path) -> None:
    a = Armed("strace", OPEN2, (("state_dir", T),), trace=str(tmp_path / "none.strace"))
    fired, _, why = landed(a, attempt=2)
    assert not fired
    assert "did not start under strace in attempt 2" in why


def test_not_landed_when_the_audit_hook_never_ran(tmp_path: Path) -> None:
    op = FileOp("open(w)", "{state_dir}/x", 1, via="audit")
    a = arm(op, {"state_dir": str(tmp_path)}, str(tmp_path / "a"), use_strace=False)
    fired, _, why = landed(a, attempt=1)
    assert not fired
    assert "the injected sitecustomize did not run in attempt 1" in why


def test_an_empty_golden_record_is_explained(tmp_path: Path) -> None:
    rec = recorder(str(tmp_path / "g"), use_strace=False)
    assert "sitecustomize never ran" in explain_empty(rec, ROOTS)
    Path(rec.record).write_text("\n")
    why = explain_empty(rec, ROOTS)
    assert "under {state_dir} or {workdir}" in why
    assert "SQLite" in why
    s = Armed("strace", trace=str(tmp_path / "g.strace"))
    assert "did not start under strace" in explain_empty(s, ROOTS)
    Path(s.trace).write_text("1 +++ exited with 0 +++\n")
    assert "changed no file under {state_dir} or {workdir}" in explain_empty(s, ROOTS)


def test_the_watch_sees_a_landing_appended_line_by_line(tmp_path: Path) -> None:
    a = _armed(
        tmp_path,
        OPEN2,
        """
        5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_WRONLY|O_CREAT, 0666) = 3</t/state/x.tmp>
    """,
    )
    landed_now = threading.Event()

    def on_landing() -> None:
        landed_now.set()
        raise ProcessLookupError("the group is gone already")

    w = Watch(a, on_landing, interval=0.001)
    try:
        with open(a.trace, "a") as f:  # a line cut in two, as a live reader may see it
            f.write('5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_WRONLY|O_CREAT, 0666) =')
            f.flush()
            assert not landed_now.wait(0.05)
            f.write(" ?\n5 +++ killed by SIGKILL +++\n")
        assert landed_now.wait(30)
    finally:
        w.stop()
    assert w.fired
    assert isinstance(w.error, ProcessLookupError)


def test_the_watch_stays_quiet_without_a_landing(tmp_path: Path) -> None:
    a = _armed(
        tmp_path,
        OPEN2,
        """
        5 openat(AT_FDCWD</t>, "/t/state/x.tmp", O_WRONLY|O_CREAT, 0666) = 3</t/state/x.tmp>
        5 +++ exited with 0 +++
    """,
    )
    calls: list[int] = []
    w = Watch(a, lambda: calls.append(1), interval=0.001)
    size = os.path.getsize(a.trace)
    try:
        for _ in range(30_000):  # until it has read the whole trace (no duration asserted)
            if w._offset == size:
                break
            threading.Event().wait(0.001)
    finally:
        w.stop()
    assert w._offset == size
    assert (w.fired, calls) == (False, [])


def test_a_file_named_after_its_process_is_named_with_a_star() -> None:
    from crashpoint.faults._fileops import _per_run

    assert _per_run("{state_dir}/.meta.json.2781.tmp", 2781) == "{state_dir}/.meta.json.*.tmp"
    assert _per_run("{state_dir}/2781/x.27810", 2781) == "{state_dir}/2781/x.27810"  # folder,
    assert _per_run("{state_dir}/v12.json", 12) == "{state_dir}/v12.json"  # a number of its own
    # the reference library's mkstemp names carry a random part too: the same name each run
    assert (
        _per_run("{state_dir}/.meta.json.2781.k3x9_a0q.tmp", 2781) == "{state_dir}/.meta.json.*.tmp"
    )
    assert (
        _per_run("{state_dir}/.meta.json.2781.a2781bcd.tmp", 2781) == "{state_dir}/.meta.json.*.tmp"
    )  # the pid inside the random part too
    op = FileOp("write", "{state_dir}/.a.*.tmp", 1, syscall="write", when=1, anywhere=412)
    assert FileOp.from_json(op.to_json()).anywhere == 412
