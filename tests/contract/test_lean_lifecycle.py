"""A lifecycle command starts lean (issue 25 item 4): a shell agent runs one per step.

Each of ``crashpoint checkpoints start|step|effect|status|complete`` runs in a fresh interpreter
here, as the console script runs it, on a real store; what it imported beyond a bare
interpreter is checked: the store, its journal and the run's records, the standard library they
need (json and re), and nothing of what made each command cost 0.1-1.3 s before (typing,
dataclasses and inspect, argparse, logging, subprocess, tempfile, shutil, the other command
rooms, the harness, urllib and smtplib) or what it no longer needs (contextlib, array, the
PostgreSQL opener, notifications). ``benchmarks/lifecycle_cli.py`` measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

#: what a lifecycle command may import beyond a bare interpreter (modules of the standard
#: library and of crashpoint); the bounds leave room for a module or two, not for a framework
MAX_MODULES = 60
MAX_CRASHPOINT_MODULES = 24
#: never on the fast path
HEAVY = {
    "typing",
    "dataclasses",
    "contextlib",
    "array",
    "inspect",
    "argparse",
    "logging",
    "subprocess",
    "tempfile",
    "shutil",
    "threading",
    "socket",
    "urllib.request",
    "smtplib",
    "email",
    "decimal",
    "psutil",
    "psycopg",
}
#: the rooms of the full command line and the layers above the library
NOT_HERE = (
    "crashpoint.cli._main",
    "crashpoint.cli._parser",
    "crashpoint.cli._checkpoints",
    "crashpoint.cli._gate",
    "crashpoint.cli._fleet",
    "crashpoint.cli._init",
    "crashpoint.harness",
    "crashpoint.faults",
    "crashpoint._proc",
    "crashpoint.checkpoint._run",
    "crashpoint.checkpoint._supervisor",
    "crashpoint.checkpoint._open",
    "crashpoint.checkpoint._notify",
    "crashpoint.checkpoint._http",
    "crashpoint.checkpoint._mail",
    "crashpoint.checkpoint.postgres",
)

PROBE = (
    "import json, sys\n"
    "before = set(sys.modules)\n"
    "from crashpoint.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print(json.dumps([rc, sorted(set(sys.modules) - before)]), file=sys.stderr)\n"
)


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}


def _loaded(store: Path, *argv: str) -> tuple[int, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "checkpoints", "--store", str(store), *argv],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    rc, mods = json.loads(proc.stderr.strip().splitlines()[-1])
    return int(rc), list(mods)


#: a shell agent's run, command by command; each test replays the ones before its own, so the
#: tests do not depend on each other's order (pytest-xdist spreads them over workers)
RUN: list[tuple[str, ...]] = [
    ("start", "r", "--steps", "a,b"),
    ("status", "r", "--next"),
    ("effect", "r", "email", "--payload", '{"to": "ops@example.com"}'),
    ("step", "r", "a", "--result", '{"rows": [1, 2]}'),
    ("step", "r", "b"),
    ("complete", "r", "--output", '{"sent": true}', "--print"),
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def _run_up_to(store: Path, n: int) -> None:
    """The first ``n`` commands of :data:`RUN`, each in a fresh process as a shell runs them."""
    for argv in RUN[:n]:
        rc, _mods = _loaded(store, *argv)
        assert rc == 0, argv


@pytest.mark.parametrize(
    "n", range(len(RUN)), ids=[f"{a[0]}{i}" if a[0] == "step" else a[0] for i, a in enumerate(RUN)]
)
def test_a_lifecycle_command_imports_the_store_and_little_else(store: Path, n: int) -> None:
    _run_up_to(store, n)
    rc, mods = _loaded(store, *RUN[n])
    assert rc == 0
    assert "crashpoint.checkpoint._store" in mods  # it did the work
    assert not HEAVY & set(mods), sorted(HEAVY & set(mods))
    assert not [m for m in mods if m in NOT_HERE or m.startswith(tuple(f"{n}." for n in NOT_HERE))]
    ours = [m for m in mods if m.startswith("crashpoint")]
    assert len(ours) <= MAX_CRASHPOINT_MODULES, ours
    assert len(mods) <= MAX_MODULES, mods


def test_help_and_errors_still_come_from_argparse(store: Path) -> None:
    """What the fast parser leaves to argparse loads argparse, and only then."""
    _run_up_to(store, 1)
    rc, mods = _loaded(store, "status", "r", "--nex")  # an abbreviation: argparse's rule
    assert rc == 0
    assert "argparse" in mods
    assert "crashpoint.cli._checkpoints" not in mods


def test_the_other_commands_still_load_every_room(store: Path) -> None:
    _run_up_to(store, 1)
    rc, mods = _loaded(store, "list")
    assert rc == 0
    assert {"crashpoint.cli._main", "crashpoint.cli._checkpoints", "argparse"} <= set(mods)
