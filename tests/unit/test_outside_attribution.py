"""Which changes in the system temp folders are the trial's own (``harness/_engine/_outside``):
by an attempt's syscall trace, else by owner and change time; never what a trace rules out.
Made-up snapshots and trace files: nothing here runs an agent or touches /tmp."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crashpoint.harness._engine._outside import (
    BY_OWNER_TIME,
    BY_TRACE,
    Entry,
    Snapshot,
    Window,
    attempt_window,
    attribute,
)

ME, OTHER = 1000, 1001
T0 = 1_700_000_000.0  # the attempt ran from T0 to T0 + 1 s
#: the calls a full disk's trace records (no mkdir, no symlink)
DISK_CALLS = frozenset(
    [
        "open",
        "openat",
        "openat2",
        "creat",
        "write",
        "truncate",
        "ftruncate",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "unlink",
        "unlinkat",
        "close",
    ]
)
#: and a power cut's, or two resumers' (names made and removed too)
ALL_CALLS = DISK_CALLS | {"mkdir", "mkdirat", "rmdir", "symlink", "symlinkat"}


def entry(kind: str = "file", uid: int = ME, at: float = T0 + 0.5, ino: int = 7) -> Entry:
    ns = int(at * 1e9)
    return Entry(ino, ns, 10, uid, ns, kind)


def run(
    now: dict[str, Entry], *windows: Window, before: dict[str, Entry] | None = None
) -> dict[str, Any]:
    snap_before: Snapshot = {"/tmp": before or {}}
    found, others = attribute(snap_before, {"/tmp": now}, windows, ME)
    return {"found": {p: how for p, _new, how in found}, "others": others}


UNTRACED = Window(T0, T0 + 1)


def test_the_agents_user_and_a_change_while_it_ran_attribute_an_untraced_write() -> None:
    out = run({"mine": entry(), "theirs": entry(uid=OTHER), "later": entry(at=T0 + 3)}, UNTRACED)
    assert out == {"found": {"/tmp/mine": BY_OWNER_TIME}, "others": 2}


def test_the_kernels_coarse_clock_is_allowed_a_little_slack() -> None:
    out = run({"early": entry(at=T0 - 0.02), "late": entry(at=T0 + 1.02)}, UNTRACED)
    assert set(out["found"]) == {"/tmp/early", "/tmp/late"}


def test_nothing_ran_nothing_is_attributed() -> None:
    assert run({"x": entry()}) == {"found": {}, "others": 1}


def test_an_unchanged_entry_and_the_harnesss_own_names_are_neither_listed_nor_counted() -> None:
    same = entry(at=T0 - 100)
    out = run({"old": same, "cp-ledger.sock": entry()}, UNTRACED, before={"old": same})
    assert out == {"found": {}, "others": 0}


def test_a_trace_names_what_it_wrote_whatever_the_owner_or_time() -> None:
    w = Window(T0, T0 + 1, traced=True, wrote=frozenset({"/tmp/x"}), calls=ALL_CALLS)
    out = run({"x": entry(uid=OTHER, at=T0 + 50)}, w)
    assert out["found"] == {"/tmp/x": BY_TRACE}


@pytest.mark.parametrize(
    ("kind", "calls", "ruled_out"),
    [
        ("file", DISK_CALLS, True),
        ("dir", DISK_CALLS, False),  # a full disk's trace does not record mkdir
        ("dir", ALL_CALLS, True),
        ("symlink", ALL_CALLS, True),
        ("other", ALL_CALLS, False),  # a socket: bind is never traced
        ("file", frozenset(), False),  # cut short: rules nothing out
    ],
)
def test_a_trace_rules_out_only_what_it_would_have_seen(
    kind: str, calls: frozenset[str], ruled_out: bool
) -> None:
    w = Window(T0, T0 + 1, traced=bool(calls), calls=calls)
    out = run({"x": entry(kind)}, w)
    assert out["found"] == ({} if ruled_out else {"/tmp/x": BY_OWNER_TIME})


@pytest.mark.parametrize(("calls", "ruled_out"), [(ALL_CALLS, True), (DISK_CALLS, False)])
def test_a_folder_changed_in_place_is_ruled_out_by_a_trace_of_every_name_change(
    calls: frozenset[str], ruled_out: bool
) -> None:
    """Another job made a file in an existing folder of /tmp while a traced attempt ran: a
    trace that records mkdir and rmdir too would have shown the agent doing it."""
    old = entry("dir", at=T0 - 100)
    changed = Entry(old.ino, int((T0 + 0.5) * 1e9), 10, ME, int((T0 + 0.5) * 1e9), "dir")
    w = Window(T0, T0 + 1, traced=True, calls=calls)
    found = run({"d": changed}, w, before={"d": old})["found"]
    assert found == ({} if ruled_out else {"/tmp/d": BY_OWNER_TIME})


def test_an_untraced_attempt_still_attributes_what_a_traced_one_ruled_out() -> None:
    traced = Window(T0, T0 + 1, traced=True, calls=ALL_CALLS)
    overlapping = Window(T0 + 0.4, T0 + 0.6)  # the other resumer, say, untraced
    assert run({"x": entry()}, traced, overlapping)["found"] == {"/tmp/x": BY_OWNER_TIME}


# -- reading an attempt's trace ------------------------------------------------------------------

TRACE = """\
41 openat(AT_FDCWD</w>, "/tmp/made", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3</tmp/made>
41 openat(AT_FDCWD</w>, "/tmp/read", O_RDONLY|O_CLOEXEC) = 3</tmp/read>
41 openat(AT_FDCWD</w>, "/tmp/refused", O_WRONLY|O_CREAT, 0666) = -1 EACCES (Permission denied)
41 write(4</dev/shm/seg>, "abc", 3) = 3
41 mkdir("/tmp/tree/sub", 0777) = 0
41 rename("/tmp/from", "/var/tmp/to") = 0
41 openat(AT_FDCWD</w>, "/w/state.json", O_WRONLY|O_CREAT, 0666) = 3</w/state.json>
41 clone(child_stack=NULL, flags=CLONE_CHILD_SETTID|SIGCHLD) = 42
42 unlinkat(AT_FDCWD</w>, "/tmp/gone/x", 0) = 0
42 +++ exited with 0 +++
41 +++ exited with 0 +++
"""


def strace_argv(trace: Path, *opts: str) -> list[str]:
    return ["/usr/bin/strace", *opts, "-o", str(trace), "--", "agent"]


FULL = ("-f", "-q", "-y", "-e", "trace=?open,openat,write,mkdir,rename,unlinkat,?clone")


def test_a_full_trace_names_the_temp_entries_the_attempt_changed(tmp_path: Path) -> None:
    trace = tmp_path / "a.strace"
    trace.write_text(TRACE)
    w = attempt_window(T0, T0 + 1, strace_argv(trace, *FULL), "/w")
    real = {d: str(Path(d).resolve()) for d in ("/tmp", "/var/tmp", "/dev/shm")}
    want = {
        f"{real['/tmp']}/made",
        f"{real['/dev/shm']}/seg",
        f"{real['/tmp']}/tree",
        f"{real['/tmp']}/from",
        f"{real['/var/tmp']}/to",
        f"{real['/tmp']}/gone",
    }
    assert w.wrote == frozenset(p for p in want if Path(p).parent.is_dir())
    assert w.traced
    assert {"open", "openat", "mkdir", "clone"} <= w.calls


@pytest.mark.parametrize(
    ("opts", "why"),
    [
        (FULL[1:], "without -f its children are not traced"),
        (("-P", "/w/state.json", *FULL), "-P traces only the calls on one path"),
    ],
)
def test_a_trace_that_misses_calls_rules_nothing_out(
    tmp_path: Path, opts: tuple[str, ...], why: str
) -> None:
    trace = tmp_path / "a.strace"
    trace.write_text(TRACE)
    w = attempt_window(T0, T0 + 1, strace_argv(trace, *opts), "/w")
    assert not w.traced, why
    assert w.calls == frozenset()


def test_a_trace_ended_before_a_process_it_followed_rules_nothing_out(tmp_path: Path) -> None:
    """strace ended when the agent exited, a helper still running: its later calls are not
    there (no ``+++`` line for it); what the trace does show still counts."""
    trace = tmp_path / "a.strace"
    trace.write_text(TRACE.replace("42 +++ exited with 0 +++\n", ""))
    w = attempt_window(T0, T0 + 1, strace_argv(trace, *FULL), "/w")
    assert not w.traced
    assert w.calls == frozenset()
    assert any(p.endswith("/made") for p in w.wrote)


def test_an_attempt_that_did_not_end_normally_is_only_a_window(tmp_path: Path) -> None:
    trace = tmp_path / "a.strace"
    trace.write_text(TRACE)
    assert attempt_window(T0, T0 + 1, None, "/w") == Window(T0, T0 + 1)
    assert attempt_window(T0, T0 + 1, ["agent", "--flag"], "/w") == Window(T0, T0 + 1)
