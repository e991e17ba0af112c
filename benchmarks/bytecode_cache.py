"""What the private bytecode cache and the lean entry save a ``{python}`` agent (issue 24, item 2).

    python benchmarks/bytecode_cache.py [--runs 15] [--campaigns 5]

Writes a small agent in a temporary folder: a script that imports two modules of its own,
which import json, sqlite3, email, http.client and decimal, and reports three steps through the
probe while saving a JSON state. Then, with ``PYTHONDONTWRITEBYTECODE=1`` in the harness's
environment (as in many CI images and containers), alternating the settings round by round so
the machine's load falls on all alike, it times:

1. **attempts**: the agent started as the harness starts it (a clean environment, no ledger):
   ``old`` = ``PYTHONDONTWRITEBYTECODE=1`` (no cache, before this change); ``warm`` =
   ``PYTHONPYCACHEPREFIX`` set to a cache a first run filled (the per-user cache); ``cold`` = a
   new empty cache each time (what the first attempt of a per-campaign cache would pay);
2. **campaigns**: a spawn-mode campaign (golden run plus a kill at every boundary and the
   restarts) with ``CRASHPOINT_PYCACHE=off`` (old), the per-user-like cache (warm) and a new
   cache per campaign (cold);

   both also for the old behaviour in an interpreter without ``.pyc`` files (slim container
   images), simulated by an empty ``PYTHONPYCACHEPREFIX`` with ``PYTHONDONTWRITEBYTECODE=1``
   (the new behaviour ignores the interpreter's ``.pyc`` files anyway: warm is warm there too);
3. **the entry**: ``from crashpoint import probe`` against a bare interpreter, and the modules
   it loads.

Prints the median of each, and the ratios old / warm and old / cold.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

AGENT = textwrap.dedent("""
    import json, os, sys
    from crashpoint import probe
    import bc_store, bc_steps

    state = os.path.join(sys.argv[1], "state.json")
    s = bc_store.load(state)
    for i in range(s["n"], 3):
        probe.step_started(f"s{i}")
        s["mail"] = bc_steps.render(i)
        s["n"] = i + 1
        bc_store.save(state, s)
        probe.step_completed(f"s{i}")
""")
STORE = textwrap.dedent("""
    import json, os, sqlite3
    def load(path):
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {"n": 0}
    def save(path, s):
        with open(path + ".tmp", "w") as f:
            json.dump(s, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + ".tmp", path)
""")
SLIM = "old, no stdlib .pyc (slim image)"
STEPS = textwrap.dedent("""
    import decimal, email.message, email.utils, http.client, urllib.parse
    def render(n):
        m = email.message.EmailMessage()
        m["Subject"] = f"step {n}"
        m["Date"] = email.utils.formatdate()
        m.set_content(str(decimal.Decimal(n) / 3))
        return str(m)[:40]
""")


def _write_agent(folder: str) -> str:
    for name, text in (("agent.py", AGENT), ("bc_store.py", STORE), ("bc_steps.py", STEPS)):
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    return os.path.join(folder, "agent.py")


def _base_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH", "")]))
    return env


def _attempt(script: str, state: str, extra: dict[str, str]) -> float:
    os.makedirs(state, exist_ok=True)
    for name in os.listdir(state):
        os.unlink(os.path.join(state, name))
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, script, state], env={**_base_env(), **extra}, check=True, cwd=state
    )
    return time.perf_counter() - t0


def _campaign(script: str, report: str, setting: str, env: dict[str, str] | None = None) -> float:
    from crashpoint.harness import AgentSpec, Campaign, family_from_spec

    os.environ["CRASHPOINT_PYCACHE"] = setting
    pairs = tuple(sorted((env or {}).items()))
    agent = AgentSpec(("{python}", script, "{state_dir}"), timeout=60, env=pairs)
    families = [family_from_spec({"kill": {"at": "every-boundary"}})]
    t0 = time.perf_counter()
    res = Campaign(agent, families, report, seed=1).run()
    took = time.perf_counter() - t0
    assert res.ok, res.summary()["failures"]
    return took


def _line(what: str, times: list[float]) -> float:
    m = statistics.median(times)
    print(f"  {what:<44} median {m * 1000:8.1f} ms  ({len(times)} runs)")
    return m


def _ratios(m: dict[str, float]) -> None:
    print(f"  old / warm: {m['old'] / m['warm']:.2f}x   old / cold: {m['old'] / m['cold']:.2f}x")
    print(f"  in a slim image, old / warm: {m[SLIM] / m['warm']:.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="timed attempts of each (default 15)")
    ap.add_argument("--campaigns", type=int, default=5, help="timed campaigns of each")
    a = ap.parse_args()
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"  # the harness's own environment, as in CI
    sys.dont_write_bytecode = True
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPU(s); harness environment "
        "has PYTHONDONTWRITEBYTECODE=1"
    )
    with tempfile.TemporaryDirectory(prefix="bench-pyc-") as tmp:
        script = _write_agent(tmp)
        warm = os.path.join(tmp, "warm-cache")
        state = os.path.join(tmp, "state")
        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        # the old behaviour in an interpreter without .pyc files (slim images): Python looks
        # for them in an empty prefix and writes none (the new one ignores them anyway)
        slim_env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty}
        settings = {
            "old": lambda k: {"PYTHONDONTWRITEBYTECODE": "1"},
            "warm": lambda k: {"PYTHONPYCACHEPREFIX": warm},
            "cold": lambda k: {"PYTHONPYCACHEPREFIX": os.path.join(tmp, f"cold-{k}")},
            SLIM: lambda k: slim_env,
        }
        _attempt(script, state, settings["warm"](0))  # fills the warm cache
        _attempt(script, state, settings["old"](0))  # the page cache, alike for all
        times: dict[str, list[float]] = {k: [] for k in settings}
        for k in range(a.runs):
            for name, extra in settings.items():
                times[name].append(_attempt(script, state, extra(k)))
        print("1. one attempt of the agent (a fresh interpreter, as spawned):")
        _ratios({name: _line(name, t) for name, t in times.items()})

        if a.campaigns:
            camp: dict[str, list[float]] = {"old": [], "warm": [], "cold": [], SLIM: []}
            _campaign(script, os.path.join(tmp, "r-warmup"), warm)
            for k in range(a.campaigns):
                for name, setting, env in (
                    ("old", "off", None),
                    ("warm", warm, None),
                    ("cold", os.path.join(tmp, f"camp-cold-{k}"), None),
                    (SLIM, "off", slim_env),  # through agent.env, which the harness leaves be
                ):
                    report = os.path.join(tmp, f"r-{len(camp[name])}-{k}-{name[:4]}")
                    camp[name].append(_campaign(script, report, setting, env))
            print("2. a spawn-mode campaign (golden run, a kill at every boundary, restarts):")
            _ratios({name: _line(name, t) for name, t in camp.items()})

        print("3. the entry: what `from crashpoint import probe` adds to a bare interpreter:")
        env = {**_base_env(), "PYTHONPYCACHEPREFIX": warm}
        count = (
            "import sys; b = set(sys.modules); from crashpoint import probe; "
            "print(len(set(sys.modules) - b))"
        )
        n = subprocess.run(
            [sys.executable, "-c", count], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()
        entry: dict[str, list[float]] = {"bare": [], "probe": []}
        codes = {"bare": "pass", "probe": "from crashpoint import probe"}
        for _ in range(a.runs):
            for name, code in codes.items():
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], env=env, check=True)
                entry[name].append(time.perf_counter() - t0)
        e = {name: _line(name, t) for name, t in entry.items()}
        print(f"  the probe import costs {(e['probe'] - e['bare']) * 1000:.1f} ms, {n} modules")


if __name__ == "__main__":
    main()
