"""The probe is a guest in every agent, under the harness and in production (where each call
is a no-op): importing it loads only the cheapest standard modules; json and socket come with
its first call under the harness, typing and threading never."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: what `import crashpoint.probe` may add to a bare interpreter's modules
ALLOWED = {"__future__", "errno"}


def _new_modules(code: str, env: dict[str, str]) -> set[str]:
    probe = (
        "import sys; before = set(sys.modules); "
        f"{code}; print(' '.join(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}


def test_importing_the_probe_loads_no_socket_json_threading_or_typing() -> None:
    mods = _new_modules("from crashpoint import probe", _env())
    assert "crashpoint.probe" in mods
    assert {m for m in mods if not m.startswith("crashpoint")} <= ALLOWED, sorted(mods)


def test_outside_the_harness_a_call_loads_nothing_more() -> None:
    mods = _new_modules(
        "from crashpoint import probe; probe.step_started('a'); "
        "assert probe.effect('k', {'x': 1}) is True",
        _env(),
    )
    assert {m for m in mods if not m.startswith("crashpoint")} <= ALLOWED, sorted(mods)


def test_the_entry_module_loads_no_typing(tmp_path: Path) -> None:
    """What a spawned entry agent (``python -m crashpoint._entry m:f``) has loaded when its
    function starts: the base, and none of typing, threading or socket."""
    (tmp_path / "cp_lean_agent.py").write_text(
        "import sys\ndef main(args):\n    print(' '.join(sorted(sys.modules)))\n"
    )
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-m", "crashpoint._entry", "cp_lean_agent:main"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    mods = set(out.stdout.split())
    assert "crashpoint.errors" in mods
    assert not mods & {"typing", "threading", "socket", "json"}, sorted(mods)


#: what the demo agent's plain run (no --smtp, --webhook or --help) must not load: the effects
#: over HTTP and SMTP, importlib.resources for its corpus, argparse, dataclasses and typing
#: (each 10-45 ms of CPU a start; the suite and the shipped gate start it hundreds of times)
DEMO_HEAVY = {
    "argparse",
    "dataclasses",
    "inspect",
    "typing",
    "tempfile",
    "shutil",
    "importlib.resources",
    "urllib.request",
    "http.client",
    "email",
    "smtplib",
    "ssl",
    "socket",
    "crashpoint.checkpoint._http",
    "crashpoint.checkpoint._mail",
}


def _demo_modules(tmp_path: Path, *args: str) -> set[str]:
    """The modules the demo agent (``python -m crashpoint.agents.demo``) has loaded when it
    exits, after a full run with ``args``."""
    listing = tmp_path / "modules.txt"
    code = (
        "import atexit, runpy, sys\n"
        f"atexit.register(lambda: open({str(listing)!r}, 'w').write(' '.join(sys.modules)))\n"
        "sys.argv[0] = 'demo'\n"
        "runpy.run_module('crashpoint.agents.demo', run_name='__main__', alter_sys=True)\n"
    )
    state = tmp_path / "state"
    out = subprocess.run(
        [sys.executable, "-c", code, "--state", str(state), *args],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert '"published": true' in out.stdout, out.stdout
    return set(listing.read_text().split())


def test_the_demo_agents_run_loads_only_what_it_uses(tmp_path: Path) -> None:
    mods = _demo_modules(tmp_path, "--topic", "torn tail recovery")
    assert "crashpoint.checkpoint._run" in mods
    assert not mods & DEMO_HEAVY, sorted(mods & DEMO_HEAVY)
