"""Failpoints are armed only inside a harness attempt, read lazily, and a bad value never breaks
``import crashpoint`` or pytest.

Each case runs a real interpreter with the environment under test: a valid spec leaked into a
process outside the harness does nothing there (the process is not killed), the same spec with
an attempt's token kills it at the failpoint, and a malformed spec is a clear error at the first
failpoint reached inside an attempt, ignored outside one, and never an import error.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crashpoint import _failpoints
from crashpoint._failpoints import FailpointSpecError, failpoint

#: Appends one record through the library (journal.write and journal.after_sync are reached).
APPEND = textwrap.dedent("""
    import sys
    from crashpoint.checkpoint import Store
    with Store(sys.argv[1]).open("r") as j:
        j.append({"n": 1})
    print("appended")
""")


def _run(
    tmp_path: Path, code: str, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CRASHPOINT_", "PYTEST_"))}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        start_new_session=True,
        check=False,
    )


def test_a_leaked_valid_spec_does_nothing_outside_the_harness(tmp_path: Path) -> None:
    done = _run(
        tmp_path, APPEND, {"CRASHPOINT_FAILPOINTS": "journal.write=kill"}, str(tmp_path / "store")
    )
    assert (done.returncode, done.stdout.strip()) == (0, "appended"), done.stderr


def test_the_same_spec_inside_an_attempt_fires(tmp_path: Path) -> None:
    done = _run(
        tmp_path,
        APPEND,
        {
            "CRASHPOINT_FAILPOINTS": "journal.write=kill",
            "CRASHPOINT_REAP_TOKEN": secrets.token_hex(16),
        },
        str(tmp_path / "store"),
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("token", ["", "not-a-token", "0" * 31])
def test_only_a_well_formed_token_arms(tmp_path: Path, token: str) -> None:
    done = _run(
        tmp_path,
        APPEND,
        {"CRASHPOINT_FAILPOINTS": "journal.write=kill", "CRASHPOINT_REAP_TOKEN": token},
        str(tmp_path / "store"),
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("token", [False, True], ids=["outside", "attempt"])
def test_a_malformed_spec_never_breaks_the_import(tmp_path: Path, token: bool) -> None:
    env = {"CRASHPOINT_FAILPOINTS": "journal.write=explode;;nope"}
    if token:
        env["CRASHPOINT_REAP_TOKEN"] = secrets.token_hex(16)
    done = _run(
        tmp_path,
        "import crashpoint, crashpoint.checkpoint, crashpoint.harness, "
        "crashpoint.pytest_plugin; print('imported')",
        env,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "imported"), done.stderr
    appended = _run(tmp_path, APPEND, env, str(tmp_path / "store"))
    if token:  # inside an attempt: a clear error at the first failpoint, naming the variable
        assert appended.returncode == 1
        assert (
            "FailpointSpecError: CRASHPOINT_FAILPOINTS: unknown action 'explode'" in appended.stderr
        )
    else:  # outside: ignored
        assert appended.returncode == 0, appended.stderr


def test_a_malformed_spec_does_not_break_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text("def test_x():\n    assert True\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    done = _run(
        tmp_path,
        "import sys, pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', "
        # the plugin loads by its entry point; the unrelated plugins (1-2 s of CPU) do not
        "'-p', 'no:hypothesispytest', '-p', 'no:benchmark', '-p', 'no:fakefs', "
        "'-p', 'no:langsmith_plugin']))",
        {"CRASHPOINT_FAILPOINTS": "garbage"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_reload_with_a_spec_arms_this_process_and_without_reads_lazily(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRASHPOINT_FAILPOINTS", "journal.write=eio@2")
    monkeypatch.delenv("CRASHPOINT_REAP_TOKEN", raising=False)
    try:
        _failpoints.reload()
        failpoint("journal.write")
        failpoint("journal.write")  # not armed here: no token
        monkeypatch.setenv("CRASHPOINT_REAP_TOKEN", secrets.token_hex(16))
        _failpoints.reload()  # the environment is read again at the next failpoint
        failpoint("journal.write")
        with pytest.raises(OSError, match=r"failpoint journal\.write"):
            failpoint("journal.write")
        _failpoints.reload("atomic.after_temp=enospc")  # explicit: armed whatever the env
        monkeypatch.delenv("CRASHPOINT_REAP_TOKEN")
        with pytest.raises(OSError, match="No space left"):
            failpoint("atomic.after_temp")
        with pytest.raises(FailpointSpecError):
            _failpoints.reload("atomic.after_temp=boom")
    finally:
        monkeypatch.delenv("CRASHPOINT_FAILPOINTS")
        _failpoints.reload("")


def test_the_library_reads_the_token_the_harness_sets() -> None:
    from crashpoint._proc import REAP_VAR, with_reap_token

    assert _failpoints.TOKEN_ENV == REAP_VAR
    _, env = with_reap_token({})
    assert _failpoints.armed_here(env)
