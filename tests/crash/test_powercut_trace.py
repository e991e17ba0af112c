"""Power-loss crash states of real programs traced with strace (few, small, quick).

Each program saves a JSON ``state.json`` one way; strace records it (``_strace.wrap`` with
``_powercut.SYSCALLS``, ``STRSIZE``, ``timestamps=True``), and the crash states of every point
under both models are checked: the naive ``open("w")`` + ``json.dump`` can be left empty or
torn (and the explanation says so); temp + fsync + ``os.replace`` + folder fsync never loses
the data or leaves a half rename; fsync without the folder fsync can lose the rename under
``posix`` (named); a shell ``printf > f.tmp; mv f.tmp f`` is parsed into the same operations.
Skipped, with strace's reason, where strace cannot trace. Every process is reaped by the
``children`` fixture.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from crashpoint.faults import _powercut as pc
from crashpoint.faults import _strace

OK, WHY = _strace.available()
pytestmark = pytest.mark.skipif(not OK, reason=f"strace cannot trace here: {WHY}")

S = "{state_dir}"
OLD = {"step": 1}
NEW = {"step": 2, "items": list(range(40))}

AGENT = textwrap.dedent("""
    import json, os, sys
    mode, d = sys.argv[1], sys.argv[2]
    p = os.path.join(d, "state.json")
    new = {"step": 2, "items": list(range(40))}
    if mode == "naive":
        with open(p, "w") as f:
            json.dump(new, f)
    else:
        t = p + ".tmp"
        with open(t, "w") as f:
            json.dump(new, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(t, p)
        if mode == "safe":
            dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            os.fsync(dfd)
            os.close(dfd)
""")


def record(tmp_path: Path, children, argv: list[str]) -> pc.OpLog:
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.json").write_text(json.dumps(OLD))
    roots = {"state_dir": str(state)}
    initial = pc.snapshot(roots)
    out = str(tmp_path / "trace.txt")
    child = children.spawn(
        _strace.wrap(
            [a.replace("@STATE", str(state)) for a in argv],
            out,
            syscalls=pc.SYSCALLS,
            strsize=pc.STRSIZE,
            timestamps=True,
        ),
        cwd=state,
    )
    assert child.wait(timeout=60) == 0, child.stderr_text()
    return pc.oplog(_strace.read(out, cwd=str(state)), roots, initial=initial)


def python_agent(tmp_path: Path, children, mode: str) -> pc.OpLog:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return record(tmp_path, children, [sys.executable, str(script), mode, "@STATE"])


def every_state(log: pc.OpLog) -> list[pc.CrashState]:
    return [
        s
        for model in pc.MODELS
        for u in range(len(log.ops) + 1)
        for s in pc.crash_states(log, model, u)
    ]


def test_naive_open_w_json_dump_can_be_left_empty_and_is_explained(
    tmp_path: Path, children
) -> None:
    log = python_agent(tmp_path, children, "naive")
    assert [op.kind for op in log.ops] == ["trunc", "write"], log.ops
    assert log.ops[1].data == json.dumps(NEW).encode()
    for model in pc.MODELS:
        bad = [
            s
            for s in pc.crash_states(log, model, 2)
            if s.files[f"{S}/state.json"] in (b"", bytes(log.ops[1].size))
        ]
        assert bad, model
        assert (
            "was rewritten in place (open with O_TRUNC, write) without fsync: after power "
            "loss it can be empty or torn" in bad[0].explain
        )


def test_temp_fsync_replace_and_folder_fsync_never_loses_the_state(
    tmp_path: Path, children
) -> None:
    log = python_agent(tmp_path, children, "safe")
    assert [op.kind for op in log.ops] == ["creat", "write", "fsync", "rename", "fsync"]
    good = (json.dumps(OLD).encode(), json.dumps(NEW).encode())
    st = every_state(log)
    assert st  # there were crash states: the check below had something to judge
    for s in st:
        assert s.files[f"{S}/state.json"] in good, (s.label(), s.lost)
    assert pc.crash_states(log, "posix", len(log.ops)) == []


def test_fsync_without_folder_fsync_can_lose_the_rename_under_posix(
    tmp_path: Path, children
) -> None:
    log = python_agent(tmp_path, children, "nodirsync")
    assert [op.kind for op in log.ops] == ["creat", "write", "fsync", "rename"]
    st = pc.crash_states(log, "posix", len(log.ops))
    back = [s for s in st if s.files[f"{S}/state.json"] == json.dumps(OLD).encode()]
    assert back
    assert (
        f"the rename of `{S}/state.json.tmp` to `{S}/state.json` was not made durable (no "
        f"fsync of its folder `{S}`)"
    ) in back[0].explain


def test_a_shell_agent_printf_then_mv(tmp_path: Path, children) -> None:
    log = record(
        tmp_path,
        children,
        ["sh", "-c", "printf '{\"step\": %s}\\n' 2 > f.tmp && mv f.tmp state.json"],
    )
    assert [(op.kind, op.path, op.path2) for op in log.ops] == [
        ("creat", f"{S}/f.tmp", ""),
        ("write", f"{S}/f.tmp", ""),
        ("rename", f"{S}/f.tmp", f"{S}/state.json"),
    ]
    assert log.ops[1].data == b'{"step": 2}\n'
    assert len({op.file for op in log.ops}) == 1
    empty = [s for s in pc.crash_states(log, "posix", 3) if s.files[f"{S}/state.json"] == b""]
    assert empty
    assert empty[0].explain == (
        f"`{S}/state.json` was replaced by rename before its data was "
        "fsynced: after power loss it can be empty"
    )
    # materialised into a fresh folder: exactly that tree
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    pc.materialize(empty[0], {"state_dir": str(fresh)})
    assert sorted(os.listdir(fresh)) == sorted(p.rsplit("/", 1)[1] for p in empty[0].files)
    assert (fresh / "state.json").read_bytes() == b""
