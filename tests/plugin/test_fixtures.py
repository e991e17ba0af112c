"""Each fixture of the plugin, used by an inner test the way a downstream suite would."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import psutil
import pytest

from _cli_main import main

pytest_plugins = ["pytester"]


# -- crash_harness -------------------------------------------------------------------------------


def test_crash_harness_passes_the_demo_agent(inner: Any) -> None:
    inner.pytester.makepyfile("""
        import sys

        import pytest

        DEMO = [sys.executable, "-m", "crashpoint.agents.demo", "--state", "{state_dir}"]

        @pytest.mark.crashpoint(faults=[{"kill": {"at": "random", "count": 2}}], seed=3)
        def test_demo_survives_kills(crash_harness):
            result = crash_harness.run(DEMO)
            result.assert_ok()
            assert [t.plan.seed for t in result.trials] == [3, 3]
            assert result.golden.steps == ["plan", "search", "summarise", "write_report",
                                           "notify", "publish"]
    """)
    result = inner.inprocess()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "crashpoint gate: 1 campaigns, seed 3",
            "*test_demo_survives_kills ?campaign-1?*2*kill:2*PASS",
        ]
    )


def test_crash_harness_fails_a_broken_agent_with_replay_commands(
    inner: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    inner.pytester.makepyfile(f"""
        import pytest

        @pytest.mark.crashpoint(faults=[{{"kill": {{"at": "every-boundary"}}}}])
        def test_broken_agent(crash_harness):
            crash_harness.run({inner.argv(inner.broken_agent)!r}).assert_ok()
    """)
    result = inner.inprocess()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # the assertion message: how many failed, which checks, and a replay command per trial
    assert "crashpoint: 5 of 6 trials failed, 6 exercised (seed 0, 0 skipped)" in out, out
    assert "resumes_from_last_completed: FAIL: re-ran a completed step" in out
    assert "exactly_once: FAIL" in out
    replays = re.findall(r"^E\s+replay: crashpoint replay (\S+)$", out, re.MULTILINE)
    assert replays, out
    # ... and the end table names the failing trials and their replay commands too
    result.stdout.fnmatch_lines(
        [
            "*test_broken_agent ?campaign-1?*6*kill:6*FAIL (*)",
            "FAILED *test_broken_agent* trial *: *FAIL*",
            "  replay: crashpoint replay *",
        ]
    )
    # the printed command really replays the trial, and the failure reproduces: the command's
    # main in this process (the trial's agent is a process; tests/plugin/test_cli.py runs the
    # console script itself)
    capsys.readouterr()
    code = main(["replay", replays[0]])
    replay = capsys.readouterr()
    assert code == 1, replay.out + replay.err
    assert "reproduced:" in replay.out


# -- effect_ledger -------------------------------------------------------------------------------


def test_effect_ledger_applies_each_key_once(inner: Any) -> None:
    inner.pytester.makepyfile("""
        import json
        import urllib.request

        from crashpoint import probe
        from crashpoint.harness import canonical

        def post(url, key):
            req = urllib.request.Request(url + "/effects/email", data=b'{"to": "a"}',
                                         headers={"Idempotency-Key": key}, method="POST")
            with urllib.request.urlopen(req) as resp:
                return json.load(resp)["applied"]

        def test_dedup(effect_ledger, monkeypatch):
            for name, value in effect_ledger.env().items():
                monkeypatch.setenv(name, value)
            probe.reset()
            try:
                assert probe.effect("email", {"to": "a"}, key="k1") is True
                assert probe.effect("email", {"to": "a"}, key="k1") is False  # deduplicated
                assert probe.effect("email", {"to": "a"}, key="k2") is True
            finally:
                probe.reset()
            # the HTTP front (Idempotency-Key header) shares the same outside world
            assert post(effect_ledger.http_url, "k2") is False
            assert post(effect_ledger.http_url, "k3") is True
            assert effect_ledger.applied_counts() == {("email", canonical({"to": "a"})): 3}
    """)
    inner.inprocess().assert_outcomes(passed=1)


# -- agent_process -------------------------------------------------------------------------------


def test_agent_process_reaps_the_whole_tree(inner: Any) -> None:
    """A test that leaves an agent and its child running: both are gone after the test."""
    pids_file = inner.path / "pids.json"
    inner.pytester.makepyfile(f"""
        import os
        import sys
        import time

        PIDS = {str(pids_file)!r}
        # the agent starts a child, then writes both pids (atomically) and waits
        AGENT = (
            "import json, os, subprocess, sys\\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\\n"
            "open(sys.argv[1] + '.tmp', 'w').write(json.dumps([os.getpid(), child.pid]))\\n"
            "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\\n"
            "child.wait()\\n")

        def test_leaves_agent_running(agent_process):
            agent_process([sys.executable, "-c", AGENT, PIDS])
            for _ in range(600):
                if os.path.exists(PIDS):
                    break
                time.sleep(0.05)
            assert os.path.exists(PIDS)

        def test_finished_agent(agent_process):
            exit = agent_process([sys.executable, "-c", "print('hi')"]).wait(timeout=30)
            assert (exit.returncode, exit.stdout) == (0, b"hi\\n")
    """)
    # a reader thread that raises while the fixture closes the pipes would be a warning
    result = inner.subprocess("-W", "error::pytest.PytestUnhandledThreadExceptionWarning")
    result.assert_outcomes(passed=2)
    pids = json.loads(pids_file.read_text())
    alive = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    for proc in alive:  # do not leak them if the fixture failed
        proc.kill()
    assert not alive, f"agent_process left {alive} running"


# -- disk_fault ----------------------------------------------------------------------------------

DISK_FAULT_TEST = """
    import errno
    import subprocess
    import sys

    WRITE = "open(sys.argv[1], 'wb').write(b'x' * 65536)"

    def test_disk_fills_up(disk_fault, tmp_path):
        folder = tmp_path / "state"
        folder.mkdir()
        ns = disk_fault(folder, capacity="16KiB")
        r = subprocess.run(ns.wrap([sys.executable, "-c", "import sys; " + WRITE,
                                    str(folder / "big")]), capture_output=True, timeout=60)
        assert r.returncode != 0
        assert b"OSError: [Errno 28] No space left on device" in r.stderr, r.stderr
"""


def test_disk_fault_gives_enospc_or_skips_with_the_reason(inner: Any) -> None:
    from crashpoint.faults._disk import capabilities

    inner.pytester.makepyfile(DISK_FAULT_TEST)
    result = inner.inprocess("-rs")
    caps = capabilities()
    if caps.tmpfs:
        result.assert_outcomes(passed=1)
    else:
        result.assert_outcomes(skipped=1)
        result.stdout.fnmatch_lines([f"SKIPPED * disk_fault: {caps.tmpfs_reason[:40]}*"])


def test_disk_fault_skips_with_the_reason_without_unshare(
    inner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashpoint.faults._disk import capabilities

    empty = inner.path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    inner.pytester.makeconftest("""
        import pytest
        from crashpoint.faults._disk import capabilities

        @pytest.fixture(autouse=True)
        def _probe_again():
            capabilities.cache_clear()  # probed once per process: probe with this PATH
    """)
    inner.pytester.makepyfile(DISK_FAULT_TEST)
    try:
        result = inner.inprocess("-rs")  # the skip starts no process
    finally:
        capabilities.cache_clear()
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * disk_fault: unshare/nsenter (util-linux) not on PATH"])


# -- full_fake_disk ------------------------------------------------------------------------------


def test_full_fake_disk_raises_enospc(inner: Any) -> None:
    inner.pytester.makepyfile("""
        import errno
        import os

        import pytest

        def test_fills_up(full_fake_disk):
            os.makedirs("/data")
            with open("/data/small", "wb") as f:
                f.write(b"x" * 1000)
            with pytest.raises(OSError) as exc:  # the disk holds 64 KiB
                with open("/data/big", "wb") as f:
                    f.write(b"x" * 100_000)
            assert exc.value.errno == errno.ENOSPC

        def test_capacity_can_change(full_fake_disk):
            full_fake_disk.set_disk_usage(100)
            with pytest.raises(OSError) as exc:
                with open("/tiny", "wb") as f:
                    f.write(b"x" * 101)
            assert exc.value.errno == errno.ENOSPC

        def test_real_disk_is_back(tmp_path):
            (tmp_path / "big").write_bytes(b"x" * 100_000)
    """)
    # a subprocess: the inner session runs without pyfakefs's own plugin (-p no:fakefs), which
    # an in-process run cannot show (this process has imported it)
    inner.subprocess("--junitxml=junit.xml").assert_outcomes(passed=3)


# -- corrupt_file --------------------------------------------------------------------------------


def test_corrupt_file_changes_bytes_reproducibly(inner: Any) -> None:
    inner.pytester.makepyfile("""
        def copies(tmp_path, n):
            out = []
            for i in range(n):
                d = tmp_path / f"copy{i}"
                d.mkdir()
                (d / "journal.bin").write_bytes(bytes(range(256)) * 4)
                out.append(d)
            return out

        def test_same_seed_same_damage(corrupt_file, tmp_path):
            a, b, c = copies(tmp_path, 3)
            original = (a / "journal.bin").read_bytes()
            done_a = corrupt_file(a / "*.bin", how="bitflip", seed=7)
            done_b = corrupt_file(b / "*.bin", how="bitflip", seed=7)
            corrupt_file(c / "*.bin", how="bitflip", seed=8)
            assert done_a.how == "bitflip" and done_a.path == str(a / "journal.bin")
            assert (done_a.offset, done_a.length) == (done_b.offset, done_b.length)
            damaged = (a / "journal.bin").read_bytes()
            assert damaged != original
            assert len(damaged) == len(original)
            assert damaged == (b / "journal.bin").read_bytes()
            assert damaged != (c / "journal.bin").read_bytes()

        def test_truncate_and_nothing_to_corrupt(corrupt_file, tmp_path):
            (d,) = copies(tmp_path, 1)
            assert corrupt_file(d / "*.bin", how="truncate", seed=1) is not None
            assert len((d / "journal.bin").read_bytes()) < 1024
            assert corrupt_file(d / "*.missing") is None
    """)
    inner.inprocess().assert_outcomes(passed=2)


# -- checkpoint_store ----------------------------------------------------------------------------


def test_checkpoint_store_is_a_fresh_store(inner: Any) -> None:
    inner.pytester.makepyfile("""
        def test_append_and_read_back(checkpoint_store, tmp_path):
            assert checkpoint_store.run_ids() == []
            assert str(tmp_path) in str(checkpoint_store.root)
            with checkpoint_store.open("run-1") as run:
                run.append({"step": "fetch"})
                run.append({"step": "send"})
            assert checkpoint_store.run_ids() == ["run-1"]
            loaded = checkpoint_store.read("run-1")
            assert loaded.state == {"records": [{"step": "fetch"}, {"step": "send"}]}
            assert checkpoint_store.verify("run-1") == {"run-1": ([], [])}
    """)
    inner.inprocess().assert_outcomes(passed=1)


def test_fixtures_do_not_import_the_harness_at_plugin_load() -> None:
    """The plugin module is cheap to import: loading pytest does not load the harness."""
    code = (
        "import json, sys, crashpoint.pytest_plugin; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('crashpoint', 'pyfakefs', 'psutil', 'yaml'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    # the plugin's entry, its option table and hook specifications, crashpoint's lazy root; not
    # even the harness's lazy face: no harness room, no process control (psutil), no faults, no
    # library, no pyfakefs
    assert json.loads(out.stdout) == [
        "crashpoint",
        "crashpoint._lazy",
        "crashpoint.pytest_plugin",
        "crashpoint.pytest_plugin._table",
        "crashpoint.pytest_plugin.hooks",
    ]
