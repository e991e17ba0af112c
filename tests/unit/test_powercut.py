"""The power-loss crash-state engine (``faults._powercut``) on hand-written strace traces.

The traces are in the shapes strace 6.1 prints with ``-f -q -y -ttt`` (checked on real runs:
see tests/crash/test_powercut_trace.py): ``PID TIME call(args) = result``. They cover each
call the recorder follows (descriptors shared by dup and fork, O_APPEND, O_TRUNC, lseek,
renames that keep a file's identity), each mutation under both models, the dedupe and the
determinism of the state lists, the JSON round trip, and ``materialize`` refusing every way
out of its roots.
"""

# ruff: noqa: E501  (strace lines are long and kept whole, as strace prints them)

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from crashpoint.faults import CrashState, Mutation, OpLog
from crashpoint.faults import _powercut as pc
from crashpoint.faults._strace import parse_lines

ROOT = "/t/st"
ROOTS = {"state_dir": ROOT}
S = "{state_dir}"


def trace(text: str) -> list[str]:
    """Lines ``PID call = result`` get a time stamp each (strace -ttt), 1.0 apart."""
    out = []
    for i, line in enumerate(x.strip() for x in text.strip().splitlines()):
        pid, _, rest = line.partition(" ")
        out.append(f"{pid} {1000 + i}.000000 {rest}")
    return out


def log_of(text: str, initial: dict[str, bytes | None] | None = None) -> OpLog:
    return pc.oplog(parse_lines(trace(text)), ROOTS, initial=initial)


def kinds(log: OpLog) -> list[str]:
    return [op.kind for op in log.ops]


def fd(n: int, name: str) -> str:
    return f"{n}<{ROOT}/{name}>"


def states(log: OpLog, model: str) -> list[CrashState]:
    return [s for u in range(len(log.ops) + 1) for s in pc.crash_states(log, model, u)]


NAIVE = f'''
10 openat(AT_FDCWD</w>, "{ROOT}/state.json", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3<{ROOT}/state.json>
10 lseek({fd(3, "state.json")}, 0, SEEK_CUR) = 0
10 write({fd(3, "state.json")}, "{{\\"step\\": 2}}", 11) = 11
10 close({fd(3, "state.json")}) = 0
'''

SAFE = f'''
10 openat(AT_FDCWD</w>, "{ROOT}/state.tmp", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3<{ROOT}/state.tmp>
10 write({fd(3, "state.tmp")}, "{{\\"step\\": 2}}", 11) = 11
10 fsync({fd(3, "state.tmp")}) = 0
10 close({fd(3, "state.tmp")}) = 0
10 rename("{ROOT}/state.tmp", "{ROOT}/state.json") = 0
10 openat(AT_FDCWD</w>, "{ROOT}", O_RDONLY|O_CLOEXEC|O_DIRECTORY) = 3<{ROOT}>
10 fsync(3<{ROOT}>) = 0
10 close(3<{ROOT}>) = 0
'''

OLD = {f"{S}/state.json": b'{"step": 1}'}


# -- recording ----------------------------------------------------------------------------------


def test_python_open_w_of_an_existing_file_is_a_truncate_then_a_write() -> None:
    log = log_of(NAIVE, OLD)
    assert kinds(log) == ["trunc", "write"]
    t, w = log.ops
    assert (t.path, t.size, t.file) == (f"{S}/state.json", 0, w.file)
    assert (w.offset, w.size, w.data, w.exact) == (0, 11, b'{"step": 2}', True)
    assert w.time == 1002.0
    assert w.pid == 10
    assert "write(" in w.call


def test_open_creat_of_a_new_name_is_a_create_and_initial_names_keep_their_identity() -> None:
    log = log_of(NAIVE)
    assert kinds(log) == ["creat", "write"]
    assert log.ops[0].file == log.ops[1].file
    log2 = log_of(NAIVE, OLD)
    assert log2.ids[f"{S}/state.json"] == log2.ops[0].file


def test_temp_fsync_rename_folder_fsync() -> None:
    log = log_of(SAFE, OLD)
    assert kinds(log) == ["creat", "write", "fsync", "rename", "fsync"]
    c, _, f, r, d = log.ops
    assert f.file == c.file
    assert (r.path, r.path2, r.file) == (f"{S}/state.tmp", f"{S}/state.json", c.file)
    assert (d.path, d.file) == (S, 0)


def test_a_file_keeps_its_identity_and_takes_its_new_name_across_renames() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/a", O_WRONLY|O_CREAT, 0644) = 3<{ROOT}/a>
        10 rename("{ROOT}/a", "{ROOT}/b") = 0
        10 write(3<{ROOT}/b>, "x", 1) = 1
        10 renameat2(AT_FDCWD</w>, "{ROOT}/b", AT_FDCWD</w>, "{ROOT}/c", RENAME_NOREPLACE) = 0
        10 fsync(3<{ROOT}/c>) = 0
    ''')
    assert kinds(log) == ["creat", "rename", "write", "rename", "fsync"]
    ids = {op.file for op in log.ops}
    assert len(ids) == 1
    assert log.ops[2].path == f"{S}/b"
    assert log.ops[4].path == f"{S}/c"


def test_each_name_operation() -> None:
    log = log_of(f'''
        10 mkdir("{ROOT}/d", 0777) = 0
        10 mkdirat(3<{ROOT}>, "e", 0755) = 0
        10 openat(3<{ROOT}>, "d/x", O_RDWR|O_CREAT|O_EXCL, 0600) = 4<{ROOT}/d/x>
        10 link("{ROOT}/d/x", "{ROOT}/e/y") = 0
        10 linkat(3<{ROOT}>, "d/x", 3<{ROOT}>, "z", 0) = 0
        10 symlink("d/x", "{ROOT}/s") = 0
        10 symlinkat("x", 3<{ROOT}>, "d/s2") = 0
        10 unlink("{ROOT}/s") = 0
        10 unlinkat(3<{ROOT}>, "d/s2", 0) = 0
        10 unlinkat(3<{ROOT}>, "e/y", 0) = 0
        10 unlinkat(3<{ROOT}>, "e", AT_REMOVEDIR) = 0
        10 renameat2(3<{ROOT}>, "d/x", 3<{ROOT}>, "z", RENAME_EXCHANGE) = 0
        10 rmdir("{ROOT}/nothere") = -1 ENOENT (No such file or directory)
        10 rename("{ROOT}/d", "{ROOT}/d2") = 0
        10 fdatasync(4<{ROOT}/d2/x>) = 0
        10 sync() = 0
        10 syncfs(3<{ROOT}>) = 0
        10 unlink("{ROOT}/d2/x") = 0
        10 rmdir("{ROOT}/d2") = 0
    ''')
    assert kinds(log) == [
        "mkdir",
        "mkdir",
        "creat",
        "link",
        "link",
        "symlink",
        "symlink",
        "unlink",
        "unlink",
        "unlink",
        "rmdir",
        "exchange",
        "rename",
        "fdatasync",
        "sync",
        "sync",
        "unlink",
        "rmdir",
    ]
    f = log.ops[2].file
    assert (log.ops[3].path, log.ops[3].path2, log.ops[3].file) == (f"{S}/d/x", f"{S}/e/y", f)
    assert log.ops[4].path2 == f"{S}/z"
    assert (log.ops[5].path, log.ops[5].path2) == (f"{S}/s", "d/x")
    assert log.ops[10].path == f"{S}/e"
    ex = log.ops[11]
    assert (ex.file, ex.file2) == (f, f)  # z was a hard link of d/x: the same file
    assert log.ops[12].file == 0  # a folder
    assert log.ops[13].path == f"{S}/d2/x"  # renamed with its folder
    assert any("symlink" in n for n in log.notes)


def test_dup_dup2_dup3_and_fcntl_dupfd_share_one_offset() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/f", O_WRONLY|O_CREAT|O_TRUNC, 0644) = 3<{ROOT}/f>
        10 write({fd(3, "f")}, "aaaa", 4) = 4
        10 dup({fd(3, "f")}) = 4<{ROOT}/f>
        10 write({fd(4, "f")}, "bb", 2) = 2
        10 dup2({fd(3, "f")}, 10</dev/null>) = 10<{ROOT}/f>
        10 write(10<{ROOT}/f>, "c", 1) = 1
        10 dup3({fd(3, "f")}, 30, O_CLOEXEC) = 30<{ROOT}/f>
        10 fcntl(30<{ROOT}/f>, F_DUPFD_CLOEXEC, 40) = 40<{ROOT}/f>
        10 close({fd(3, "f")}) = 0
        10 write(40<{ROOT}/f>, "d", 1) = 1
        10 lseek(40<{ROOT}/f>, 1, SEEK_SET) = 1
        10 write(4<{ROOT}/f>, "E", 1) = 1
        10 pwrite64(4<{ROOT}/f>, "P", 1, 100) = 1
        10 write(4<{ROOT}/f>, "F", 1) = 1
    ''')
    offs = [(op.offset, op.data) for op in log.ops if op.kind == "write"]
    assert offs == [
        (0, b"aaaa"),
        (4, b"bb"),
        (6, b"c"),
        (7, b"d"),
        (1, b"E"),
        (100, b"P"),
        (2, b"F"),
    ]


def test_fork_shares_the_open_file_description_and_copies_the_table() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/log", O_WRONLY|O_CREAT, 0644) = 3<{ROOT}/log>
        10 write({fd(3, "log")}, "p1", 2) = 2
        10 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 11
        11 write({fd(3, "log")}, "kid", 3) = 3
        11 close({fd(3, "log")}) = 0
        10 write({fd(3, "log")}, "p2", 2) = 2
        10 clone3({{flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD, child_tid=0x7f}} => {{parent_tid=[12]}}, 88) = 12
        12 write({fd(3, "log")}, "th", 2) = 2
        12 close({fd(3, "log")}) = 0
        10 vfork() = 13
        13 write({fd(7, "log")}, "x", 1) = 1
    ''')
    writes = [(op.pid, op.offset, op.data) for op in log.ops if op.kind == "write"]
    assert writes[:4] == [(10, 0, b"p1"), (11, 2, b"kid"), (10, 5, b"p2"), (12, 7, b"th")]
    # the thread shared the table: fd 3 is closed for pid 10 too; fd 7 of the vfork child
    # was never opened in the trace: learnt from its -y path, offset at the file's end
    assert writes[4] == (13, 9, b"x")
    assert any("descriptor 7 of process 13" in n for n in log.notes)


def test_o_append_pwrite_on_append_and_f_setfl() -> None:
    log = log_of(
        f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/app", O_WRONLY|O_CREAT|O_APPEND, 0644) = 3<{ROOT}/app>
        10 pwrite64({fd(3, "app")}, "pw", 2, 0) = 2
        10 write({fd(3, "app")}, "aa", 2) = 2
        10 lseek({fd(3, "app")}, 0, SEEK_SET) = 0
        10 write({fd(3, "app")}, "bb", 2) = 2
        10 fcntl({fd(3, "app")}, F_SETFL, O_WRONLY|O_LARGEFILE) = 0
        10 write({fd(3, "app")}, "cc", 2) = 2
    ''',
        {f"{S}/app": b"0123456789"},
    )
    offs = [op.offset for op in log.ops if op.kind == "write"]
    assert offs == [10, 12, 14, 16]  # appends; then at the offset the last append left
    assert kinds(log)[0] == "write"  # an existing file: no create


def test_writev_pwritev_and_binary_data_round_trip_exactly() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/v", O_RDWR|O_CREAT, 0600) = 3<{ROOT}/v>
        10 writev({fd(3, "v")}, [{{iov_base="a\\n", iov_len=2}}, {{iov_base="\\377\\200\\0", iov_len=3}}], 2) = 5
        10 pwritev2({fd(3, "v")}, [{{iov_base="1", iov_len=1}}, {{iov_base="2", iov_len=1}}], 2, 0, 0) = 2
        10 pwritev({fd(3, "v")}, [{{iov_base="\\"<>", iov_len=3}}], 1, 8) = 3
        10 write({fd(3, "v")}, "\\0\\1\\377 \\t\\x", 6) = 6
    ''')
    w = [op for op in log.ops if op.kind == "write"]
    assert [(op.offset, op.data) for op in w] == [
        (0, b"a\n\xff\x80\x00"),
        (0, b"12"),
        (8, b'"<>'),
        (5, b"\x00\x01\xff \tx"),
    ]
    assert all(op.exact for op in w)


def test_data_cut_by_strsize_is_inexact_and_noted() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/big", O_WRONLY|O_CREAT, 0644) = 3<{ROOT}/big>
        10 write({fd(3, "big")}, "BBB"..., 5000) = 5000
        10 writev({fd(3, "big")}, [{{iov_base="abc"..., iov_len=6}}, {{iov_base="abc"..., iov_len=6}}, ...], 5) = 30
        10 write({fd(3, "big")}, "ok", 2) = 2
    ''')
    w = [op for op in log.ops if op.kind == "write"]
    assert [(op.size, op.exact) for op in w] == [(5000, False), (30, False), (2, True)]
    assert w[0].data == b"BBB"
    assert w[2].offset == 5030
    assert any("longer than the trace shows" in n for n in log.notes)
    st = pc.crash_states(log, "posix", 2)
    assert st
    assert not any(s.exact for s in st)


def test_truncate_ftruncate_fallocate_copy_file_range_sendfile_sync_file_range() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/f", O_RDWR|O_CREAT, 0644) = 3<{ROOT}/f>
        10 ftruncate({fd(3, "f")}, 3) = 0
        10 truncate("{ROOT}/f", 2) = 0
        10 fallocate({fd(3, "f")}, 0, 0, 100) = 0
        10 fallocate({fd(3, "f")}, FALLOC_FL_KEEP_SIZE, 0, 9000) = 0
        10 fallocate({fd(3, "f")}, FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE, 0, 10) = 0
        10 openat(AT_FDCWD</w>, "/etc/src", O_RDONLY) = 4</etc/src>
        10 copy_file_range(4</etc/src>, NULL, {fd(3, "f")}, [50], 5, 0) = 5
        10 sendfile({fd(3, "f")}, 4</etc/src>, [0] => [3], 3) = 3
        10 sync_file_range({fd(3, "f")}, 0, 0, SYNC_FILE_RANGE_WRITE) = 0
    ''')
    assert [(op.kind, op.size, op.offset) for op in log.ops[1:]] == [
        ("trunc", 3, 0),
        ("trunc", 2, 0),
        ("trunc", 100, 0),
        ("write", 5, 50),
        ("write", 3, 0),
    ]
    assert not log.ops[4].exact
    notes = "\n".join(log.notes)
    assert "PUNCH_HOLE" in notes
    assert "sync_file_range" in notes
    assert "copy_file_range" in notes
    assert "sendfile" in notes


def test_failed_and_killed_calls_and_paths_outside_the_roots_are_left_out() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/x", O_WRONLY|O_CREAT|O_EXCL, 0644) = -1 EEXIST (File exists)
        10 mkdir("{ROOT}/d", 0777) = ?
        10 openat(AT_FDCWD</w>, "/t/other/x", O_WRONLY|O_CREAT, 0644) = 3</t/other/x>
        10 write(3</t/other/x>, "no", 2) = 2
        10 write(1<pipe:[123]>, "out", 3) = 3
        10 rename("/t/other/x", "/t/stx") = 0
        10 write(5<{ROOT}/y>, "zz", 2) = -1 ENOSPC (No space left on device)
    ''')
    assert log.ops == ()


def test_moving_files_into_and_out_of_the_roots() -> None:
    log = log_of(
        f'''
        10 rename("/tmp/outside", "{ROOT}/in") = 0
        10 rename("{ROOT}/gone", "/tmp/away") = 0
    ''',
        {f"{S}/gone": b"bye"},
    )
    assert [(op.kind, op.path, op.exact) for op in log.ops] == [
        ("creat", f"{S}/in", False),
        ("unlink", f"{S}/gone", True),
    ]
    assert any("moved in from outside" in n for n in log.notes)


def test_relative_paths_and_unknown_existing_files() -> None:
    log = log_of(f'''
        10 chdir("{ROOT}") = 0
        10 openat(AT_FDCWD<{ROOT}>, "sub/known", O_WRONLY) = 3<{ROOT}/sub/known>
        10 write({fd(3, "sub/known")}, "k", 1) = 1
        10 rename("sub/known", "k2") = 0
    ''')
    assert [(op.kind, op.path) for op in log.ops] == [
        ("write", f"{S}/sub/known"),
        ("rename", f"{S}/sub/known"),
    ]
    assert log.initial == {f"{S}/sub": None, f"{S}/sub/known": b""}
    assert any("does not list it" in n for n in log.notes)


def test_o_tmpfile_then_linkat_at_empty_path() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}", O_WRONLY|O_TMPFILE, 0600) = 3<{ROOT}/#123>(deleted)
        10 write(3<{ROOT}/#123>(deleted), "tmp", 3) = 3
        10 linkat(3<{ROOT}/#123>(deleted), "", AT_FDCWD</w>, "{ROOT}/named", AT_EMPTY_PATH) = 0
    ''')
    assert kinds(log) == ["write", "link"]
    assert log.ops[1].path2 == f"{S}/named"
    got = {s.files.get(f"{S}/named", "missing") for s in pc.crash_states(log, "posix", 2)}
    assert got == {"missing", b"", bytes(3)}  # link lost; link ahead of its data; zeros


def test_describe() -> None:
    log = log_of(SAFE, OLD)
    assert log.ops[1].describe() == f"write 11 B at 0 to {S}/state.tmp"
    assert log.ops[3].describe() == f"rename {S}/state.tmp to {S}/state.json"
    assert log.ops[4].describe() == f"fsync {S} (folder)"


# -- models and mutations -----------------------------------------------------------------------


def test_nothing_pending_no_state_and_the_bounds_are_checked() -> None:
    log = log_of(SAFE, OLD)
    assert pc.crash_states(log, "posix", 0) == []
    assert pc.crash_states(log, "posix", len(log.ops)) == []  # folder fsynced: all durable
    with pytest.raises(ValueError, match="unknown power-loss model"):
        pc.crash_states(log, "ext3", 1)
    with pytest.raises(ValueError, match="outside the log"):
        pc.crash_states(log, "posix", len(log.ops) + 1)
    with pytest.raises(ValueError, match="outside the log"):
        pc.rebuild(log, "posix", -1, Mutation("synced_only"))


def test_naive_rewrite_can_be_left_empty_or_zeros_and_is_explained() -> None:
    log = log_of(NAIVE, OLD)
    for model in pc.MODELS:
        st = pc.crash_states(log, model, 2)
        got = {s.files[f"{S}/state.json"] for s in st}
        assert b"" in got, model
        assert b'{"step": 1}' in got  # the truncate lost too: the old content
        for s in st:
            assert s.explain.startswith(
                f"`{S}/state.json` was rewritten in place (open with "
                "O_TRUNC, write) without fsync: after power loss it "
                "can be empty or torn"
            ), s.explain
        empty = next(s for s in st if s.files[f"{S}/state.json"] == b"")
        assert empty.lost == (f"{S}/state.json: 0 of 11 bytes",)
    zeros = [s for s in pc.crash_states(log, "posix", 2) if s.mutation.kind == "zeros"]
    assert [s.files[f"{S}/state.json"] for s in zeros] == [bytes(11)]
    assert not [s for s in pc.crash_states(log, "ext4-ordered", 2) if s.mutation.kind == "zeros"]


def test_torn_cuts_at_the_first_and_last_512_byte_boundary() -> None:
    data = "".join(chr(ord("a") + i % 26) for i in range(5000))
    log = log_of(
        f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/f", O_WRONLY|O_CREAT|O_APPEND, 0644) = 3<{ROOT}/f>
        10 write({fd(3, "f")}, "{data}", 5000) = 5000
    ''',
        {f"{S}/f": b"H" * 100},
    )
    for model in pc.MODELS:
        torn = [s for s in pc.crash_states(log, model, 1) if s.mutation.kind == "torn"]
        assert [s.mutation.keep for s in torn] == [412, 4508]  # file offsets 512 and 4608
        assert torn[0].files[f"{S}/f"] == b"H" * 100 + data[:412].encode()
        assert torn[0].explain == (
            f"`{S}/f` append was not fsynced: after power loss it can be lost or torn"
        )
        assert torn[0].label() == "after op 1 (write 5000 B at 100 to {state_dir}/f), torn at 412 B"
    # a write inside one sector tears to nothing: the size is not extended
    small = log_of(
        f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/f", O_WRONLY|O_APPEND) = 3<{ROOT}/f>
        10 write({fd(3, "f")}, "tail", 4) = 4
    ''',
        {f"{S}/f": b"H" * 100},
    )
    st = pc.crash_states(small, "posix", 1)
    assert [s.mutation.kind for s in st] == ["drop", "zeros"]  # torn at 0 == drop: deduped
    assert pc.rebuild(small, "posix", 1, Mutation("torn", 0, 0)).files[f"{S}/f"] == b"H" * 100
    with pytest.raises(ValueError, match="torn write keeps one of"):
        pc.rebuild(small, "posix", 1, Mutation("torn", 0, 2))


def test_fsync_of_the_file_keeps_its_data_the_folder_fsync_keeps_its_name() -> None:
    log = log_of(SAFE, OLD)
    for model in pc.MODELS:
        for s in states(log, model):
            tmp = s.files.get(f"{S}/state.tmp")
            if s.upto >= 3:  # after the fsync of the file: its data is whole wherever it is
                assert tmp in (None, b'{"step": 2}') or f"{S}/state.tmp" not in s.files
            assert s.files[f"{S}/state.json"] in (b'{"step": 1}', b'{"step": 2}'), s.label()
        assert pc.crash_states(log, model, 5) == []


def test_posix_rename_without_folder_fsync_can_be_undone_and_is_explained() -> None:
    log = log_of("\n".join(SAFE.strip().splitlines()[:5]), OLD)  # no folder fsync
    st = pc.crash_states(log, "posix", 4)
    back = [s for s in st if s.files.get(f"{S}/state.json") == b'{"step": 1}']
    assert back
    assert (
        f"the rename of `{S}/state.tmp` to `{S}/state.json` was not made durable (no "
        f"fsync of its folder `{S}`): after power loss the old `{S}/state.json` is back"
    ) in back[0].explain


def test_posix_reorder_rename_before_data_and_ext4_keeps_data_before_its_rename() -> None:
    text = "\n".join(line for line in SAFE.strip().splitlines() if "fsync(" not in line)
    log = log_of(text, OLD)  # temp + rename, no fsync at all
    assert kinds(log) == ["creat", "write", "rename"]
    posix = pc.crash_states(log, "posix", 3)
    [empty] = [s for s in posix if s.files.get(f"{S}/state.json") == b""]
    reorder = pc.rebuild(log, "posix", 3, Mutation("reorder", 2))
    assert reorder.digest == empty.digest  # one write: the same as dropping it (deduped)
    assert empty.explain == reorder.explain
    assert reorder.explain == (
        f"`{S}/state.json` was replaced by rename before its data "
        "was fsynced: after power loss it can be empty"
    )
    ext4 = states(log, "ext4-ordered")
    assert ext4
    for s in ext4:  # data=ordered: the rename never reaches the disk ahead of the data
        assert s.files[f"{S}/state.json"] in (b'{"step": 1}', b'{"step": 2}'), s.label()
        assert s.mutation.kind not in ("reorder", "zeros")
    with pytest.raises(ValueError, match="reorder applies under posix"):
        pc.rebuild(log, "ext4-ordered", 3, Mutation("reorder", 2))


def test_ext4_metadata_persists_as_a_prefix() -> None:
    log = log_of(f'''
        10 mkdir("{ROOT}/a", 0777) = 0
        10 mkdir("{ROOT}/b", 0777) = 0
        10 mkdir("{ROOT}/c", 0777) = 0
    ''')
    ext4 = pc.crash_states(log, "ext4-ordered", 3)
    trees = [sorted(s.files) for s in ext4]
    assert trees == [[], [f"{S}/a"], [f"{S}/a", f"{S}/b"]]
    posix = pc.crash_states(log, "posix", 3)
    assert [f"{S}/a", f"{S}/c"] in [sorted(s.files) for s in posix]  # any subset


def test_ext4_any_fsync_commits_the_metadata_before_it_posix_needs_the_folder() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/new", O_WRONLY|O_CREAT, 0644) = 3<{ROOT}/new>
        10 write({fd(3, "new")}, "data", 4) = 4
        10 fsync({fd(3, "new")}) = 0
    ''')
    assert pc.crash_states(log, "ext4-ordered", 3) == []
    [s] = pc.crash_states(log, "posix", 3)
    assert f"{S}/new" not in s.files
    assert s.explain == (
        f"the creation of `{S}/new` was not made durable (no fsync of its "
        f"folder `{S}`): after power loss it is missing"
    )


def test_ext4_in_place_overwrite_can_still_tear() -> None:
    old = b"o" * 2048
    log = log_of(
        f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/db", O_RDWR) = 3<{ROOT}/db>
        10 pwrite64({fd(3, "db")}, "{"n" * 1024}", 1024, 256) = 1024
    ''',
        {f"{S}/db": old},
    )
    st = pc.crash_states(log, "ext4-ordered", 1)
    assert [(s.mutation.kind, s.mutation.keep) for s in st] == [
        ("drop", 0),
        ("torn", 256),
        ("torn", 768),
    ]
    assert st[1].files[f"{S}/db"] == b"o" * 256 + b"n" * 256 + b"o" * 1536
    assert "overwritten in place without fsync" in st[1].explain


def test_sync_makes_everything_durable_and_initial_counts_as_durable() -> None:
    log = log_of(NAIVE + "10 sync() = 0\n", OLD)
    for model in pc.MODELS:
        assert pc.crash_states(log, model, 3) == []
        assert pc.crash_states(log, model, 0) == []  # the initial state is durable


def test_posix_unlink_and_mkdir_without_folder_fsync() -> None:
    log = log_of(
        f'''
        10 unlink("{ROOT}/old") = 0
        10 mkdir("{ROOT}/d", 0777) = 0
        10 openat(AT_FDCWD</w>, "{ROOT}/d/f", O_WRONLY|O_CREAT, 0644) = 3<{ROOT}/d/f>
        10 write({fd(3, "d/f")}, "x", 1) = 1
        10 fsync({fd(3, "d/f")}) = 0
        10 openat(AT_FDCWD</w>, "{ROOT}/d", O_RDONLY|O_DIRECTORY) = 4<{ROOT}/d>
        10 fsync(4<{ROOT}/d>) = 0
    ''',
        {f"{S}/old": b"1"},
    )
    st = pc.crash_states(log, "posix", len(log.ops))
    assert {s.mutation.op for s in st if s.mutation.kind == "drop"} == {0, 1}
    back = next(s for s in st if s.mutation == Mutation("drop", 0))
    assert back.files[f"{S}/old"] == b"1"
    assert "the removal of `{state_dir}/old` was not made durable" in back.explain
    nodir = next(s for s in st if s.mutation == Mutation("drop", 1))
    assert f"{S}/d/f" not in nodir.files  # its folder's entry was never made durable
    assert nodir.explain.startswith(
        f"the folder `{S}/d` was not made durable (no fsync of its folder `{S}`)"
    )


def test_states_are_unique_never_the_kill9_state_and_deterministic() -> None:
    log = log_of(
        f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/a", O_WRONLY|O_CREAT|O_TRUNC, 0644) = 3<{ROOT}/a>
        10 write({fd(3, "a")}, "{"x" * 1500}", 1500) = 1500
        10 write({fd(3, "a")}, "{"y" * 700}", 700) = 700
        10 rename("{ROOT}/a", "{ROOT}/b") = 0
        10 openat(AT_FDCWD</w>, "{ROOT}/log", O_WRONLY|O_CREAT|O_APPEND, 0644) = 4<{ROOT}/log>
        10 write({fd(4, "log")}, "entry\\n", 6) = 6
        10 fdatasync({fd(4, "log")}) = 0
        10 unlink("{ROOT}/b") = 0
    ''',
        {f"{S}/b": b"before"},
    )
    for model in pc.MODELS:
        for u in range(len(log.ops) + 1):
            st = pc.crash_states(log, model, u)
            digests = [s.digest for s in st]
            assert len(set(digests)) == len(digests)
            kill9 = pc.rebuild(log, model, u, Mutation("synced_only")) if st else None
            for s in st:
                assert s.lost
                assert s.explain
                assert s.files != _kill9(log, u)
                again = pc.rebuild(log, model, u, s.mutation)
                assert again == s
            assert pc.crash_states(log, model, u) == st
            assert kill9 is None or kill9.digest in digests or kill9.files == _kill9(log, u)
            a = pc.crash_states(log, model, u, rng=random.Random(7), limit=3)
            b = pc.crash_states(log, model, u, rng=random.Random(7), limit=3)
            assert a == b
            assert len(a) == min(3, len(st))
            assert {s.digest for s in a} <= set(digests)


def _kill9(log: OpLog, upto: int) -> dict[str, bytes | None]:
    mdl = pc._Model(log, "posix")
    tree = pc._Tree(log, mdl.symlinks)
    for op in log.ops[:upto]:
        if op.kind in pc._CHANGES:
            tree.apply(op)
    return tree.files()


def test_rebuild_refuses_a_mutation_that_does_not_apply() -> None:
    log = log_of(SAFE, OLD)
    with pytest.raises(ValueError, match="not a pending operation"):
        pc.rebuild(log, "posix", 5, Mutation("drop", 1))  # fsynced
    with pytest.raises(ValueError, match="unknown mutation kind"):
        pc.rebuild(log, "posix", 2, Mutation("shred", 1))
    with pytest.raises(ValueError, match="zeros apply to a write"):
        pc.rebuild(log, "posix", 2, Mutation("zeros", 0))


def test_json_round_trip_of_the_log_keeps_every_state() -> None:
    log = log_of(
        f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/b", O_WRONLY|O_CREAT, 0644) = 3<{ROOT}/b>
        10 write({fd(3, "b")}, "\\0\\377\\n\\"", 4) = 4
        10 rename("{ROOT}/b", "{ROOT}/c") = 0
    ''',
        {f"{S}/c": b"\xff\x00old", f"{S}/d": None},
    )
    text = json.dumps(log.to_json())
    back = OpLog.from_json(json.loads(text))
    assert back == log
    for model in pc.MODELS:
        assert states(back, model) == states(log, model)
    m = Mutation("torn", 3, 512)
    assert Mutation.from_json(json.loads(json.dumps(m.to_json()))) == m
    with pytest.raises(ValueError, match="not a power-loss operation log"):
        OpLog.from_json({"ops": "nope"})
    bad = log.to_json()
    bad["ops"][0]["kind"] = "format_disk"
    with pytest.raises(ValueError, match="unknown kind"):
        OpLog.from_json(bad)
    bad = log.to_json()
    bad["ops"][1]["seq"] = 7
    with pytest.raises(ValueError, match="numbered"):
        OpLog.from_json(bad)


def test_write_ranges_and_event_points() -> None:
    log = log_of(f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/w", O_WRONLY|O_CREAT|O_APPEND, 0644) = 3<{ROOT}/w>
        10 write({fd(3, "w")}, "aaaa", 4) = 4
        10 write({fd(3, "w")}, "bb", 2) = 2
        10 rename("{ROOT}/w", "{ROOT}/wal") = 0
        10 ftruncate({fd(3, "wal")}, 5) = 0
    ''')
    assert pc.write_ranges(log, 3) == {f"{S}/w": [(0, 4), (4, 2)]}
    assert pc.write_ranges(log, 5) == {f"{S}/wal": [(0, 4), (4, 1)]}
    assert pc.write_ranges(log, 0) == {}
    times = [op.time for op in log.ops]
    assert pc.event_points(log, [0.0, times[1], times[1] + 0.5, 1e12]) == [0, 2, 2, 5]


def test_label_and_digest() -> None:
    log = log_of(SAFE, OLD)
    s = pc.rebuild(log, "posix", 4, Mutation("drop", 0))
    assert s.label() == (
        f"after op 4 (rename {S}/state.tmp to {S}/state.json), lost op 1 (create {S}/state.tmp)"
    )
    assert (
        pc.rebuild(log, "posix", 4, Mutation("synced_only"))
        .label()
        .endswith("only what was synced")
    )
    other = CrashState(upto=1, model="posix", mutation=Mutation("synced_only"), files=dict(s.files))
    assert other.digest == s.digest
    assert (
        CrashState(
            upto=1,
            model="posix",
            mutation=Mutation("synced_only"),
            files={**s.files, f"{S}/x": None},
        ).digest
        != s.digest
    )


# -- materialize --------------------------------------------------------------------------------


def _state(files: dict[str, bytes | None]) -> CrashState:
    return CrashState(upto=0, model="posix", mutation=Mutation("synced_only"), files=files)


def test_materialize_writes_exactly_the_state(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    (root / "stale").write_text("old")
    (root / "olddir" / "deep").mkdir(parents=True)
    files: dict[str, bytes | None] = {
        f"{S}/a.json": b"{}",
        f"{S}/d": None,
        f"{S}/d/e/f": b"\0\xff",
        "{workdir}/x": b"skipped",
    }
    written = pc.materialize(_state(files), {"state_dir": str(root)})
    assert sorted(written) == sorted(
        [str(root / "a.json"), str(root / "d"), str(root / "d" / "e" / "f")]
    )
    assert pc.snapshot({"state_dir": str(root)}) == {
        f"{S}/a.json": b"{}",
        f"{S}/d": None,
        f"{S}/d/e": None,
        f"{S}/d/e/f": b"\0\xff",
    }


@pytest.mark.parametrize(
    "bad",
    [
        "{state_dir}/../escape",
        "/etc/escape",
        "escape",
        "{state_dir}//x",
        "{state_dir}/./x",
        "{state_dir}/a/../../x",
        "{state_dir}/x\0y",
        "{state_dir}/",
    ],
)
def test_materialize_refuses_paths_that_leave_the_root(tmp_path: Path, bad: str) -> None:
    root = tmp_path / "state"
    root.mkdir()
    (root / "keep").write_text("untouched")
    with pytest.raises(ValueError, match="refused crash-state path"):
        pc.materialize(_state({f"{S}/ok": b"1", bad: b"evil"}), {"state_dir": str(root)})
    assert (root / "keep").read_text() == "untouched"  # refused before anything changed
    assert not (tmp_path / "escape").exists()
    assert sorted(os.listdir(tmp_path)) == ["state"]


def test_materialize_follows_no_symlink(tmp_path: Path) -> None:
    root = tmp_path / "state"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("precious")
    (root / "link").symlink_to(outside, target_is_directory=True)
    (root / "flink").symlink_to(outside / "victim")
    pc.materialize(
        _state({f"{S}/link/victim": b"evil", f"{S}/flink": b"evil"}), {"state_dir": str(root)}
    )
    assert (outside / "victim").read_text() == "precious"
    assert not (root / "link").is_symlink()
    assert (root / "link" / "victim").read_bytes() == b"evil"
    assert not (root / "flink").is_symlink()
    # a root that is itself a symlink is refused
    (tmp_path / "rootlink").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match=r"Too many levels of symbolic links|Not a directory"):
        pc.materialize(_state({f"{S}/x": b"1"}), {"state_dir": str(tmp_path / "rootlink")})
    assert sorted(os.listdir(outside)) == ["victim"]


def test_posix_reorder_loses_every_unsynced_write_before_the_rename() -> None:
    log = log_of(
        f'''
        10 openat(AT_FDCWD</w>, "{ROOT}/t", O_WRONLY|O_CREAT, 0644) = 3<{ROOT}/t>
        10 write({fd(3, "t")}, "one,", 4) = 4
        10 write({fd(3, "t")}, "two", 3) = 3
        10 rename("{ROOT}/t", "{ROOT}/state.json") = 0
    ''',
        OLD,
    )
    st = pc.crash_states(log, "posix", 4)
    [r] = [s for s in st if s.mutation.kind == "reorder"]
    assert r.mutation.op == 3
    assert r.files[f"{S}/state.json"] == b""  # drop of one write leaves the other: distinct
    assert {s.files[f"{S}/state.json"] for s in st if s.mutation.kind == "drop"} >= {
        b"\0\0\0\0two",
        b"one,",
    }
    assert r.explain.startswith(
        f"`{S}/state.json` was replaced by rename before its data was fsynced"
    )


def test_snapshot_reads_files_and_folders_but_no_link_fifo_or_too_much(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "sub").mkdir(parents=True)
    (root / "a.json").write_bytes(b'{"x": 1}')
    (root / "sub" / "b").write_bytes(b"\0\xff")
    outside = tmp_path / "outside"
    outside.write_bytes(b"secret")
    (root / "link").symlink_to(outside)
    os.mkfifo(root / "pipe")  # opening it for reading would block: never opened
    got = pc.snapshot({"state_dir": str(root)})
    assert got == {
        "{state_dir}/a.json": b'{"x": 1}',
        "{state_dir}/sub": None,
        "{state_dir}/sub/b": b"\0\xff",
    }
    with pytest.raises(ValueError, match="more than 4 bytes"):
        pc.snapshot({"state_dir": str(root)}, limit=4)


# -- the explanation names what the agent did and where the cut landed -------------------------


def test_a_cut_just_before_the_folder_fsync_says_so_never_no_fsync() -> None:
    log = log_of(SAFE, OLD)  # creat, write, fsync, rename, fsync of the folder
    for model in pc.MODELS:
        st = pc.crash_states(log, model, 4)  # after the rename, before the folder fsync
        back = [s for s in st if s.files.get(f"{S}/state.json") == b'{"step": 1}']
        assert back, model
        for s in back:
            assert "no fsync" not in s.explain, s.explain
            assert (
                f"the rename of `{S}/state.tmp` to `{S}/state.json` was not yet durable: the "
                f"cut came one operation before your folder fsync (`fsync {S}`, op 5): after "
                f"power loss the old `{S}/state.json` is back"
            ) in s.explain


def test_a_cut_before_the_files_own_fsync_counts_the_operations_to_it() -> None:
    log = log_of(SAFE, OLD)
    [empty] = [s for s in pc.crash_states(log, "posix", 2) if s.files.get(f"{S}/state.tmp") == b""]
    assert empty.explain == (
        f"`{S}/state.tmp` was written and the cut came one operation before your fsync "
        f"(`fsync {S}/state.tmp`, op 3): after power loss it can be empty or torn"
    )
    # an in-place rewrite fsynced two operations later: still exposed, and said so
    synced = NAIVE + (
        f'10 openat(AT_FDCWD</w>, "{ROOT}/log", O_WRONLY|O_CREAT|O_APPEND, 0644) = 4<{ROOT}/log>\n'
        f"10 fsync({fd(3, 'state.json')}) = 0\n"
    )
    log2 = log_of(synced, OLD)
    assert kinds(log2) == ["trunc", "write", "creat", "fsync"]
    for s in pc.crash_states(log2, "posix", 2):
        if s.files.get(f"{S}/state.json") != b'{"step": 2}':
            assert s.explain.startswith(
                f"`{S}/state.json` was rewritten in place (open with O_TRUNC, write) and the "
                f"cut came 2 operations before your fsync (`fsync {S}/state.json`, op 4): "
                "after power loss it can be empty or torn"
            ), s.explain
    # with no fsync anywhere after the cut, the words say that instead
    bare = log_of(NAIVE, OLD)
    assert all("without fsync" in s.explain for s in pc.crash_states(bare, "posix", 2))


def test_a_lost_sqlite_journal_removal_says_what_sqlite_documents() -> None:
    """SQLite (DELETE journal mode, synchronous=FULL) commits by removing its journal and
    does not sync the folder after it: a cut there brings the journal back and rolls the
    commit back. The explanation says so, and names the fix."""
    from crashpoint.faults import LogOp, OpLog, crash_states

    db, j = "{state_dir}/app.db", "{state_dir}/app.db-journal"
    ops = (
        LogOp(0, "creat", db, file=1),
        LogOp(1, "fsync", "{state_dir}"),
        LogOp(2, "creat", j, file=2),
        LogOp(3, "write", j, file=2, size=4, data=b"undo"),
        LogOp(4, "fsync", j, file=2),
        LogOp(5, "fsync", "{state_dir}"),
        LogOp(6, "write", db, file=1, size=4, data=b"rows"),
        LogOp(7, "fsync", db, file=1),
        LogOp(8, "unlink", j, file=2),
    )
    texts = [st.explain for st in crash_states(OpLog(ops=ops), "posix", len(ops))]
    back = [t for t in texts if "app.db-journal" in t and "it is back" in t]
    assert back, texts
    assert "PRAGMA synchronous=EXTRA" in back[0]
    # any other removal says nothing of SQLite
    other = (*ops[:8], LogOp(8, "unlink", "{state_dir}/app.db.tmp", file=2))
    assert not any(
        "SQLite" in st.explain for st in crash_states(OpLog(ops=other), "posix", len(ops))
    )
