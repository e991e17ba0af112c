"""The strace trace parser (hand-written traces) and real traces of small programs.

The hand-written traces are in the exact shapes strace 6.1 prints with ``-f -q -y``: pid
prefixes, ``<unfinished ...>`` / ``<... NAME resumed>`` pairs, quoted strings with escapes and
commas, nested braces, ``-y`` decorations with escaped ``<``/``>``, ``= ?`` of a call the
process was killed in, errors, signal and exit lines, a truncated last line. The real traces
run a Python program and a shell script under :func:`_strace.wrap` (skipped, with strace's
reason, where strace cannot trace); every process is reaped by the ``children`` fixture.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crashpoint.errors import CrashpointError
from crashpoint.faults import _strace
from crashpoint.faults._strace import Syscall, decode, parse_lines

OK, WHY = _strace.available()
needs_strace = pytest.mark.skipif(not OK, reason=f"strace cannot trace here: {WHY}")
FILE_CALLS = (
    "openat",
    "open",
    "creat",
    "write",
    "pwrite64",
    "rename",
    "renameat",
    "renameat2",
    "unlink",
    "unlinkat",
    "fsync",
    "fdatasync",
    "mkdir",
    "chdir",
)


def calls(text: str, cwd: str = "") -> list[Syscall]:
    return parse_lines(textwrap.dedent(text).strip("\n").splitlines(), cwd=cwd).calls


# -- hand-written traces ------------------------------------------------------------------------


def test_a_call_with_quotes_commas_and_parens_in_its_string() -> None:
    [c] = calls(r"""
        812   write(3</s/a.json>, "{\"a\": \"x, y) = 3\"}", 18) = 18
    """)
    assert (c.pid, c.name, c.result, c.errno, c.fd) == (812, "write", 18, "", 3)
    assert c.args == ("3</s/a.json>", r'"{\"a\": \"x, y) = 3\"}"', "18")
    assert c.path == "/s/a.json"
    assert c.path2 == ""
    assert decode(c.args[1]) == '{"a": "x, y) = 3"}'


def test_unfinished_and_resumed_calls_are_merged_in_start_order() -> None:
    out = calls("""
        10    write(4</s/j>, "abc", 3 <unfinished ...>
        11    read(5</s/r>,  <unfinished ...>
        10    <... write resumed>)              = 3
        11    <... read resumed>"xyz", 10)      = 3
        11    close(5</s/r> <unfinished ...>
        10    fsync(4</s/j>)                    = 0
        11    <... close resumed>)              = 0
    """)
    assert [(c.seq, c.pid, c.name, c.result) for c in out] == [
        (0, 10, "write", 3),
        (1, 11, "read", 3),
        (2, 11, "close", 0),
        (3, 10, "fsync", 0),
    ]
    assert out[0].args == ("4</s/j>", '"abc"', "3")
    assert out[1].args == ("5</s/r>", '"xyz"', "10")
    assert out[1].path == "/s/r"
    assert out[2].path == "/s/r"


def test_a_call_the_process_was_killed_in() -> None:
    t = parse_lines(
        textwrap.dedent("""
        7 openat(AT_FDCWD</w>, "/w/a.tmp", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666) = 3</w/a.tmp>
        7 write(3</w/a.tmp>, "y1", 2) = ?
        7 +++ killed by SIGKILL +++
        8 write(1<pipe:[99]>, "hi", 2 <unfinished ...>
        8 +++ killed by SIGKILL +++
        9 +++ exited with 0 +++
    """)
        .strip()
        .splitlines()
    )
    assert [(c.name, c.result, c.path) for c in t.calls] == [
        ("openat", 3, "/w/a.tmp"),
        ("write", None, "/w/a.tmp"),
        ("write", None, ""),
    ]
    assert t.killed(7)
    assert t.killed(8)
    assert not t.killed(9)
    assert t.exits == {7: "killed by SIGKILL", 8: "killed by SIGKILL", 9: "exited with 0"}


def test_errors_injections_and_signals() -> None:
    out = calls("""
        5 write(3</w/a>, "", 4096) = -1 ENOSPC (No space left on device)
        5 write(3</w/a>, "", 2) = -1 ENOSPC (No space left on device) (INJECTED)
        5 --- SIGCHLD {si_signo=SIGCHLD, si_code=CLD_EXITED, si_pid=6, si_status=0} ---
        5 --- SIGXFSZ {si_signo=SIGXFSZ, si_code=SI_USER, si_pid=5, si_uid=0} ---
        5 pwrite64(3</w/a>, "", 10, 0) = -1 EFBIG (File too large)
        5 openat(AT_FDCWD</w>, "nope", O_RDONLY) = -1 ENOENT (No such file or directory)
        5 restart_syscall(<... resuming interrupted read ...>) = 0
    """)
    assert [(c.name, c.result, c.errno, c.injected) for c in out] == [
        ("write", -1, "ENOSPC", False),
        ("write", -1, "ENOSPC", True),
        ("pwrite64", -1, "EFBIG", False),
        ("openat", -1, "ENOENT", False),
        ("restart_syscall", 0, "", False),
    ]
    assert out[3].path == "/w/nope"


def test_decorations_with_escaped_brackets_odd_bytes_and_deleted_files() -> None:
    name = r"d\303\251l\303\251"
    out = parse_lines(
        [
            rf'3 openat(AT_FDCWD</t/d>, "{name}<te>.txt", O_WRONLY|O_CREAT, 0666) '
            rf"= 3</t/d/{name}\74te\76.txt>",
            rf'3 write(3</t/d/{name}\74te\76.txt>(deleted), ""..., 2) = 2',
            r'3 openat(AT_FDCWD</t/d>, "bad\377name", O_WRONLY|O_CREAT, 0666) '
            r"= 4</t/d/bad\377name>",
            r'3 write(4</t/d/a,b\76c>, "x", 1) = 1',
        ]
    ).calls
    assert out[0].path == "/t/d/délé<te>.txt"
    assert out[1].path == "/t/d/délé<te>.txt"
    assert out[1].deleted
    assert out[1].fd == 3
    assert out[2].path == os.fsdecode(b"/t/d/bad\xffname")
    assert os.fsencode(out[2].path) == b"/t/d/bad\xffname"
    assert out[3].path == "/t/d/a,b>c"
    assert out[3].args[1:] == ('"x"', "1")


def test_relative_paths_resolve_against_the_dirfd_the_cwd_and_forks() -> None:
    out = calls(
        """
        1 openat(AT_FDCWD</home/u>, "s/a.tmp", O_WRONLY|O_CREAT, 0600) = 3</home/u/s/a.tmp>
        1 openat(5</data/dir>, "../x/./b", O_WRONLY) = 6</data/x/b>
        1 rename("s/a.tmp", "s/a") = 0
        1 renameat2(AT_FDCWD</home/u>, "s/a", 5</data/dir>, "c", RENAME_NOREPLACE) = 0
        1 chdir("/srv") = 0
        1 unlink("old") = 0
        1 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 2
        2 mkdir("new", 0777) = 0
        2 symlink("target", "lnk") = 0
        2 symlinkat("/abs", 5</data/dir>, "l2") = 0
        2 linkat(AT_FDCWD</srv>, "a", AT_FDCWD</srv>, "b", 0) = 0
        2 fsync(7) = 0
        3 unlink("who/knows") = 0
        2 newfstatat(9</srv/f>, "", {st_mode=S_IFREG|0644, st_size=3, ...}, AT_EMPTY_PATH) = 0
    """,
        cwd="/start",
    )
    got = [(c.name, c.path, c.path2, c.fd) for c in out]
    assert got == [
        ("openat", "/home/u/s/a.tmp", "", -1),
        ("openat", "/data/x/b", "", 5),
        ("rename", "/home/u/s/a.tmp", "/home/u/s/a", -1),
        ("renameat2", "/home/u/s/a", "/data/dir/c", -1),
        ("chdir", "/srv", "", -1),
        ("unlink", "/srv/old", "", -1),
        ("clone", "", "", -1),
        ("mkdir", "/srv/new", "", -1),
        ("symlink", "/srv/lnk", "/srv/target", -1),
        ("symlinkat", "/data/dir/l2", "/abs", -1),
        ("linkat", "/srv/a", "/srv/b", -1),
        ("fsync", "", "", 7),
        ("unlink", "/start/who/knows", "", -1),  # an unknown process: the starting folder
        ("newfstatat", "/srv/f", "", 9),
    ]


#: One trace with every shape ``_Parser._resolve`` tells apart: a dirfd decoration read once
#: for the path and for the folder it teaches, paths that need ``normpath`` and paths already
#: normal, descriptors decorated, deleted and plain, an injected error, a fork, a resumed
#: call, a killed one. Pinned field by field as the parser gave them before it was made
#: cheaper (issue 24): a field put in another's place (Syscall is made positionally), a path
#: left unnormalised or a folder not learned fails it.
PINNED = """
    10 1700000000.100000 openat(AT_FDCWD</w>, "a//b/./c/../d", O_WRONLY|O_CREAT, 0600) = 3</w/a/b/d>
    10 1700000000.200000 write(3</w/a/b/d>, "x,y", 3) = 3
    10 openat(AT_FDCWD</w>, "/abs/dir/", O_RDONLY|O_DIRECTORY) = 4</abs/dir>
    10 openat(AT_FDCWD</w>, "/.hid/f", O_RDONLY) = -1 ENOENT (No such file or directory)
    10 renameat2(AT_FDCWD</w>, "a//b/d", 4</abs/dir>, "./e", RENAME_NOREPLACE) = 0
    10 symlinkat("t", 4</abs/dir>, "l") = 0
    10 fsync(5) = 0
    10 pwrite64(6</x/y.db>(deleted), "\\0", 1, 0) = -1 ENOSPC (No space left on device) (INJECTED)
    10 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 11
    11 mkdir("sub/", 0777) = 0
    11 rename("/", "/r/./s") = -1 EBUSY (Device or resource busy)
    11 unlink("..//up" <unfinished ...>
    10 close(3</w/a/b/d>) = 0
    11 <... unlink resumed>) = 0
    12 1700000001.500000 openat(AT_FDCWD, "rel", O_RDONLY) = ?
    12 1700000001.600000 +++ killed by SIGKILL +++
    10 +++ exited with 0 +++
"""
# fmt: off
# seq, pid, name, result, errno, path, path2, fd, injected, deleted, path_arg, path2_arg, time
PINNED_CALLS = [
    (0, 10, "openat", 3, "", "/w/a/b/d", "", -1, False, False, "a//b/./c/../d", "", 1700000000.1),
    (1, 10, "write", 3, "", "/w/a/b/d", "", 3, False, False, "", "", 1700000000.2),
    (2, 10, "openat", 4, "", "/abs/dir", "", -1, False, False, "/abs/dir/", "", 0.0),
    (3, 10, "openat", -1, "ENOENT", "/.hid/f", "", -1, False, False, "/.hid/f", "", 0.0),
    (4, 10, "renameat2", 0, "", "/w/a/b/d", "/abs/dir/e", -1, False, False, "a//b/d", "./e", 0.0),
    (5, 10, "symlinkat", 0, "", "/abs/dir/l", "/abs/dir/t", -1, False, False, "l", "t", 0.0),
    (6, 10, "fsync", 0, "", "", "", 5, False, False, "", "", 0.0),
    (7, 10, "pwrite64", -1, "ENOSPC", "/x/y.db", "", 6, True, True, "", "", 0.0),
    (8, 10, "clone", 11, "", "", "", -1, False, False, "", "", 0.0),
    (9, 11, "mkdir", 0, "", "/w/sub", "", -1, False, False, "sub/", "", 0.0),
    (10, 11, "rename", -1, "EBUSY", "/", "/r/s", -1, False, False, "/", "/r/./s", 0.0),
    (11, 11, "unlink", 0, "", "/up", "", -1, False, False, "..//up", "", 0.0),
    (12, 10, "close", 0, "", "/w/a/b/d", "", 3, False, False, "", "", 0.0),
    (13, 12, "openat", None, "", "/start/rel", "", -1, False, False, "rel", "", 1700000001.5),
]
# fmt: on


def test_every_field_of_a_parse_is_pinned() -> None:
    trace = parse_lines(textwrap.dedent(PINNED).strip("\n").splitlines(), cwd="/start")
    fields = [f for f in Syscall.__slots__ if f not in ("args", "raw")]  # in field order
    assert [tuple(getattr(c, f) for f in fields) for c in trace.calls] == PINNED_CALLS
    by_seq = {c.seq: c for c in trace.calls}
    assert by_seq[4].args == (
        "AT_FDCWD</w>",
        '"a//b/d"',
        "4</abs/dir>",
        '"./e"',
        "RENAME_NOREPLACE",
    )
    assert by_seq[7].args == ("6</x/y.db>(deleted)", '"\\0"', "1", "0")
    assert by_seq[7].raw.startswith("pwrite64(6</x/y.db>(deleted), ")
    assert by_seq[11].raw == 'unlink("..//up") = 0'  # the two lines, merged
    assert by_seq[13].raw == 'openat(AT_FDCWD, "rel", O_RDONLY) = ?'
    assert trace.exits == {12: "killed by SIGKILL", 10: "exited with 0"}
    assert trace.ended == {12: 1700000001.6}
    assert trace.cwd_given
    assert not trace.truncated


def test_a_trace_says_whether_the_given_cwd_resolved_any_folder() -> None:
    """``cwd_given``: a parse with another ``cwd`` could differ (the golden run's recording
    shares one parse only when it cannot)."""
    learned = """
        1 openat(AT_FDCWD</home/u>, "s/a.tmp", O_WRONLY|O_CREAT, 0600) = 3</home/u/s/a.tmp>
        1 rename("s/a.tmp", "s/a") = 0
        1 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|SIGCHLD, child_tidptr=0x7f) = 2
        2 unlink("x") = 0
        1 fsync(3) = 0
    """
    lines = textwrap.dedent(learned).strip("\n").splitlines()
    a, b = parse_lines(lines, cwd="/start"), parse_lines(lines, cwd="")
    assert not a.cwd_given
    assert a == b  # the same calls, paths and numbers whatever the cwd
    assert [c.seq for c in a.calls] == list(range(5))
    guessed = [*lines, '3 unlink("who/knows") = 0']  # a process the trace never placed
    a, b = parse_lines(guessed, cwd="/start"), parse_lines(guessed, cwd="")
    assert a.cwd_given
    assert (a.calls[-1].path, b.calls[-1].path) == ("/start/who/knows", "")


def test_a_relative_path_without_a_known_folder_stays_unresolved() -> None:
    [c] = calls('1 unlink("x") = 0')
    assert c.path == ""
    assert c.args == ('"x"',)


def test_nested_braces_brackets_and_comments() -> None:
    out = calls("""
        4 openat2(AT_FDCWD</c>, "f", {flags=O_WRONLY|O_CREAT, mode=0644, resolve=0}, 24) = 3</c/f>
        4 writev(3</c/f>, [{iov_base="a,b", iov_len=3}, {iov_base="}]", iov_len=2}], 2) = 5
        4 ioctl(1</dev/pts/0>, TCGETS, {c_iflag=ICRNL|IXON, c_cc="\\x03,"}) = 0
        4 getdents64(3</c>, 0x55 /* 2 entries, really */, 32768) = 48
    """)
    assert out[0].args == (
        "AT_FDCWD</c>",
        '"f"',
        "{flags=O_WRONLY|O_CREAT, mode=0644, resolve=0}",
        "24",
    )
    assert out[0].path == "/c/f"
    assert out[0].result == 3
    assert len(out[1].args) == 3
    assert out[1].path == "/c/f"
    assert out[1].result == 5
    assert len(out[2].args) == 3
    assert out[3].args == ("3</c>", "0x55 /* 2 entries, really */", "32768")


def test_pid_bracket_prefix_and_timestamps() -> None:
    out = calls("""
        [pid  4242] 12:00:01.123456 unlink("/a/b") = 0
        openat(AT_FDCWD</a>, "c", O_RDONLY) = 3</a/c>
    """)
    assert [(c.pid, c.name, c.path) for c in out] == [
        (4242, "unlink", "/a/b"),
        (0, "openat", "/a/c"),
    ]


def test_a_truncated_last_line_is_ignored_in_a_live_file(tmp_path: Path) -> None:
    f = tmp_path / "trace"
    f.write_text('1 write(3</a>, "x", 1) = 1\n1 write(3</a>, "y", 1) = 1\n1 write(3</a>, "z"')
    t = _strace.read(str(f))
    assert [c.args[1] for c in t.calls] == ['"x"', '"y"']
    assert t.truncated
    f.write_text('1 write(3</a>, "x", 1) = 1\n1 write(3</a>, "y", 1) = 1\n')
    t = _strace.read(str(f))
    assert len(t.calls) == 2
    assert not t.truncated
    assert _strace.parse(str(tmp_path / "missing")) == []


def test_max_lines_bounds_the_work(tmp_path: Path) -> None:
    f = tmp_path / "trace"
    f.write_text("".join(f'1 write(3</a>, "{i}", 1) = 1\n' for i in range(50)))
    t = _strace.read(str(f), max_lines=10)
    assert len(t.calls) == 10
    assert t.truncated


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cwd of each trace :func:`_strace.parse_lines` parses from now on, in order."""
    seen: list[str] = []
    real = _strace.parse_lines

    def counting(lines: object, **kw: object) -> _strace.Trace:
        seen.append(str(kw.get("cwd")))
        return real(lines, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(_strace, "parse_lines", counting)
    return seen


def test_a_trace_read_again_unchanged_is_parsed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parses: list[str]
) -> None:
    """The golden run's trace is read for its temp-folder writes and again for what is learned
    from it: the second read reuses the parse; changed bytes, another cwd or a big file do
    not, and each caller gets lists of its own."""
    f = tmp_path / "trace"
    f.write_text('1 write(3</a>, "x", 1) = 1\n1 +++ exited with 0 +++\n')
    one = _strace.read(str(f), cwd="/w")
    two = _strace.read(str(f), cwd="/w")
    assert len(parses) == 1
    assert one == two
    assert one.calls is not two.calls
    assert one.exits is not two.exits
    one.calls.clear()
    assert len(_strace.read(str(f), cwd="/w").calls) == 1
    assert len(_strace.read(str(f), cwd="/v").calls) == 1  # another cwd: parsed again
    f.write_text('1 write(3</a>, "y", 1) = 1\n1 +++ exited with 0 +++\n')
    three = _strace.read(str(f), cwd="/w")  # the same size, other bytes: parsed again
    assert [c.args[1] for c in three.calls] == ['"y"']
    assert three.exits == {1: "exited with 0"}
    assert len(parses) == 3
    monkeypatch.setattr(_strace, "MEMO_BYTES", 10)  # bigger than this: streamed each time
    assert _strace.read(str(f), cwd="/w") == _strace.read(str(f), cwd="/w") == three
    assert len(parses) == 5


def test_interleaved_traces_are_each_parsed_once_within_the_memo_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parses: list[str]
) -> None:
    """A race's two attempts are each read twice, in turn (A, B, A, B): each is parsed once.
    The memo keeps the MEMO_TRACES read last, of MEMO_BYTES of trace together at most (the
    latest always): one read before those is parsed again."""
    monkeypatch.setattr(_strace, "_MEMO", type(_strace._MEMO)())
    files = []
    for n in range(_strace.MEMO_TRACES + 1):
        f = tmp_path / f"trace-{n}"
        f.write_text(f'1 write(3</a{n}>, "x", 1) = 1\n1 +++ exited with 0 +++\n')
        files.append(str(f))
    a, b = files[0], files[1]
    first = [_strace.read(a, cwd="/w"), _strace.read(b, cwd="/w")]
    again = [_strace.read(a, cwd="/w"), _strace.read(b, cwd="/w")]
    assert len(parses) == 2
    assert first == again
    assert [t.calls[0].path for t in again] == ["/a0", "/a1"]
    assert again[0].calls is not first[0].calls
    for f in files[2:]:  # a, b and these: one more than MEMO_TRACES; a was used longest ago
        _strace.read(f, cwd="/w")
    assert len(parses) == 2 + len(files) - 2
    _strace.read(b, cwd="/w")  # still kept
    assert len(parses) == len(files)
    assert _strace.read(a, cwd="/w").calls[0].path == "/a0"  # dropped: parsed again
    assert len(parses) == len(files) + 1
    size = os.path.getsize(a)
    monkeypatch.setattr(_strace, "MEMO_BYTES", size)  # room for one trace's parse only
    _strace.read(files[2], cwd="/w")  # dropped before: parsed, and now kept alone
    _strace.read(a, cwd="/w")
    assert len(parses) == len(files) + 3
    _strace.read(a, cwd="/w")  # the latest is always kept
    assert len(parses) == len(files) + 3


def test_garbage_lines_are_skipped() -> None:
    out = calls("""
        strace: Process 5 attached
        1 write(3</a>, "x", 1
        1 ????( <unfinished ...>
        1 <... frobnicate resumed>) = 0
        +++ exited with 0 +++
        1 unlink("/ok") = 0
    """)
    assert [(c.name, c.path) for c in out][-1] == ("unlink", "/ok")
    assert "write" not in [c.name for c in out]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(alphabet='0123456789 abcwrite()<>"\\,=?-+.[]{}/ATFDCW_unfished', max_size=80),
        max_size=12,
    )
)
def test_the_parser_never_raises(lines: list[str]) -> None:
    t = parse_lines(lines, cwd="/c")
    for c in t.calls:
        assert isinstance(c, Syscall)
        assert c.path == "" or c.path.startswith("/")


def test_decode_handles_every_escape() -> None:
    assert decode(r'"a\"b\\c\n\t\0\x41\101\377"') == os.fsdecode(b'a"b\\c\n\t\x00AA\xff')
    assert decode("plain") == "plain"


def test_available_can_be_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASHPOINT_NO_STRACE", "1")
    assert _strace.available() == (False, "disabled by CRASHPOINT_NO_STRACE")
    with pytest.raises(CrashpointError, match="disabled by CRASHPOINT_NO_STRACE"):
        _strace.wrap(["true"], "/tmp/x", syscalls=["write"])


@needs_strace
def test_wrap_builds_the_strace_command() -> None:
    argv = _strace.wrap(
        ["prog", "--flag"],
        "/o/trace",
        syscalls=["openat", "?open"],
        inject=["openat:signal=KILL:when=2"],
        paths=["/s/a b"],
    )
    assert argv[0] == shutil.which("strace")
    assert argv[-3:] == ["--", "prog", "--flag"]
    i = argv.index("-o")
    assert argv[i + 1] == "/o/trace"
    assert "trace=?openat,?open" in argv
    assert "inject=openat:signal=KILL:when=2" in argv
    assert argv[argv.index("-P") + 1] == "/s/a b"
    assert {"-f", "-y", "-q"} <= set(argv)
    assert "-qq" not in argv
    assert "--seccomp-bpf" not in argv  # it would switch the injected SIGKILL off


# -- real traces --------------------------------------------------------------------------------

SAVER = textwrap.dedent("""
    import json, os, sys
    d = sys.argv[1]
    for i in range(2):
        tmp = os.path.join(d, "ckpt.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"i": i, "s": "a, b) = 1"}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(d, "ckpt.json"))
    os.chdir(d)
    with open("rel.txt", "w") as f:
        f.write("x")
    os.unlink("rel.txt")
    print("saved", flush=True)
    sys.stdin.readline()
""")


def _mine(trace: list[Syscall], root: Path) -> list[tuple[str, str, str, int | None]]:
    r = str(root)
    return [
        (c.name, c.path.replace(r, "R"), c.path2.replace(r, "R"), c.result)
        for c in trace
        if c.path.startswith(r + "/") and "O_RDONLY" not in c.raw and c.name != "chdir"
    ]


@needs_strace
def test_a_real_python_program_traced_and_read_while_it_runs(tmp_path: Path, children) -> None:
    prog = tmp_path / "saver.py"
    prog.write_text(SAVER)
    state = tmp_path / "st ate"
    state.mkdir()
    out = str(tmp_path / "trace")
    argv = _strace.wrap([sys.executable, str(prog), str(state)], out, syscalls=FILE_CALLS)
    child = children.spawn(argv)
    assert child.read_line() == "saved"
    live = _mine(_strace.parse(out), state)  # strace writes each line as the call ends
    child.send("go")
    assert child.wait() == 0
    t = _strace.read(out)
    want = [
        ("openat", "R/ckpt.json.tmp", "", 3),
        ("write", "R/ckpt.json.tmp", "", 26),
        ("fsync", "R/ckpt.json.tmp", "", 0),
        ("rename", "R/ckpt.json.tmp", "R/ckpt.json", 0),
    ] * 2 + [
        ("openat", "R/rel.txt", "", 3),
        ("write", "R/rel.txt", "", 1),
        ("unlink", "R/rel.txt", "", 0),
    ]
    assert _mine(t.calls, state) == want
    assert live == want
    assert list(t.exits.values()) == ["exited with 0"]


@needs_strace
def test_a_kill_injected_at_a_write_leaves_it_undone(tmp_path: Path, children) -> None:
    prog = tmp_path / "saver.py"
    prog.write_text(SAVER)
    state = tmp_path / "state"
    state.mkdir()
    out = str(tmp_path / "trace")
    tmp = str(state / "ckpt.json.tmp")
    argv = _strace.wrap(
        [sys.executable, str(prog), str(state)],
        out,
        syscalls=["openat", "write"],
        paths=[tmp],
        inject=["openat:signal=KILL:when=2"],
    )
    child = children.spawn(argv)
    assert child.wait() == -9
    t = _strace.read(out)
    assert [(c.name, c.path, c.result) for c in t.calls] == [
        ("openat", tmp, 3),
        ("write", tmp, 26),
        ("openat", tmp, None),
    ]
    assert t.killed(t.calls[-1].pid)
    # killed on entering the 2nd open: ckpt.json.tmp was renamed away and never re-created
    assert sorted(os.listdir(state)) == ["ckpt.json"]
    assert '"i": 0' in (state / "ckpt.json").read_text()


@needs_strace
def test_a_real_shell_script_traced(tmp_path: Path, children) -> None:
    sh = shutil.which("sh") or "/bin/sh"
    state = tmp_path / "state"
    state.mkdir()
    script = tmp_path / "agent.sh"
    script.write_text('cd "$1" && printf \'{"n": 1}\' > s.tmp && mv s.tmp s.json && mkdir d\n')
    out = str(tmp_path / "trace")
    child = children.spawn(_strace.wrap([sh, str(script), str(state)], out, syscalls=FILE_CALLS))
    assert child.wait() == 0
    mine = _mine(_strace.parse(out), state)
    names = [(n, p, p2) for n, p, p2, _ in mine]
    assert ("openat", "R/s.tmp", "") in names
    assert ("write", "R/s.tmp", "") in names
    assert any(n.startswith("rename") and p == "R/s.tmp" and p2 == "R/s.json" for n, p, p2 in names)
    assert ("mkdir", "R/d", "") in names
    assert (state / "s.json").read_text() == '{"n": 1}'


@pytest.mark.parametrize("stamp", ["", "1763900000.123456 "], ids=["plain", "ttt"])
def test_the_detacher_ends_a_trace_its_command_left_running_and_signals_only_tracees(
    tmp_path: Path, stamp: str
) -> None:
    """A trace whose command exited while strace (here a stand-in) still runs: the Detacher
    reports the command's exit status (lines with ``-ttt`` times read alike) and kills the
    stand-in. The pids the trace names are not traced by it (stand-ins, or pids reused since):
    none is signalled, none is counted as left."""
    import subprocess

    from crashpoint._proc import Exit
    from crashpoint.faults import Detacher

    procs = [subprocess.Popen(["sleep", "30"], start_new_session=True) for _ in range(5)]
    try:
        strace, cmd, a, b, c = (p.pid for p in procs)
        out = tmp_path / "trace"
        out.write_text(
            f'{cmd} {stamp}execve("/bin/agent", ["agent"], 0x0 /* 0 vars */) = 0\n'
            f"{cmd} {stamp}clone(child_stack=NULL, flags=CLONE_CHILD) = {a}\n"
            f'{a} {stamp}write(3, "1\\n", 2) = 2\n'
            f'{b} {stamp}write(3, "1\\n", 2) = 2\n'
            f"{cmd} {stamp}+++ exited with 3 +++\n"
            f'{c} {stamp}write(3, "1\\n", 2) = 2\n'
        )
        d = Detacher(strace, str(out), interval=0.01)
        assert procs[0].wait(timeout=20) == -9  # killed: the command had exited, it had not
        d.stop()
        assert d.detached
        assert d.exit_code == 3
        assert d.left == ()
        assert [p.poll() for p in procs[1:]] == [None] * 4  # not traced by it: not touched
        ex = d.exit(Exit(-9, 9, False, 0.1, b"", b""))
        assert (ex.returncode, ex.signal, ex.orphans) == (3, None, ())
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_the_detacher_finds_a_re_forking_helper_the_trace_never_shows(tmp_path: Path) -> None:
    """Real strace, as the harness runs it (``--seccomp-bpf`` where it works, ``-P`` on the
    trial's folder): the agent starts a helper in a new session that re-forks every 10 ms and
    touches nothing the trace keeps, then exits 0. The Detacher names the helper's processes
    as left, every one of them is dead when it returns, and the exit status is the agent's.
    (It once looked only at the pids the trace printed, so this helper was never counted and
    died unseen once strace was gone.)"""
    import subprocess
    import sys
    import textwrap
    import time

    from crashpoint._proc import Exit
    from crashpoint.faults import Detacher, _strace

    if not _strace.available()[0]:
        pytest.skip(f"strace unavailable: {_strace.available()[1]}")
    beats = tmp_path / "beats"
    helper = tmp_path / "helper.py"
    helper.write_text(
        textwrap.dedent("""
        import os, sys, time
        while not os.path.exists(sys.argv[1] + ".stop"):  # the test's own clean-up
            if os.fork():
                os._exit(0)
            with open(sys.argv[1], "a") as f:
                f.write("%d\\n" % os.getpid())
            time.sleep(0.01)
    """)
    )
    agent = tmp_path / "agent.py"
    agent.write_text(
        textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, {str(helper)!r}, {str(beats)!r}],
                         start_new_session=True, stdin=subprocess.DEVNULL)
        time.sleep(0.3)
        open({str(tmp_path / "state" / "done")!r}, "w").close()
    """)
    )
    (tmp_path / "state").mkdir()
    out = str(tmp_path / "trace")
    argv = _strace.wrap(
        [sys.executable, str(agent)],
        out,
        syscalls=["openat", "write"],
        paths=[str(tmp_path / "state")],
    )
    p = subprocess.Popen(argv, start_new_session=True)
    try:
        d = Detacher(p.pid, out, interval=0.01)
        rc = p.wait(timeout=30)
        # as the harness does: at once (strace ends when the last process it traced is
        # killed, maybe before the Detacher has counted it: exit() waits for the count)
        ex = d.exit(Exit(rc, None, False, 0.1, b"", b""))
        assert (tmp_path / "state" / "done").exists()
        assert beats.read_text().split()  # the helper ran
        assert d.detached, rc
        assert d.left
        beat = {int(x) for x in beats.read_text().split()}
        # a left pid wrote a heartbeat, or is the newest fork, killed before it could write one
        assert beat & set(d.left) or min(d.left) > max(beat), (sorted(beat)[-5:], d.left)
        assert (ex.returncode, ex.signal, ex.orphans) == (0, None, d.left)
        time.sleep(0.2)
        size = beats.stat().st_size
        time.sleep(0.3)
        assert beats.stat().st_size == size  # no heartbeat since: nothing of it runs
        assert not [q for q in d.left if _strace._alive(q)]
    finally:
        (tmp_path / "beats.stop").touch()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def test_the_detacher_leaves_a_trace_that_ends_by_itself_alone(tmp_path: Path) -> None:
    """The command exited and strace ended on its own (nothing left): no kill, no orphans."""
    import subprocess
    import time

    from crashpoint._proc import Exit
    from crashpoint.faults import Detacher

    out = tmp_path / "trace"
    out.write_text(
        '100 execve("/bin/agent", ["agent"], 0x0 /* 0 vars */) = 0\n100 +++ exited with 0 +++\n'
    )
    stand_in = subprocess.Popen(["sleep", "0.05"], start_new_session=True)
    d = Detacher(stand_in.pid, str(out), interval=0.01)
    assert stand_in.wait(timeout=10) == 0
    time.sleep(0.5)
    d.stop()
    assert not d.detached
    ex = Exit(0, None, False, 0.1, b"", b"")
    assert d.exit(ex) is ex
