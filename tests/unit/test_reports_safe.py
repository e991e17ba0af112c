"""Report folders and files are written safely, and secrets never reach them.

Real folders, real ownership (we run as root in CI: another user is ``nobody``), real links: a
folder another user owns or can write in is refused with a message naming it, its owner and the
fix; a planted ``gate.json`` / ``summary.json`` link is refused and its target left unchanged;
files are 0600 and folders 0700; secret values are redacted however a stream is cut.
"""

from __future__ import annotations

import json
import os
import stat
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crashpoint.harness import CampaignResult, Golden
from crashpoint.harness._report import (
    Scrubber,
    UnsafeReportFolder,
    check_report_folder,
    marker,
    redact_bytes,
    redact_env,
    redact_json,
    scrub_tree,
    secure_dir,
    unredact_json,
    write_file,
)
from crashpoint.pytest_plugin._summary import write_session_reports

NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """A file outside the report folder that a planted link points at."""
    t = tmp_path / "precious"
    t.write_text("do not touch\n")
    return t


# -- folders --------------------------------------------------------------------------------


def test_missing_report_folders_are_created_0700(tmp_path: Path) -> None:
    got = secure_dir(str(tmp_path / "a" / "b" / "c"), root=str(tmp_path / "a"))
    assert got == str(tmp_path / "a" / "b" / "c")
    assert [mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3


@needs_root
def test_a_report_folder_owned_by_another_user_is_refused(tmp_path: Path, target: Path) -> None:
    report = tmp_path / "shared-report"
    report.mkdir(mode=0o755)
    (report / "gate.json").symlink_to(target)  # the other user planted it
    os.chown(report, NOBODY, NOBODY)
    with pytest.raises(UnsafeReportFolder) as exc:
        write_session_reports(str(report), [_summary()])
    msg = str(exc.value)
    assert str(report) in msg
    assert f"uid {NOBODY}" in msg
    assert "rm -r" in msg
    assert target.read_text() == "do not touch\n"
    with pytest.raises(UnsafeReportFolder):
        check_report_folder(str(report))


@pytest.mark.parametrize("perm", [0o777, 0o770, 0o1777])
def test_a_report_folder_others_can_write_in_is_refused(tmp_path: Path, perm: int) -> None:
    report = tmp_path / "report"
    report.mkdir()
    os.chmod(report, perm)
    with pytest.raises(UnsafeReportFolder, match=r"other users can write in it .*chmod go-w"):
        secure_dir(str(report))


def test_a_report_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (tmp_path / "report").symlink_to(real)
    with pytest.raises(UnsafeReportFolder, match="symbolic link"):
        secure_dir(str(tmp_path / "report" / "scenarios"), root=str(tmp_path / "report"))
    assert list(real.iterdir()) == []


def test_a_world_writable_parent_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)  # noqa: S103 (the unsafe mode under test)
    with pytest.raises(UnsafeReportFolder, match="no sticky bit"):
        secure_dir(str(open_dir / "report"))
    assert not (open_dir / "report").exists()


@needs_root
def test_under_a_sticky_shared_folder_another_users_folder_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp  # noqa: S103 (the unsafe mode under test)
    assert secure_dir(str(shared / "mine" / "report"))  # fine: folders of our own
    theirs = shared / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, NOBODY, NOBODY)  # created first by another user
    with pytest.raises(UnsafeReportFolder, match=f"owned by uid {NOBODY}"):
        secure_dir(str(theirs / "report"))
    assert not (theirs / "report").exists()


# -- files ----------------------------------------------------------------------------------


def _summary() -> dict[str, object]:
    return {
        "name": "c",
        "scenario": "s",
        "family": "kill",
        "seed": 0,
        "ok": True,
        "ran": 0,
        "trials": 0,
        "passed": 0,
        "failed": 0,
        "skipped": 0,
        "checks": {},
    }


def test_a_planted_gate_json_link_is_refused_and_its_target_unchanged(
    tmp_path: Path, target: Path
) -> None:
    report = Path(secure_dir(str(tmp_path / "report")))
    (report / "gate.json").symlink_to(target)
    with pytest.raises(UnsafeReportFolder, match=r"gate\.json: it is a symbolic link"):
        write_session_reports(str(report), [_summary()])
    assert target.read_text() == "do not touch\n"
    assert os.path.islink(report / "gate.json")


def test_a_planted_summary_json_link_is_refused_and_its_target_unchanged(
    tmp_path: Path, target: Path
) -> None:
    report = Path(secure_dir(str(tmp_path / "c")))
    (report / "summary.json").symlink_to(target)
    result = CampaignResult("c", Golden([], [], Counter(), b"", 0.0), [], 0.0, 0, str(report))
    with pytest.raises(UnsafeReportFolder, match="symbolic link"):
        result.write_reports()
    assert target.read_text() == "do not touch\n"


def test_report_files_are_0600_whole_and_leave_no_temp_file(tmp_path: Path) -> None:
    report = tmp_path / "report"
    paths = write_session_reports(str(report), [_summary()])
    result = CampaignResult(
        "c", Golden([], [], Counter(), b"", 0.0), [], 0.0, 0, str(report / "scenarios" / "c")
    )
    paths += list(result.write_reports().values())
    assert sorted(os.path.basename(p) for p in paths) == [
        "gate.json",
        "junit.xml",
        "report.html",
        "summary.json",
        "verdicts.json",
    ]
    for p in paths:
        assert mode(Path(p)) == 0o600, p
    assert json.loads((report / "gate.json").read_text())["ok"] is True
    for dirpath, _dirs, files in os.walk(report):
        assert mode(Path(dirpath)) == 0o700, dirpath
        assert not [f for f in files if f.endswith(".tmp")]


def test_write_file_replaces_an_existing_file_atomically(tmp_path: Path) -> None:
    folder = Path(secure_dir(str(tmp_path / "r")))
    (folder / "x.json").write_text("old")
    os.chmod(folder / "x.json", 0o644)
    write_file(str(folder / "x.json"), "new")
    assert (folder / "x.json").read_text() == "new"
    assert mode(folder / "x.json") == 0o600


def test_the_plugin_refuses_an_unsafe_report_option_before_running(tmp_path: Path) -> None:
    from crashpoint.pytest_plugin._options import _parse

    bad = tmp_path / "report"
    bad.mkdir()
    os.chmod(bad, 0o777)  # noqa: S103 (the unsafe mode under test)
    with pytest.raises(
        pytest.UsageError,
        match=r"--crashpoint-report \(command line\).*"
        "other users can write in it",
    ):
        _parse("report", str(bad), "--crashpoint-report (command line)")
    good = tmp_path / "mine"
    assert _parse("report", str(good), "cli") == str(good)


# -- secrets --------------------------------------------------------------------------------

SECRETS = {
    "API_KEY": "sk-live-0123456789abcdef",
    "TOKEN": "tok-0123456789",
    "SHORT": "abc",
    "NESTED": "sk-live-0123",
}


def test_redact_bytes_replaces_every_value_longest_first_and_skips_short_ones() -> None:
    data = b"key=sk-live-0123456789abcdef tok=tok-0123456789 short=abc nested=sk-live-0123!"
    assert redact_bytes(data, SECRETS) == (
        b"key=<redacted:API_KEY> tok=<redacted:TOKEN> short=abc nested=<redacted:NESTED>!"
    )


@given(st.lists(st.integers(0, 80), max_size=6), st.binary(max_size=40))
def test_a_streamed_scrub_equals_the_whole_one_however_the_stream_is_cut(
    cuts: list[int], noise: bytes
) -> None:
    data = (
        noise
        + b"sk-live-0123456789abcdef"
        + noise
        + b"tok-0123456789tok-0123456789"
        + b"sk-live-0123"
        + noise
    )
    whole = redact_bytes(data, SECRETS)
    s = Scrubber(SECRETS)
    out, pos = [], 0
    for c in sorted(cuts):
        out.append(s.feed(data[pos:c]))
        pos = max(pos, c)
    out += [s.feed(data[pos:]), s.flush()]
    assert b"".join(out) == whole
    assert b"sk-live" not in whole
    assert b"tok-0123456789" not in whole


def test_redact_json_keeps_the_shape_and_unredact_restores_it() -> None:
    obj = {
        "n": 1234567,
        "s": "Bearer sk-live-0123456789abcdef",
        "l": ["tok-0123456789", 2.5],
        "sk-live-0123": True,
    }
    red = redact_json(obj, SECRETS)
    text = json.dumps(red)
    assert "sk-live" not in text
    assert "tok-0123" not in text
    assert red["n"] == 1234567
    assert unredact_json(red, SECRETS) == obj


def test_redact_env_hides_long_and_secret_named_values() -> None:
    env = {"API_KEY": "x", "PACE": "0.3", "MODE": "production", "DB_PASSWORD": "pw"}
    assert redact_env(env) == {
        "API_KEY": marker("API_KEY"),
        "PACE": "0.3",
        "MODE": marker("MODE"),
        "DB_PASSWORD": marker("DB_PASSWORD"),
    }


def test_scrub_tree_redacts_contents_and_names_sets_modes_and_follows_no_link(
    tmp_path: Path, target: Path
) -> None:
    tree = tmp_path / "evidence"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "log").write_bytes(b"x" * 3_000_000 + b"sk-live-0123456789abcdef" + b"y")
    (tree / "tok-0123456789.txt").write_text("named after a secret")
    (tree / "link").symlink_to(target)
    target.write_text("sk-live-0123456789abcdef outside")
    os.chmod(tree / "sub" / "log", 0o644)
    os.chmod(tree / "sub", 0o755)  # noqa: S103 (the unsafe mode under test)
    assert scrub_tree(str(tree), SECRETS) == 2
    log = (tree / "sub" / "log").read_bytes()
    assert log.endswith(b"<redacted:API_KEY>y")
    assert len(log) == 3_000_000 + 19
    assert (tree / "<redacted:TOKEN>.txt").read_text() == "named after a secret"
    assert target.read_text() == "sk-live-0123456789abcdef outside"  # never followed
    assert mode(tree / "sub") == 0o700
    assert mode(tree / "sub" / "log") == 0o600


def test_a_link_of_your_own_above_the_report_folder_is_followed(tmp_path: Path) -> None:
    real = tmp_path / "data" / "reports"
    real.mkdir(parents=True)
    (tmp_path / "link").symlink_to("./data/../data/reports")  # relative, with . and ..
    got = secure_dir(str(tmp_path / "link" / "r"))
    assert got == str(real / "r")
    assert mode(real / "r") == 0o700


def test_a_campaign_refuses_a_planted_trials_link_before_running_anything(tmp_path: Path) -> None:
    from crashpoint.harness import AgentSpec, Campaign, family_from_spec

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    report = Path(secure_dir(str(tmp_path / "report")))
    (report / "trials").symlink_to(elsewhere)
    camp = Campaign(AgentSpec(("true",)), [family_from_spec({"kill": {"at": "time"}})], str(report))
    with pytest.raises(UnsafeReportFolder, match=r"trials: it is a symbolic link"):
        camp.run()
    assert list(elsewhere.iterdir()) == []
