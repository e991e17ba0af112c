"""Write points, disk errors and the "did the disk fault fire" verdict, on hand-built traces.

The syscall records are built the way ``_strace.parse`` returns them (absolute ``path``, the
first argument's ``fd``, strace-printed ``args``), so the replay's page and offset arithmetic is
checked exactly; the real-process counterpart is tests/crash/test_disk_points.py.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crashpoint.faults import Syscall, UsageSample
from crashpoint.faults._writes import (
    PAGE,
    DiskError,
    WritePoint,
    confirm,
    disk_errors,
    rlimit_argv,
    write_points,
    write_usage,
)

STATE = "/run/t/state"
_seq = itertools.count(1)


class Trace:
    """Builds a trace the way strace -f -y prints it (one pid unless told)."""

    def __init__(self) -> None:
        self.calls: list[Syscall] = []
        self.pid = 100
        self._fd = 3

    def add(
        self,
        name: str,
        *args: str,
        result: int | None = 0,
        errno: str = "",
        path: str = "",
        path2: str = "",
        fd: int = -1,
        pid: int | None = None,
    ) -> Syscall:
        c = Syscall(
            next(_seq),
            self.pid if pid is None else pid,
            name,
            tuple(args),
            result,
            errno,
            path,
            path2,
            fd,
        )
        self.calls.append(c)
        return c

    def open(
        self,
        path: str,
        flags: str = "O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC",
        *,
        fd: int | None = None,
        pid: int | None = None,
    ) -> int:
        fd = self._fd if fd is None else fd
        self._fd = max(self._fd, fd) + 1
        self.add(
            "openat", "AT_FDCWD</run/t>", f'"{path}"', flags, "0666", result=fd, path=path, pid=pid
        )
        return fd

    def write(
        self,
        fd: int,
        path: str,
        n: int,
        *,
        result: int | None = None,
        errno: str = "",
        pid: int | None = None,
        name: str = "write",
    ) -> None:
        self.add(
            name,
            f"{fd}<{path}>",
            '"..."...',
            str(n),
            result=(-1 if errno else n) if result is None else result,
            errno=errno,
            path=path,
            fd=fd,
            pid=pid,
        )

    def pwrite(self, fd: int, path: str, n: int, offset: int) -> None:
        self.add(
            "pwrite64", f"{fd}<{path}>", '"..."', str(n), str(offset), result=n, path=path, fd=fd
        )

    def close(self, fd: int, path: str, pid: int | None = None) -> None:
        self.add("close", f"{fd}<{path}>", path=path, fd=fd, pid=pid)

    def rename(self, src: str, dst: str) -> None:
        self.add("rename", f'"{src}"', f'"{dst}"', path=src, path2=dst)

    def save(self, name: str, n: int, tmp: str = "") -> None:
        """The atomic-save pattern: write a temp file, rename it over ``name``."""
        tmp = tmp or f"{STATE}/{name}.tmp"
        fd = self.open(tmp)
        self.write(fd, tmp, n)
        self.close(fd, tmp)
        self.rename(tmp, f"{STATE}/{name}")


def golden_json_agent() -> Trace:
    """Three saves of growing JSON (1526, 3026, 4526 B) by temp+rename, then a log line."""
    t = Trace()
    for n in (1526, 3026, 4526):
        t.save("state.json", n)
    fd = t.open(f"{STATE}/log", "O_WRONLY|O_CREAT|O_APPEND|O_CLOEXEC")
    t.write(fd, f"{STATE}/log", 5)
    t.close(fd, f"{STATE}/log")
    return t


# -- tmpfs points ------------------------------------------------------------------------------


def test_tmpfs_points_of_a_temp_and_rename_agent() -> None:
    """Each save needs one page more than any moment before it (the old copy still exists while
    the temp file is written); the log line fits in pages freed by the renames."""
    points = write_points(golden_json_agent().calls, STATE, "tmpfs")
    assert [(p.index, p.value, p.path, p.occurrence, p.ordinal, p.size) for p in points] == [
        (1, 0, "{state_dir}/state.json.tmp", 1, 1, 1526),
        (2, 1 * PAGE, "{state_dir}/state.json.tmp", 2, 2, 3026),
        (3, 2 * PAGE, "{state_dir}/state.json.tmp", 3, 3, 4526),
    ]
    assert all(p.mechanism == "tmpfs" and p.syscall == "write" for p in points)


def test_tmpfs_appends_within_a_page_are_no_point() -> None:
    t = Trace()
    log = f"{STATE}/journal"
    fd = t.open(log, "O_WRONLY|O_CREAT|O_APPEND")
    for _ in range(10):  # 10 x 1000 B: pages 0, 1, 2 are new at writes 1, 5, 9
        t.write(fd, log, 1000)
    points = write_points(t.calls, STATE, "tmpfs")
    assert [(p.occurrence, p.value) for p in points] == [(1, 0), (5, PAGE), (9, 2 * PAGE)]


def test_tmpfs_sparse_writes_truncate_and_fallocate() -> None:
    t = Trace()
    f = f"{STATE}/db"
    fd = t.open(f, "O_RDWR|O_CREAT")
    t.write(fd, f, 3)  # page 0       -> 1 page: point
    t.add("lseek", f"{fd}<{f}>", "40000", "SEEK_SET", result=40000, path=f, fd=fd)
    t.write(fd, f, 1)  # page 9       -> 2: point
    t.pwrite(fd, f, 10, 8190)  # pages 1, 2   -> 4: point
    t.add("ftruncate", f"{fd}<{f}>", "5000", path=f, fd=fd)  # keeps 0, 1   -> 2
    t.pwrite(fd, f, 100, 4000)  # 0, 1 exist   -> 2: none
    t.add("fallocate", f"{fd}<{f}>", "0", "0", "20480", path=f, fd=fd)  # 0..4 -> 5: point
    t.add(
        "fallocate",
        f"{fd}<{f}>",
        "FALLOC_FL_KEEP_SIZE|FALLOC_FL_PUNCH_HOLE",
        "4096",
        "8192",
        path=f,
        fd=fd,
    )  # drops 1, 2   -> 3
    t.write(fd, f, 4096)  # at 40001: 9, 10 -> 5
    points = write_points(t.calls, STATE, "tmpfs")
    assert [(p.syscall, p.value // PAGE) for p in points] == [
        ("write", 0),
        ("write", 1),
        ("pwrite64", 2),
        ("fallocate", 4),
    ]
    assert write_usage(t.calls, STATE).peak_pages == 5 * PAGE


def test_tmpfs_truncate_inside_a_page_keeps_that_page() -> None:
    t = Trace()
    a, b = f"{STATE}/a", f"{STATE}/b"
    fa = t.open(a)
    t.write(fa, a, 8192)  # 2 pages: point
    t.add("truncate", f'"{a}"', "5000", path=a)  # page 1 is partly kept: still 2
    fb = t.open(b)
    t.write(fb, b, 10)  # 3: point
    t.add("ftruncate", f"{fa}<{a}>", "0", path=a, fd=fa)  # 1
    t.write(fb, b, 4096)  # 2: none
    points = write_points(t.calls, STATE, "tmpfs")
    assert [(p.path, p.value) for p in points] == [
        ("{state_dir}/a", 0),
        ("{state_dir}/b", 2 * PAGE),
    ]


def test_tmpfs_unlinked_file_keeps_its_pages_until_closed() -> None:
    t = Trace()
    a, b = f"{STATE}/a", f"{STATE}/b"
    fa = t.open(a)
    t.write(fa, a, 8192)  # 2 pages: point (free 0)
    t.add("unlink", f'"{a}"', path=a)  # still open: still 2
    fb = t.open(b)
    t.write(fb, b, 4096)  # 3: point (free 2 pages)
    t.close(fa, f"{a} (deleted)")  # freed: 1
    t.write(fb, b, 4096)  # 2: no point
    points = write_points(t.calls, STATE, "tmpfs")
    assert [(p.path, p.occurrence, p.value) for p in points] == [
        ("{state_dir}/a", 1, 0),
        ("{state_dir}/b", 1, 2 * PAGE),
    ]


def test_tmpfs_dup_shares_the_position_and_fork_the_descriptors() -> None:
    t = Trace()
    f = f"{STATE}/out"
    fd = t.open(f)
    t.write(fd, f, 4000)
    t.add("dup2", f"{fd}<{f}>", "1", result=1, path=f, fd=fd)
    t.write(1, f, 100)  # at 4000: crosses into page 1 (shared position)
    t.add("clone", "child_stack=NULL", "flags=CLONE_CHILD_CLEARTID|SIGCHLD", result=200)
    t.write(1, f, 4096, pid=200)  # the child's inherited fd: at 4100 -> pages 1, 2
    t.add("fcntl", f"{fd}<{f}>", "F_DUPFD_CLOEXEC", "10", result=10, path=f, fd=fd)
    t.write(10, f, 10)  # at 8196: page 2 already: no point
    points = write_points(t.calls, STATE, "tmpfs")
    assert [(p.occurrence, p.value // PAGE) for p in points] == [(1, 0), (2, 1), (3, 2)]
    assert write_usage(t.calls, STATE).peak_bytes == 8206


def test_tmpfs_o_append_via_fcntl_and_pwrite_on_append() -> None:
    t = Trace()
    f = f"{STATE}/log"
    fd = t.open(f, "O_WRONLY|O_CREAT")
    t.write(fd, f, 4096)
    t.add("lseek", f"{fd}<{f}>", "0", "SEEK_SET", result=0, path=f, fd=fd)
    t.add("fcntl", f"{fd}<{f}>", "F_SETFL", "O_APPEND", path=f, fd=fd)
    t.write(fd, f, 10)  # appends despite the seek: a new page
    t.pwrite(fd, f, 10, 0)  # Linux: pwrite on O_APPEND appends too (same page)
    assert write_usage(t.calls, STATE).peak_bytes == 4116
    assert len(write_points(t.calls, STATE, "tmpfs")) == 2


def test_tmpfs_rename_out_of_the_folder_and_of_a_folder() -> None:
    t = Trace()
    a = f"{STATE}/sub/a"
    fd = t.open(a)
    t.write(fd, a, 4096)
    t.close(fd, a)
    t.rename(f"{STATE}/sub", f"{STATE}/sub2")  # a moves along, still inside
    assert write_usage(t.calls, STATE).peak_pages == PAGE
    t.rename(f"{STATE}/sub2/a", "/run/t/outside")  # leaves the folder: 0
    b = f"{STATE}/b"
    fd = t.open(b)
    t.write(fd, b, 4096)  # 1 page again: no point
    points = write_points(t.calls, STATE, "tmpfs")
    assert [p.path for p in points] == ["{state_dir}/sub/a"]


def test_tmpfs_initial_content_counts_and_truncate_frees_it() -> None:
    """The folder starts with 3 pages; the points' free space is counted above them."""
    t = Trace()
    old, new = f"{STATE}/old", f"{STATE}/new"
    fd = t.open(new)
    t.write(fd, new, 4096)  # 4 pages: point, free 0
    fo = t.open(old)  # O_TRUNC: 8 KiB freed -> 2
    t.write(fo, old, 12288)  # 5: point, free 1 page (4 - 3)
    points = write_points(t.calls, STATE, "tmpfs", initial={old: 8192, f"{STATE}/keep": 10})
    assert [(p.path, p.value) for p in points] == [
        ("{state_dir}/new", 0),
        ("{state_dir}/old", PAGE),
    ]
    use = write_usage(t.calls, STATE, initial={old: 8192, f"{STATE}/keep": 10})
    assert use.peak_pages == 5 * PAGE


def test_tmpfs_ignores_files_outside_and_non_files() -> None:
    t = Trace()
    fd = t.open("/run/t/work/out")
    t.write(fd, "/run/t/work/out", 100_000)
    t.write(1, "", 50)  # a pipe: no path
    t.write(2, "/dev/pts/0", 50)
    assert write_points(t.calls, STATE, "tmpfs") == []


def test_state_dir_spelled_differently_is_the_same_folder() -> None:
    t = Trace()
    fd = t.open(f"{STATE}/x")
    t.write(fd, f"{STATE}/x", 1)
    assert len(write_points(t.calls, STATE + "/./", "tmpfs")) == 1


# -- rlimit points -----------------------------------------------------------------------------


def test_rlimit_points_follow_the_largest_end_offset_anywhere() -> None:
    t = golden_json_agent()
    points = write_points(t.calls, STATE, "rlimit")
    assert [(p.value, p.size, p.path) for p in points] == [
        (0, 1526, "{state_dir}/state.json.tmp"),
        (1526, 3026, "{state_dir}/state.json.tmp"),
        (3026, 4526, "{state_dir}/state.json.tmp"),
    ]
    # a bigger write outside the folder raises the limit for every later point
    t2 = Trace()
    fd = t2.open("/run/t/work/cache")
    t2.write(fd, "/run/t/work/cache", 9000)
    t2.calls += golden_json_agent().calls
    t2.add("ftruncate", f"3<{STATE}/log>", "20000", path=f"{STATE}/log", fd=3)
    points = write_points(t2.calls, STATE, "rlimit")
    assert [(p.syscall, p.value, p.path) for p in points] == [
        ("write", 0, "/run/t/work/cache"),
        ("ftruncate", 9000, "{state_dir}/log"),
    ]
    # within: only the state folder's writes are targets; the cache still sets the limit
    points = write_points(t2.calls, STATE, "rlimit", within=[STATE])
    assert [(p.index, p.value, p.ordinal) for p in points] == [(1, 9000, 5)]


def test_rlimit_ignores_pipes_devices_and_failed_writes() -> None:
    t = Trace()
    t.write(1, "", 10_000)
    t.write(5, "/dev/null", 10_000)
    t.write(6, "/proc/self/oom_score_adj", 10_000)
    fd = t.open(f"{STATE}/x")
    t.write(fd, f"{STATE}/x", 50, errno="EIO")
    t.write(fd, f"{STATE}/x", 40)
    points = write_points(t.calls, STATE, "rlimit")
    assert [(p.occurrence, p.value, p.size) for p in points] == [(2, 0, 40)]


def test_unknown_mechanism_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown disk_full mechanism 'failpoint'"):
        write_points([], STATE, "failpoint")


# -- the records -------------------------------------------------------------------------------


def test_write_point_json_round_trip_and_label() -> None:
    p = write_points(golden_json_agent().calls, STATE, "tmpfs")[1]
    back = WritePoint.from_json(json.loads(json.dumps(p.to_json())))
    assert back == p
    assert p.label() == (
        "tmpfs#2: write of 3 KiB to {state_dir}/state.json.tmp (its 2nd write;"
        " 2nd under {state_dir}) with 4 KiB free"
    )
    r = write_points(golden_json_agent().calls, STATE, "rlimit")[0]
    assert r.label().endswith("with RLIMIT_FSIZE 0 B")


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "expected a mapping"),
        ({"index": 1}, "missing keys"),
        (
            {**WritePoint(1, "tmpfs", 0, "write", "x", 1, 1, 1).to_json(), "extra": 1},
            "unknown keys \\['extra'\\]",
        ),
        (
            {**WritePoint(1, "tmpfs", 0, "write", "x", 1, 1, 1).to_json(), "value": "8KiB"},
            "key 'value' must be int",
        ),
        (
            {**WritePoint(1, "tmpfs", 0, "write", "x", 1, 1, 1).to_json(), "value": True},
            "key 'value' must be int",
        ),
        (
            {**WritePoint(1, "tmpfs", 0, "write", "x", 1, 1, 1).to_json(), "mechanism": "disk"},
            "one of",
        ),
        (
            {**WritePoint(1, "tmpfs", 0, "write", "x", 1, 1, 1).to_json(), "value": -1},
            "must be >= 0",
        ),
    ],
)
def test_write_point_bad_json_says_what(obj: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        WritePoint.from_json(obj, where="plan.json:faults[0].point")


# -- what the faulty run saw -------------------------------------------------------------------


def faulty(
    golden: Trace,
    failing_ordinal: int,
    *,
    short: int = 0,
    errno: str = "ENOSPC",
    tmp_names: bool = False,
) -> Trace:
    """``golden`` replayed until its ``failing_ordinal``-th write under the folder, which fails
    (short by ``short`` bytes, then the retry fails); the agent then gives up. With
    ``tmp_names`` every temp file gets a fresh name (as mkstemp does)."""
    t = Trace()
    n = 0
    for c in golden.calls:
        if tmp_names:
            c = Syscall(
                c.seq,
                c.pid,
                c.name,
                tuple(a.replace(".tmp", ".tmpX7") for a in c.args),
                c.result,
                c.errno,
                c.path.replace(".tmp", ".tmpX7"),
                c.path2.replace(".tmp", ".tmpX7"),
                c.fd,
            )
        if c.name == "write" and c.path.startswith(STATE):
            n += 1
            if n == failing_ordinal:
                size = int(c.args[2])
                if short:
                    t.write(c.fd, c.path, size, result=size - short)
                    t.write(c.fd, c.path, short, errno=errno)
                else:
                    t.write(c.fd, c.path, size, errno=errno)
                return t
        t.calls.append(c)
    return t


def test_disk_errors_name_the_write_like_the_golden_run_does() -> None:
    golden = golden_json_agent()
    errs = disk_errors(faulty(golden, 2, short=100).calls, STATE)
    assert [(e.path, e.occurrence, e.ordinal, e.errno, e.requested, e.written) for e in errs] == [
        ("{state_dir}/state.json.tmp", 2, 2, "", 3026, 2926),
        ("{state_dir}/state.json.tmp", 3, 3, "ENOSPC", 100, -1),
    ]
    assert errs[0].short
    assert not errs[1].short
    assert "short write (2.9 KiB of 3 KiB)" in errs[0].describe()
    point = write_points(golden.calls, STATE, "tmpfs")[1]
    assert point.matches(errs[0])
    assert not point.matches(errs[1])


def test_disk_errors_on_a_partial_trace_are_a_prefix() -> None:
    calls = faulty(golden_json_agent(), 3, errno="ENOSPC").calls
    whole = disk_errors(calls, STATE)
    assert len(whole) == 1
    for cut in range(len(calls) + 1):
        seen = {c.seq for c in calls[:cut]}
        assert disk_errors(calls[:cut], STATE) == [e for e in whole if e.seq in seen]
    assert disk_errors(calls[:-1], STATE) == []


def test_a_random_temp_name_still_matches_by_ordinal() -> None:
    golden = golden_json_agent()
    point = write_points(golden.calls, STATE, "tmpfs")[2]
    err = disk_errors(faulty(golden, 3, tmp_names=True).calls, STATE)[0]
    assert err.path == "{state_dir}/state.json.tmpX7"
    assert point.matches(err)
    other = DiskError(1, 1, "write", "{state_dir}/sub/x", 9, 3, "ENOSPC")
    assert not point.matches(other)  # same ordinal, another folder


def test_confirm_fired_at_the_planned_write() -> None:
    golden = golden_json_agent()
    for point in write_points(golden.calls, STATE, "tmpfs"):
        got = confirm("tmpfs", STATE, point=point, calls=faulty(golden, point.ordinal).calls)
        assert got.fired
        assert got.why_not == ""
        assert "ENOSPC at write of" in got.where
        assert "planned" not in got.where


def test_confirm_fired_elsewhere_says_where_and_what_was_planned() -> None:
    golden = golden_json_agent()
    point = write_points(golden.calls, STATE, "tmpfs")[2]
    got = confirm("tmpfs", STATE, point=point, calls=faulty(golden, 2).calls)
    assert got.fired
    assert "its 2nd write" in got.where
    assert "planned tmpfs#3" in got.where


def test_confirm_over_large_capacity_explains_and_says_how_to_fix() -> None:
    t = Trace()
    fd = t.open(f"{STATE}/s.json")
    t.write(fd, f"{STATE}/s.json", 561)
    got = confirm("tmpfs", STATE, capacity=16 * 1024, calls=t.calls)
    assert not got.fired
    assert got.where == ""
    assert got.why_not == (
        "the agent's files under {state_dir} took at most 561 B (4 KiB in tmpfs pages) in 1 "
        "write; capacity 16 KiB never filled: lower it or use the write-point mode (disk_full "
        "without capacity)"
    )
    got = confirm("rlimit", STATE, capacity=16 * 1024, calls=t.calls)
    assert got.why_not == (
        "the agent wrote at most 561 B into one file ({state_dir}/s.json); capacity 16 KiB never"
        " reached: lower it or use the write-point mode (disk_full without capacity)"
    )


def test_confirm_planned_point_not_reached() -> None:
    golden = golden_json_agent()
    point = write_points(golden.calls, STATE, "tmpfs")[2]
    short_run = Trace()
    short_run.save("state.json", 10)
    got = confirm("tmpfs", STATE, point=point, calls=short_run.calls)
    assert not got.fired
    assert "no write failed with ENOSPC" in got.why_not
    assert "planned tmpfs#3" in got.why_not
    assert "deterministic" in got.why_not


def test_confirm_rlimit_ignores_tmpfs_errors_and_the_other_way_round() -> None:
    golden = golden_json_agent()
    calls = faulty(golden, 1, errno="EFBIG").calls
    assert confirm("rlimit", STATE, capacity=100, calls=calls).fired
    assert not confirm("tmpfs", STATE, capacity=100, calls=calls).fired


def test_confirm_from_samples_without_a_trace() -> None:
    full = confirm(
        "tmpfs",
        STATE,
        capacity=8192,
        sample=UsageSample(8192, 0, 20),
        untraced="strace not on PATH",
    )
    assert full.fired
    assert "free space fell to 0 B" in full.where
    assert "strace not on PATH" in full.where
    roomy = confirm("tmpfs", STATE, capacity=65536, sample=UsageSample(4096, 61440, 20))
    assert not roomy.fired
    assert "never filled: 4 KiB used at the peak" in roomy.why_not
    assert "lower it or use the write-point mode" in roomy.why_not
    blind = confirm("rlimit", STATE, capacity=100, untraced="ptrace refused")
    assert not blind.fired
    assert "ptrace refused" in blind.why_not
    assert "install strace" in blind.why_not


def test_rlimit_argv_runs_the_command_through_this_interpreter() -> None:
    argv = rlimit_argv(["sh", "-c", "true"], 4096)
    assert argv[-4:] == ["4096", "sh", "-c", "true"]
    with pytest.raises(ValueError, match=">= 0"):
        rlimit_argv(["x"], -1)


def test_copy_file_range_target_is_its_third_argument() -> None:
    """strace escapes '>' in a decoration (\\76); a removed file reads ``(deleted)``."""
    t = Trace()
    src, dst = f"{STATE}/a", f"{STATE}/b>c"
    fs = t.open(src)
    fd = t.open(dst)
    t.add(
        "copy_file_range",
        f"{fs}<{src}>",
        "NULL",
        f"{fd}<{STATE}/b\\76c>(deleted)",
        "[0]",
        "9000",
        "0",
        result=9000,
        path=src,
        fd=fs,
    )
    points = write_points(t.calls, STATE, "tmpfs")
    assert [(p.syscall, p.path, p.size) for p in points] == [
        ("copy_file_range", "{state_dir}/b>c", 9000)
    ]


# -- a property: point k is exactly the first write over its budget -----------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.sampled_from(["a", "b"]), st.integers(0, 3 * PAGE)),
        st.tuples(st.just("append"), st.sampled_from(["log", "a"]), st.integers(0, 3 * PAGE)),
        st.tuples(st.just("unlink"), st.sampled_from(["a", "b", "log"]), st.just(0)),
        st.tuples(st.just("truncate"), st.sampled_from(["a", "log"]), st.integers(0, 2 * PAGE)),
    ),
    max_size=12,
)


def build(ops: list[tuple[str, str, int]]) -> Trace:
    t = Trace()
    for op, name, n in ops:
        path = f"{STATE}/{name}"
        if op == "save":
            t.save(name, n)
        elif op == "append":
            fd = t.open(path, "O_WRONLY|O_CREAT|O_APPEND")
            t.write(fd, path, n)
            t.close(fd, path)
        elif op == "unlink":
            t.add("unlink", f'"{path}"', path=path)
        else:
            t.add("truncate", f'"{path}"', str(n), path=path)
    return t


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_each_point_is_the_first_write_over_its_budget(ops: list[tuple[str, str, int]]) -> None:
    """Oracle: replay prefixes and find, for each point's free space, the first write after
    which the folder needs more pages than that; it must be that point's write."""
    calls = build(ops).calls
    for mech in ("tmpfs", "rlimit"):
        points = write_points(calls, STATE, mech)
        values = [p.value for p in points]
        assert values == sorted(set(values)), "budgets strictly increase"
        for p in points:
            first = None
            for i, c in enumerate(calls):
                if c.name not in ("write", "truncate"):
                    continue
                use = write_usage(calls[: i + 1], STATE)
                over = use.peak_pages > p.value if mech == "tmpfs" else use.largest_end > p.value
                if over:
                    first = c
                    break
            assert first is not None
            err = disk_errors(
                [
                    *calls[: calls.index(first)],
                    Syscall(
                        first.seq,
                        first.pid,
                        first.name,
                        first.args,
                        -1,
                        "ENOSPC",
                        first.path,
                        first.path2,
                        first.fd,
                    ),
                ],
                STATE,
            )[-1]
            assert p.matches(err), (p, first)
