"""A lifecycle command ends its process without the interpreter's teardown (issue 25 item 4),
and only when nothing is owed at exit.

``crashpoint.cli.console_main`` (the console script, ``python -m crashpoint``) runs a lifecycle
command, then :func:`crashpoint.cli._fast.exit_now` calls ``os._exit`` with its exit code:
clearing every module and a last garbage collection are a tenth of what a command costs. Each
test runs the command in a real interpreter, as the console script does, beside a canary whose
``__del__`` speaks only during a teardown; the same command through ``main`` (no fast exit) is
the control, so every test also shows what it detects. Whatever is owed at exit (an ``atexit``
callback, a running thread, output that does not flush) keeps the teardown, and the exit code
and output are the same either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: the console script's body, with a canary in ``__main__`` that the teardown collects
SCRIPT = """\
import sys
{setup}
class Canary:
    def __del__(self):
        sys.stderr.write("TEARDOWN\\n")
canary = Canary()
from crashpoint.cli import {entry}
sys.exit({entry}())
"""
THREAD = """\
import threading, time
def late():
    time.sleep(0.3)
    sys.stderr.write("THREAD DONE\\n")
threading.Thread(target=late).start()
"""
ATEXIT = 'import atexit; atexit.register(lambda: sys.stderr.write("ATEXIT\\n"))'


def _env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CRASHPOINT_", "COVERAGE_PROCESS_"))
    }
    return env


def crashpoint(
    store: Path,
    *args: str,
    entry: str = "console_main",
    setup: str = "",
    stdout: int | None = subprocess.PIPE,
) -> subprocess.CompletedProcess[str]:
    """``crashpoint checkpoints --store STORE ARGS`` through ``entry``, in a fresh interpreter."""
    code = SCRIPT.format(entry=entry, setup=setup)
    return subprocess.run(
        [sys.executable, "-c", code, "checkpoints", "--store", str(store), *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    got = crashpoint(root, "start", "r", "--steps", "a,b", entry="main")
    assert got.returncode == 0, got.stderr
    return root


def test_a_lifecycle_command_exits_without_the_teardown(store: Path) -> None:
    fast = crashpoint(store, "step", "r", "a", "--result", '{"n": 1}')
    assert (fast.returncode, fast.stdout, fast.stderr) == (0, "b\n", "")
    # the control: the same kind of command through main tears down (the canary speaks)
    slow = crashpoint(store, "status", "r", "--next", entry="main")
    assert (slow.returncode, slow.stdout, slow.stderr) == (0, "b\n", "TEARDOWN\n")
    fast = crashpoint(store, "status", "r", "--json")
    assert fast.returncode == 0
    assert fast.stderr == ""
    assert '"completed": [\n    "a"\n  ]' in fast.stdout  # the whole of it, flushed
    assert fast.stdout == crashpoint(store, "status", "r", "--json", entry="main").stdout


DONE = ("effect", "r", "email", "--key", "k", "--done")
#: (what is done first, the command, its exit code)
CASES = [
    ((), ("step", "r", "a"), 0),
    ((("step", "r", "a"),), ("step", "r", "a"), 70),  # not the next step
    ((), ("status", "nope"), 2),  # no such run
    ((), DONE, 0),
    ((DONE,), ("effect", "r", "email", "--key", "k"), 3),  # already done: skip
    ((), ("complete", "r", "--output", "{oops"), 2),  # bad JSON
    ((), ("complete", "r"), 1),  # steps left
]


@pytest.mark.parametrize(("before", "args", "code"), CASES)
def test_exit_codes_and_messages_are_the_same_with_or_without_the_teardown(
    store: Path, before: tuple[tuple[str, ...], ...], args: tuple[str, ...], code: int
) -> None:
    twin = store.parent / "twin"
    assert crashpoint(twin, "start", "r", "--steps", "a,b", entry="main").returncode == 0
    for argv in before:
        assert crashpoint(store, *argv).returncode == 0
        assert crashpoint(twin, *argv, entry="main").returncode == 0
    fast = crashpoint(store, *args)
    slow = crashpoint(twin, *args, entry="main")
    assert fast.returncode == slow.returncode == code
    assert fast.stdout == slow.stdout
    assert fast.stderr.replace(str(store), "S") + "TEARDOWN\n" == slow.stderr.replace(
        str(twin), "S"
    )


def test_the_full_command_line_still_tears_down(store: Path) -> None:
    got = crashpoint(store, "list")
    assert got.returncode == 0, got.stderr
    assert got.stderr.endswith("TEARDOWN\n")


@pytest.mark.parametrize(
    ("owed", "says"), [(ATEXIT, "ATEXIT\n"), (THREAD, "THREAD DONE\n")], ids=["atexit", "thread"]
)
def test_what_is_owed_at_exit_keeps_the_teardown(store: Path, owed: str, says: str) -> None:
    got = crashpoint(store, "status", "r", "--next", setup=owed)
    assert got.returncode == 0
    assert got.stdout == "a\n"
    assert says in got.stderr
    assert "TEARDOWN" in got.stderr


def test_output_that_cannot_be_written_gets_the_same_code_and_message(store: Path) -> None:
    """A full disk under stdout: the same exit code and message as without the fast exit."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        fast = crashpoint(store, "status", "r", "--json", stdout=full.fileno())
        slow = crashpoint(store, "status", "r", "--json", stdout=full.fileno(), entry="main")
    assert fast.returncode == slow.returncode == 2
    assert fast.stderr + "TEARDOWN\n" == slow.stderr
    assert "No space left on device" in fast.stderr


EXIT_NOW = """\
import sys
from crashpoint.cli._fast import exit_now
{setup}
exit_now({code})
sys.stderr.write("RETURNED\\n")
sys.exit(7)
"""
UNFLUSHABLE = """\
import io
class Unflushable(io.StringIO):
    def flush(self):
        raise OSError(28, "No space left on device")
sys.stdout = Unflushable()
"""


@pytest.mark.parametrize(
    ("setup", "code", "expect"),
    [
        ("", 5, (5, "")),
        ("", 256 + 3, (3, "")),  # the status sys.exit gives: the low byte
        (ATEXIT, 5, (7, "RETURNED\nATEXIT\n")),
        (THREAD, 5, (7, "RETURNED\nTHREAD DONE\n")),
        # the interpreter reports the failed flush and exits 120, as it does without exit_now
        (UNFLUSHABLE, 5, (120, "RETURNED\nException ignored")),
    ],
    ids=["nothing-owed", "low-byte", "atexit", "thread", "unflushable"],
)
def test_exit_now_exits_only_when_nothing_is_owed(
    setup: str, code: int, expect: tuple[int, str]
) -> None:
    got = subprocess.run(
        [sys.executable, "-c", EXIT_NOW.format(setup=setup, code=code)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert got.returncode == expect[0], got.stderr
    assert got.stderr.startswith(expect[1]), got.stderr
    if not expect[1]:
        assert got.stderr == ""
