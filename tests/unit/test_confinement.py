"""Faults stay inside the trial: a corruption touches only regular files inside its roots (the
trial's state and work folders), never through a symbolic link (to a file or a folder, planted
before the walk or swapped in after it), never a file whose bytes are shared through a hard
link; and a real corrupt campaign whose agent plants such links leaves a sentinel file outside
the trial exactly as it was."""

from __future__ import annotations

import glob
import hashlib
import os
import random
import shutil
import stat
import textwrap
from pathlib import Path

import pytest

from _forked import run_forked
from crashpoint.faults import _files
from crashpoint.faults._files import CORRUPTIONS, ConfinementError, corrupt, pick_target
from crashpoint.harness import AgentSpec, family_from_spec

#: What opening a link with O_NOFOLLOW (as a folder, or as the file) fails with.
NOFOLLOW = r"Too many levels of symbolic links|Not a directory"
#: What a file outside the trial must keep: bytes, mode, inode, times, link count.
Fingerprint = tuple[bytes, int, int, int, int]


def fingerprint(path: Path) -> Fingerprint:
    st = os.lstat(path)
    return (path.read_bytes(), st.st_mode, st.st_ino, st.st_mtime_ns, st.st_size)


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    """A state folder with one honest file and three traps pointing outside, and the outside
    folder with a sentinel and the source of the hard link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "sentinel").write_bytes(b"precious bytes " * 64)
    (outside / "hard-src").write_bytes(b"shared inode " * 64)
    (outside / "sub").mkdir()
    (outside / "sub" / "deep").write_bytes(b"deep " * 64)
    state = tmp_path / "trial" / "state"
    state.mkdir(parents=True)
    (state / "link").symlink_to(outside / "sentinel")
    (state / "dirlink").symlink_to(outside)
    os.link(outside / "hard-src", state / "hard")
    return {"outside": outside, "state": state, "older": tmp_path / "trial" / "crash-1"}


def outside_prints(outside: Path) -> dict[str, Fingerprint]:
    return {p.name: fingerprint(p) for p in sorted(outside.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_links_in_the_state_folder_are_never_followed(world: dict[str, Path], how: str) -> None:
    state, outside = world["state"], world["outside"]
    before = outside_prints(outside)
    # an older copy where every trap differs, so stale-copy would want to roll each one back
    older = world["older"]
    older.mkdir()
    for name in ("link", "hard", "dirlink/sentinel", "dirlink/sub/deep"):
        (older / name).parent.mkdir(parents=True, exist_ok=True)
        (older / name).write_bytes(b"OLD")
    for seed in range(20):
        c = corrupt(
            how,
            f"{state}/**",
            random.Random(seed),
            older=str(older),
            root=str(state),
            roots=[str(state)],
        )
        # only the hard link is a candidate, and only for the corruptions that change its
        # directory entry (delete, symlink) and leave the shared bytes alone
        assert c is None or (how in ("delete", "symlink") and c.path == f"{state}/hard"), c
        if c is not None:  # put the trap back
            for name in ("hard", "hard.decoy"):
                if os.path.lexists(state / name):
                    os.unlink(state / name)
            os.link(outside / "hard-src", state / "hard")
    assert outside_prints(outside) == before
    assert os.readlink(state / "link") == str(outside / "sentinel")


@pytest.mark.parametrize("how", CORRUPTIONS)
def test_an_honest_file_beside_the_traps_is_still_corrupted(
    world: dict[str, Path], how: str
) -> None:
    """The good path: confinement does not stop the fault from firing."""
    state, outside = world["state"], world["outside"]
    (state / "data").write_bytes(bytes(range(1, 256)) * 8)
    older = world["older"]
    older.mkdir()
    (older / "data").write_bytes(b"older data")
    before = outside_prints(outside)
    c = corrupt(
        how, f"{state}/**", random.Random(3), older=str(older), root=str(state), roots=[str(state)]
    )
    if how in ("delete", "symlink") and c is not None and c.path.endswith("/hard"):
        c = corrupt(how, f"{state}/data", random.Random(3), roots=[str(state)])
    assert c is not None
    assert c.path == f"{state}/data"
    assert outside_prints(outside) == before


def test_a_pattern_outside_the_roots_finds_nothing(world: dict[str, Path]) -> None:
    state, outside = world["state"], world["outside"]
    before = outside_prints(outside)
    for pattern in (
        f"{outside}/**",
        f"{state}/../../outside/**",
        f"{state}/dirlink/**",
        f"{state}/link",
        f"{state}/dirlink/sentinel",
        "/etc/host*",
    ):
        for how in CORRUPTIONS:
            assert corrupt(how, pattern, random.Random(0), roots=[str(state)]) is None, pattern
    assert outside_prints(outside) == before


def test_a_pattern_above_the_roots_only_reaches_inside_them(world: dict[str, Path]) -> None:
    state = world["state"]
    (state / "data").write_bytes(b"data")
    work = state.parent / "work"
    work.mkdir()
    (work / "scratch").write_bytes(b"scratch")
    (state / "hard").unlink()
    top = state.parent.parent  # holds outside/ as well
    picked = {
        pick_target(f"{top}/**", random.Random(s), roots=[str(state), str(work)]) for s in range(40)
    }
    assert picked == {f"{top}/trial/state/data", f"{top}/trial/work/scratch"}


def test_a_root_replaced_by_a_link_is_not_a_root(world: dict[str, Path]) -> None:
    """An agent (root in CI) can swap its own state folder for a link to elsewhere."""
    state, outside = world["state"], world["outside"]
    before = outside_prints(outside)
    shutil.rmtree(state)
    state.symlink_to(outside)
    for how in CORRUPTIONS:
        assert corrupt(how, f"{state}/**", random.Random(1), roots=[str(state)]) is None
    assert outside_prints(outside) == before


def test_a_link_swapped_in_after_the_walk_is_not_written_through(
    world: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk found state/sub/f; before the write, sub becomes a link to the outside folder
    (which has an f too). Every component is opened with O_NOFOLLOW: the write fails."""
    state, outside = world["state"], world["outside"]
    (state / "sub").mkdir()
    (state / "sub" / "f").write_bytes(b"inside " * 32)
    (outside / "f").write_bytes(b"outside " * 32)
    found = _files._walk(f"{state}/sub/*", [str(state)])
    assert [t.path for t in found] == [f"{state}/sub/f"]
    shutil.rmtree(state / "sub")
    (state / "sub").symlink_to(outside)
    monkeypatch.setattr(_files, "_walk", lambda _pattern, _roots: found)
    before = outside_prints(outside)
    for how in ("truncate", "bitflip", "zero", "append-garbage", "unreadable", "delete", "symlink"):
        with pytest.raises(OSError, match=NOFOLLOW):
            corrupt(how, f"{state}/sub/*", random.Random(0), roots=[str(state)])
    assert outside_prints(outside) == before
    # and the final component swapped for a link
    (state / "sub").unlink()
    (state / "sub").mkdir()
    (state / "sub" / "f").symlink_to(outside / "f")
    for how in ("truncate", "bitflip", "zero", "append-garbage", "unreadable"):
        with pytest.raises(OSError, match=NOFOLLOW):
            corrupt(how, f"{state}/sub/*", random.Random(0), roots=[str(state)])
    assert outside_prints(outside) == before


def test_without_roots_the_folder_the_pattern_starts_in_is_the_root(world: dict[str, Path]) -> None:
    """What the ``corrupt_file`` fixture does: still no link followed."""
    state, outside = world["state"], world["outside"]
    (state / "data").write_bytes(b"data" * 10)
    before = outside_prints(outside)
    for seed in range(10):
        c = corrupt("bitflip", f"{state}/**", random.Random(seed))
        assert c is not None
        assert c.path == f"{state}/data"
    assert outside_prints(outside) == before


def test_no_roots_means_nothing_may_be_touched(world: dict[str, Path]) -> None:
    state = world["state"]
    (state / "data").write_bytes(b"data")
    assert corrupt("delete", f"{state}/**", random.Random(0), roots=[]) is None
    assert (state / "data").exists()


def test_the_filesystem_root_is_never_a_root() -> None:
    with pytest.raises(ConfinementError, match="refusing to corrupt files under /"):
        pick_target("/*", random.Random(0))
    with pytest.raises(ConfinementError):
        corrupt("truncate", "/no-such-cp-folder/*", random.Random(0), roots=["/"])


@pytest.mark.parametrize(
    "pattern",
    [
        "**",
        "*",
        "*.log",
        "sub/*",
        "sub/**",
        "**/*.bin",
        ".hidden/**",
        "**/.h*",
        ".*",
        "sub/deeper/x.bin",
        "s?b/**/x.*",
        "[sx]*/**",
        "**/deeper/*",
    ],
)
def test_the_walk_finds_what_glob_finds_in_a_tree_without_links(
    tmp_path: Path, pattern: str
) -> None:
    """Same candidates as ``glob.glob(recursive=True)`` (so a seed picks the same file as
    before confinement), as long as no link is involved."""
    for rel in (
        "a.log",
        "b.bin",
        ".h",
        "sub/c.log",
        "sub/.hc",
        "sub/deeper/x.bin",
        ".hidden/d.bin",
        ".hidden/in/e.log",
        "xdir/f.bin",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(rel.encode())
    full = f"{tmp_path}/{pattern}"
    expected = sorted(p for p in glob.glob(full, recursive=True) if os.path.isfile(p))
    assert [t.path for t in _files._walk(full, [str(tmp_path)])] == expected


# -- a real corrupt campaign whose agent plants links ---------------------------------------------

PLANTING_AGENT = """\
import os
import sys

from crashpoint import probe

state = sys.argv[1]
os.makedirs(state, exist_ok=True)
for name, target in (("link", os.environ["SENTINEL"]),
                     ("dirlink", os.path.dirname(os.environ["SENTINEL"]))):
    if not os.path.lexists(os.path.join(state, name)):
        os.symlink(target, os.path.join(state, name))
if not os.path.lexists(os.path.join(state, "hard")):
    os.link(os.environ["HARD"], os.path.join(state, "hard"))
for step in ("fetch", "write", "send"):
    probe.step_started(step)
    with open(os.path.join(state, "data"), "ab") as f:
        f.write(step.encode() * 50)
    probe.step_completed(step)
print("done")
"""


def test_a_real_corrupt_campaign_leaves_the_outside_untouched(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel, hard = outside / "sentinel", outside / "hard-src"
    sentinel.write_bytes(hashlib.sha256(b"s").digest() * 40)
    hard.write_bytes(hashlib.sha256(b"h").digest() * 40)
    sentinel.chmod(0o640)
    before = outside_prints(outside)
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(PLANTING_AGENT))
    agent = AgentSpec(
        ("{python}", str(script), "{state_dir}"),
        timeout=20,
        env=(("HARD", str(hard)), ("SENTINEL", str(sentinel))),
    )
    fam = family_from_spec({"corrupt": {"how": list(CORRUPTIONS), "count": 12}})
    # fork mode (the agent's attempts forked from a warm interpreter): what is corrupted, and
    # where, is the same as in spawned attempts; spawning is not what this is about
    result = run_forked(agent, [fam], report_dir=str(tmp_path / "report"), seed=7, restarts=3)
    assert len(result.trials) == 12
    assert outside_prints(outside) == before
    assert stat.S_IMODE(os.lstat(sentinel).st_mode) == 0o640
    done = [c for t in result.trials for c in t.corruptions]
    paths = {os.path.basename(str(c.get("path"))) for c in done if "offset" in c}
    assert "data" in paths, done  # the faults fired, on the honest file
    assert not paths & {"link", "dirlink", "sentinel"}, done
    for c in done:  # nothing recorded outside a trial's own folders
        assert f"{os.sep}state{os.sep}" in str(c["path"]) or str(c["path"]).endswith(
            f"{os.sep}state"
        ), c
