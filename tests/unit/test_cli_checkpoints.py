"""`crashpoint checkpoints ...` on a store the Store API produced: in-process and as a real process.

The store holds three runs: ``done`` (completed, 3 records), ``busy`` (running, 2 records,
``steps_done`` in its meta) and ``flipped`` (running, 3 records, one bit flipped in the payload
of its second record).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from crashpoint import __version__
from crashpoint.checkpoint import RunJournal, Secret, Store
from crashpoint.cli import main
from crashpoint.cli._framework import STORE_ENV
from crashpoint.harness import format_size

CANARY = "sk-canary-5f1e0c"


@dataclass(frozen=True)
class Built:
    root: Path
    flipped_segment: Path
    flipped_offset: int  # where the damaged record starts


def _age(folder: Path, seconds: float) -> None:
    """Make every file of a run look last written ``seconds`` ago."""
    t = time.time() - seconds
    for p in folder.iterdir():
        os.utime(p, (t, t), follow_symlinks=False)


@pytest.fixture
def built(tmp_path: Path) -> Built:
    root = tmp_path / "store"
    store = Store(root, durability="none")
    with store.open("done") as j:
        for i in range(3):
            j.append({"step": f"step-{i}", "result": i})
        j.set_meta(status="completed")
    with store.open("busy") as j:
        j.append({"step": "fetch", "api_key": CANARY})
        j.append({"step": "plan", "token": Secret(CANARY)})
        j.set_meta(status="running", steps_done=2)
    with store.open("flipped") as j:
        for i in range(3):
            j.append({"step": f"step-{i}", "result": "x" * 40})
        j.set_meta(status="running")
    seg = root / "flipped" / "seg-000000000001.log"
    buf = bytearray(seg.read_bytes())
    (first_len,) = struct.unpack_from("<I", buf, 4)
    second = 16 + first_len
    buf[second + 16 + 5] ^= 0x10  # one bit inside the second record's JSON payload
    seg.write_bytes(bytes(buf))
    return Built(root, seg, second)


@pytest.fixture
def held(built: Built) -> Iterator[RunJournal]:
    """``busy`` held open (its flock taken) as a live agent would."""
    j = Store(built.root, durability="none").open("busy")
    try:
        yield j
    finally:
        j.close()


def run(capsys: pytest.CaptureFixture[str], root: Path | None, *argv: str) -> tuple[int, str, str]:
    head = ["checkpoints"] + (["--store", str(root)] if root is not None else [])
    code = main([*head, *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def run_process(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crashpoint.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


# -- list -------------------------------------------------------------------------------------


def test_list_shows_status_steps_size_age_generation_and_lock(
    built: Built, held: RunJournal, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, built.root, "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["RUN", "STATUS", "STEPS", "SIZE", "AGE", "GEN", "LOCKED"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert sorted(rows) == ["busy", "done", "flipped"]
    # busy: steps from meta; generation 2 because `held` acquired it a second time
    assert rows["busy"][1:3] == ["running", "2"]
    assert rows["busy"][-2:] == ["2", "yes"]
    assert rows["done"][1:3] == ["completed", "3"]  # no steps_done in meta: journal records
    assert rows["done"][-2:] == ["1", "no"]
    assert rows["flipped"][1:3] == ["running", "corrupt"]
    size = sum(p.stat().st_size for p in (built.root / "done").iterdir())
    assert " ".join(rows["done"][3:5]) == format_size(size)  # human units: "299 B"
    assert rows["done"][5].endswith(("ms", "s"))  # human age: written moments ago


def test_list_json_and_unknown_status(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    (built.root / "done" / "meta.json").unlink()
    code, out, _ = run(capsys, built.root, "list", "--json")
    assert code == 0
    by_id = {r["run_id"]: r for r in json.loads(out)}
    assert by_id["done"]["status"] == "unknown"
    assert by_id["done"]["steps_done"] == 3
    assert by_id["busy"]["steps_done"] == 2
    assert by_id["flipped"]["steps_done"] is None
    assert by_id["flipped"]["problem"] == "corrupt"
    assert by_id["busy"]["locked"] is False
    assert by_id["busy"]["generation"] == 1
    assert by_id["busy"]["size"] == sum(p.stat().st_size for p in (built.root / "busy").iterdir())


def test_list_empty_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, tmp_path, "list")
    assert (code, out) == (0, f"no runs in {tmp_path}\n")


# -- show -------------------------------------------------------------------------------------


def test_show_prints_meta_generation_seq_files_and_state(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, built.root, "show", "busy")
    assert code == 0
    assert "status:     running" in out
    assert "generation: 1" in out
    assert "seq:        2 (records written by generation 1)" in out
    assert "snapshot:   none (2 records in the journal)" in out
    assert '"steps_done": 2' in out
    for name in ("lock", "meta.json", "seg-000000000001.log"):
        assert f"  {name} " in out
    assert '"step": "fetch"' in out
    assert '"api_key": "[redacted]"' in out
    assert CANARY not in out


def test_show_json_reports_snapshot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path, durability="none")
    with store.open("snapped") as j:
        j.append({"n": 1})
        j.append({"n": 2})
        j.snapshot()
        j.append({"n": 3})
    code, out, _ = run(capsys, tmp_path, "show", "snapped", "--json")
    assert code == 0
    got = json.loads(out)
    assert got["seq"] == 3
    assert got["snapshot"]["seq"] == 2
    assert got["state"] == {"records": [{"n": 1}, {"n": 2}, {"n": 3}]}
    assert [f["name"] for f in got["files"]] == [
        "lock",
        "seg-000000000003.log",
        "snap-000000000002.cps",
    ]


def test_show_corrupt_run_names_file_and_offset_and_exits_1(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, built.root, "show", "flipped")
    assert code == 1
    assert "run:        flipped" in out  # what can be shown without the journal still is
    assert f"{built.flipped_segment} at byte {built.flipped_offset}: payload checksum" in err
    code, out, _ = run(capsys, built.root, "show", "flipped", "--json")
    assert code == 1
    error = json.loads(out)["error"]
    assert (error["path"], error["offset"]) == (str(built.flipped_segment), built.flipped_offset)


# -- verify -----------------------------------------------------------------------------------


def test_verify_finds_the_bit_flip_naming_file_and_offset(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, built.root, "verify")
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        f"{built.flipped_segment} at byte {built.flipped_offset}: payload checksum mismatch"
    )
    assert lines[-1].startswith("damage: 1 problem in 1 of 3 runs")


def test_verify_one_clean_run_and_all_clean_runs(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, built.root, "verify", "busy")[:2] == (0, "ok: 1 run, 1 file verified\n")
    assert run(capsys, built.root, "verify", "flipped")[0] == 1
    shutil.rmtree(built.root / "flipped")
    assert run(capsys, built.root, "verify")[:2] == (0, "ok: 2 runs, 2 files verified\n")


def test_verify_reports_a_torn_tail_as_a_note_not_damage(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    seg = built.root / "done" / "seg-000000000001.log"
    size = seg.stat().st_size
    with seg.open("ab") as f:
        f.write(b"CP\x01\x00\x07")  # a crash five bytes into the next record's header
    code, out, _ = run(capsys, built.root, "verify", "done")
    assert code == 0
    assert out.splitlines() == [
        f"note: {seg}: 5 bytes of a partial record at byte {size} (incomplete header (5 bytes)); "
        "repaired on the next open, not damage",
        "ok: 1 run, 1 file verified",
    ]


def test_verify_json(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, built.root, "verify", "--json")
    assert code == 1
    got = json.loads(out)
    assert got["ok"] is False
    assert got["damage"] == [
        {
            "run_id": "flipped",
            "path": str(built.flipped_segment),
            "offset": built.flipped_offset,
            "reason": "payload checksum mismatch",
        }
    ]


def test_verify_as_a_real_process(built: Built) -> None:
    proc = run_process("checkpoints", "--store", str(built.root), "verify")
    assert proc.returncode == 1, proc.stderr
    assert f"{built.flipped_segment} at byte {built.flipped_offset}: " in proc.stdout
    assert proc.stderr == ""


# -- stale ------------------------------------------------------------------------------------


def test_stale_lists_unfinished_unlocked_old_runs_and_exits_1(
    built: Built, held: RunJournal, capsys: pytest.CaptureFixture[str]
) -> None:
    for rid in ("done", "busy", "flipped"):
        _age(built.root / rid, 2 * 3600)
    (built.root / "nometa").mkdir(mode=0o700)
    (built.root / "nometa" / "seg-000000000001.log").write_bytes(b"")
    _age(built.root / "nometa", 3 * 3600)
    code, out, err = run(capsys, built.root, "stale", "--older-than", "30m")
    assert code == 1
    # done is finished, busy is held by a live process: neither is stale
    assert out.splitlines() == ["flipped status=running age=2h", "nometa status=unknown age=3h"]
    assert err == ""
    code, out, _ = run(capsys, built.root, "stale", "--older-than", "150m", "--json")
    assert code == 1
    assert [(r["run_id"], r["status"]) for r in json.loads(out)] == [("nometa", "unknown")]


def test_stale_prints_nothing_and_exits_0_when_none(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, built.root, "stale", "--older-than", "30m") == (0, "", "")
    for rid in ("busy", "flipped"):
        _age(built.root / rid, 600)
    assert run(capsys, built.root, "stale", "--older-than", "30m") == (0, "", "")
    assert run(capsys, built.root, "stale", "--older-than", "5m")[0] == 1


def test_stale_as_a_real_process_with_the_store_from_the_environment(built: Built) -> None:
    env = {STORE_ENV: str(built.root)}
    proc = run_process("checkpoints", "stale", "--older-than", "30m", env=env)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    _age(built.root / "busy", 3600)
    proc = run_process("checkpoints", "stale", "--older-than", "30m", env=env)
    assert (proc.returncode, proc.stdout) == (1, "busy status=running age=1h\n"), proc.stderr


# -- prune ------------------------------------------------------------------------------------


def test_prune_removes_only_the_completed_run(
    built: Built, capsys: pytest.CaptureFixture[str]
) -> None:
    with Store(built.root).open("done") as j:  # finished by its journal, not only its meta
        j.append({"t": "finish", "status": "completed"})
    for rid in ("done", "busy", "flipped"):
        _age(built.root / rid, 3 * 86400)
    code, out, _ = run(capsys, built.root, "prune", "--older-than", "1d", "--dry-run")
    assert code == 0
    assert out.splitlines()[0].startswith("would remove done status=completed size=")
    assert (built.root / "done").is_dir()
    code, out, _ = run(capsys, built.root, "prune", "--older-than", "1d")
    assert code == 0
    assert out.splitlines()[0].startswith("removed done status=completed size=")
    assert out.splitlines()[-1].startswith("removed 1 run, ")
    assert sorted(p.name for p in built.root.iterdir() if p.name != ".store-lock") == [
        "busy",
        "flipped",
    ]
    assert run(capsys, built.root, "prune", "--keep", "0")[:2] == (0, "nothing to prune\n")


def test_prune_keep_and_max_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path, durability="none")
    for i, rid in enumerate(["a", "b", "c"]):
        with store.open(rid) as j:
            j.append({"blob": "z" * 2000})
            j.append({"t": "finish", "status": "completed"})
            j.set_meta(status="completed")
        _age(tmp_path / rid, 100 - i)  # a is the oldest
    code, out, _ = run(capsys, tmp_path, "prune", "--keep", "2", "--json")
    assert code == 0
    assert [r["run_id"] for r in json.loads(out)["removed"]] == ["a"]
    code, out, _ = run(capsys, tmp_path, "prune", "--max-bytes", "3KiB")
    assert code == 0
    assert out.startswith("removed b status=completed")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".store-lock") == ["c"]


def test_prune_never_removes_a_locked_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = Store(tmp_path, durability="none")
    with store.open("finishing") as j:
        j.set_meta(status="completed")
        _age(tmp_path / "finishing", 86400)
        assert run(capsys, tmp_path, "prune", "--older-than", "1h")[:2] == (0, "nothing to prune\n")
    assert (tmp_path / "finishing").is_dir()


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["stale", "--older-than", "30"], "argument --older-than: '30' has no unit"),
        (["stale", "--older-than", "soon"], "argument --older-than: 'soon' is not a duration"),
        (["stale"], "the following arguments are required: --older-than"),
        (["prune", "--older-than", "5x"], "unknown unit 'x' in '5x'"),
        (["prune", "--older-than=-5m"], "'-5m' is negative"),
        (["prune", "--max-bytes", "10k"], "KB means powers of 1000, KiB powers of 1024"),
        (["prune", "--keep", "-1"], "argument --keep: -1 is negative"),
        (["prune", "--keep", "two"], "argument --keep: 'two' is not a whole number"),
        (["prune"], "prune needs a limit: --older-than DURATION, --keep N or --max-bytes SIZE"),
        (["show", "../escape"], "invalid run id '../escape': it contains a path separator"),
        (["show", "nope"], "no run 'nope' in "),
        (["verify", "nope"], "no run 'nope' in "),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        ([], "the following arguments are required: SUBCOMMAND"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(
    built: Built, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, built.root, *argv)
    assert code == 2
    assert out == ""
    assert message in err
    assert "crashpoint: error: " in err


def test_the_store_comes_from_the_option_or_the_environment(
    built: Built, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(STORE_ENV, raising=False)
    code, _, err = run(capsys, None, "list")
    assert code == 2
    assert "no store given: pass --store DIR or set CRASHPOINT_STORE=DIR" in err
    monkeypatch.setenv(STORE_ENV, str(built.root / "missing"))
    code, _, err = run(capsys, None, "list")
    assert code == 2
    assert f"no store at {built.root / 'missing'} (from CRASHPOINT_STORE)" in err
    assert run(capsys, None, "list", "--store", str(built.root))[0] == 0  # option wins, after too
    monkeypatch.setenv(STORE_ENV, str(built.root))
    assert run(capsys, None, "verify", "busy")[:2] == (0, "ok: 1 run, 1 file verified\n")
    code, _, err = run(capsys, built.root / "done" / "lock", "list")
    assert code == 2
    assert "is not a folder" in err


def test_bad_duration_as_a_real_process_is_exit_2_without_traceback(built: Built) -> None:
    proc = run_process("checkpoints", "--store", str(built.root), "stale", "--older-than", "30")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "crashpoint: error: argument --older-than: '30' has no unit" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"crashpoint {__version__}\n"
    assert main(["checkpoints", "--help"]) == 0
    out = capsys.readouterr().out
    for name in ("list", "show", "verify", "prune", "stale"):
        assert f"    {name} " in out
    proc = run_process("--version")
    assert (proc.returncode, proc.stdout) == (0, f"crashpoint {__version__}\n")
