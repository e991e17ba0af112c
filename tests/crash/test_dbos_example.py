"""Issue 15's DBOS example, run as shipped: ``examples/dbos/`` through the real harness.

A DBOS workflow fetch -> send -> report, checkpointed in a SQLite system database under the
trial's state folder, its steps reported by ``crashpoint.adapters.dbos.crashpoint_step``.
``send`` posts an invoice to the HTTP stand-in. What the gate shows, each by one kill:

* a step DBOS has recorded is never run again (killed after ``send``'s checkpoint committed,
  before the harness heard of it: the restart starts at ``report``, the invoice once);
* a step killed after its side effect and before DBOS recorded it runs again: without an
  idempotency key the invoice is applied twice (failure, with the boundary in the evidence);
  with the key ``DBOS.workflow_id + ":send"`` the re-send is deduplicated (pass).

Each trial is two DBOS processes (the killed one, the one that recovers the workflow), so the
quick tests run single trials; the every-boundary sweeps of both scenarios are marked slow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _forked import forking, warm
from _lazy import needs
from crashpoint.harness import (
    Campaign,
    Fault,
    Golden,
    Plan,
    TrialResult,
    TrialRunner,
    Zygote,
    load_scenario,
)

pytestmark = needs(
    "dbos",
    reason="the example workflow is written with DBOS "
    "(pip install 'crashpoint[dbos]', or the dev extra)",
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dbos"
PENDING = "send: returned, DBOS checkpoint pending"
POST = "POST /invoices"


class _Runners:
    """One trial runner and one golden run per scenario file for the whole module (a golden run
    of the DBOS workflow costs as much as a trial); each trial gets its own plan index."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open: dict[str, tuple[TrialRunner, Golden, int]] = {}
        self.n = 0
        self.stack = contextlib.ExitStack()
        self.zygote: Zygote | None = None

    def trial(self, name: str, kill: Fault) -> tuple[Golden, TrialResult]:
        sc = load_scenario(EXAMPLE / name)
        if name not in self.open:
            # forked from a zygote that imported dbos once: these tests are about the adapter;
            # one for both scenarios (the same agent.py, their flags differ)
            agent = warm(sc.agent)
            z = self.fork_zygote(agent)
            runner = self.stack.enter_context(
                TrialRunner(
                    agent,
                    str(self.root / name),
                    restarts=sc.restarts,
                    expect=sc.expect,
                    launcher=z,
                )
            )
            self.open[name] = (runner, runner.golden(), sc.seed)
        runner, golden, seed = self.open[name]
        self.n += 1
        return golden, runner.run(Plan((kill,), "kill", seed, self.n), golden)

    def fork_zygote(self, agent: Any = None) -> Zygote:
        """The module's zygote (dbos imported once), started on first use."""
        if self.zygote is None:
            agent = agent or warm(load_scenario(EXAMPLE / "fixed.scenario.yaml").agent)
            self.zygote = self.stack.enter_context(forking(agent))
        return self.zygote

    def close(self) -> None:
        self.stack.close()


@pytest.fixture(scope="module")
def runners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Runners]:
    r = _Runners(tmp_path_factory.mktemp("dbos"))
    yield r
    r.close()


def _trial(name: str, kill: Fault, runners: _Runners) -> tuple[Golden, TrialResult]:
    return runners.trial(name, kill)


def _steps_started(t: TrialResult, attempt: int) -> list[str]:
    return [
        str(e["step"])
        for e in t.events
        if e["op"] == "step_started" and int(e["attempt"]) == attempt
    ]


def _posts(t: TrialResult) -> list[bool]:
    return [bool(e["applied"]) for e in t.events if e.get("kind") == POST]


def test_the_adapter_reports_start_return_and_durable_completion_of_each_step(
    runners: _Runners,
) -> None:
    kill = Fault.make("kill", 1, op="step_started", name="report", phase="before")
    golden, t = _trial("broken.scenario.yaml", kill, runners)
    seen = [(e["op"], e.get("step") or e.get("name") or e.get("kind")) for e in golden.events]
    assert seen == [
        ("step_started", "fetch"),
        ("event", "fetch: returned, DBOS checkpoint pending"),
        ("step_completed", "fetch"),
        ("step_started", "send"),
        ("effect", POST),
        ("event", PENDING),
        ("step_completed", "send"),
        ("step_started", "report"),
        ("event", "report: returned, DBOS checkpoint pending"),
        ("step_completed", "report"),
    ]
    assert golden.steps == ["fetch", "send", "report"]
    assert golden.output.startswith(b"invoice 1042 for 4200 cents sent")
    # the recovered attempt runs only the step DBOS had not recorded
    assert t.ok, [str(c) for c in t.failed]
    assert t.exercised
    assert _steps_started(t, 2) == ["report"]


def test_a_step_dbos_recorded_is_never_run_again_even_without_a_key(runners: _Runners) -> None:
    # killed after send's checkpoint committed, before the harness was told: the agent as
    # written (no key) still sends the invoice once, because DBOS replays send from its record
    kill = Fault.make("kill", 1, op="step_completed", name="send", phase="before")
    _golden, t = _trial("broken.scenario.yaml", kill, runners)
    assert t.ok, [str(c) for c in t.failed]
    assert t.exercised
    assert _steps_started(t, 2) == ["report"]
    assert _posts(t) == [True]


def test_a_step_killed_before_its_checkpoint_runs_again_and_without_a_key_is_caught(
    runners: _Runners,
) -> None:
    kill = Fault.make("kill", 1, op="event", name=PENDING, phase="before")
    _golden, t = _trial("broken.scenario.yaml", kill, runners)
    assert not t.ok
    failed = {c.name: c.message for c in t.failed}
    assert set(failed) == {"exactly_once"}  # resume is right: DBOS's at-least-once step
    assert f"DUPLICATED {POST}" in failed["exactly_once"]
    assert '"order":"1042"' in failed["exactly_once"]
    assert "no key" in failed["exactly_once"]
    # the evidence names the boundary: after the effect, before DBOS's checkpoint
    assert t.outcomes[0].fired
    assert f"event:{PENDING}" in t.outcomes[0].where
    assert _steps_started(t, 2) == ["send", "report"]  # fetch replayed from DBOS, not re-run
    assert _posts(t) == [True, True]


def test_with_a_key_from_the_workflow_id_and_step_the_same_kill_passes(runners: _Runners) -> None:
    kill = Fault.make("kill", 1, op="event", name=PENDING, phase="before")
    _golden, t = _trial("fixed.scenario.yaml", kill, runners)
    assert t.ok, [str(c) for c in t.failed]
    assert t.exercised
    assert _steps_started(t, 2) == ["send", "report"]  # DBOS did run send again
    assert _posts(t) == [True, False]  # and the re-send was deduplicated by its key
    keys = {e.get("key") for e in t.events if e.get("kind") == POST}
    assert keys == {"invoice-1042:send"}


def test_the_scenarios_differ_in_the_fix_flag_only() -> None:
    broken = load_scenario(EXAMPLE / "broken.scenario.yaml").agent
    fixed = load_scenario(EXAMPLE / "fixed.scenario.yaml").agent
    assert dataclasses.replace(fixed, command=fixed.command[:-1]) == broken
    assert fixed.command[-1] == "--fixed"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")},
        check=False,
    )


def test_without_dbos_the_adapter_names_the_extra_and_the_core_never_imports_it() -> None:
    r = _python("import sys; sys.modules['dbos'] = None\nimport crashpoint.adapters.dbos")
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert "pip install 'crashpoint[dbos]'" in r.stderr
    r = _python(
        "import sys, crashpoint, crashpoint.harness, crashpoint.checkpoint, "
        "crashpoint.cli, crashpoint.pytest_plugin\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'dbos' or "
        "m == 'crashpoint.adapters.dbos'))"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_outside_a_workflow_and_outside_the_harness_a_step_is_a_plain_call(
    runners: _Runners, tmp_path: Path
) -> None:
    # a step called from plain code runs as a plain function (DBOS's rule): nothing reported,
    # even with a ledger listening, so the harness never sees a step DBOS did not checkpoint
    # (a process forked from the module's zygote: dbos imported once, not in pytest's process)
    script = tmp_path / "plain.py"
    script.write_text(
        "from crashpoint.adapters.dbos import crashpoint_step\n"
        "@crashpoint_step()\n"
        "def add(a: int, b: int) -> int:\n"
        "    return a + b\n"
        "print(add(2, 3), add.__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}
    r = (
        runners.fork_zygote()
        .spawn("", env=env, cwd=str(tmp_path), timeout=60, main=("path", str(script)))
        .wait()
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [b"5", b"add"]


DOC = EXAMPLE.parents[1] / "docs" / "how-to" / "crash-test-a-dbos-workflow.md"
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _doc_blocks(lang: str) -> list[str]:
    return [
        body for tag, _info, body in FENCE.findall(DOC.read_text(encoding="utf-8")) if tag == lang
    ]


def test_the_docs_show_the_example_as_shipped() -> None:
    """The page's DBOS code is ``examples/dbos/agent.py``'s (its blocks are not run by
    tests/unit/test_docs.py: DBOS in the pytest process), and its commands name the shipped
    scenario files."""
    agent = {line.strip() for line in (EXAMPLE / "agent.py").read_text().splitlines()}
    py = _doc_blocks("python")
    for block in py[:2]:
        for line in block.splitlines():
            assert not line.strip() or line.strip() in agent, line
    commands = [line for b in _doc_blocks("console") for line in b.splitlines()]
    assert commands == [
        f"$ crashpoint run examples/dbos/{n}.scenario.yaml" for n in ("broken", "fixed", "sysdb")
    ]


# slow: fast cover: the adapter tests above (start, return, durable completion; kills)
@pytest.mark.slow
def test_the_docs_pytest_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's "In pytest" block, run as written (relative paths: from a copy)."""
    shutil.copytree(
        EXAMPLE, tmp_path / "examples" / "dbos", ignore=shutil.ignore_patterns("__pycache__")
    )
    monkeypatch.chdir(tmp_path)
    code = _doc_blocks("python")[-1]
    assert "TrialRunner" in code
    exec(compile(code, f"{DOC} (In pytest)", "exec"), {"__name__": "__docs__"})  # noqa: S102


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "failing"),
    [
        ("broken.scenario.yaml", [("effect", POST, "in_doubt"), ("event", PENDING, "before")]),
        ("fixed.scenario.yaml", []),
    ],
)
def test_every_boundary_sweep(
    name: str, failing: list[tuple[str, str, str]], tmp_path: Path
) -> None:
    sc = load_scenario(EXAMPLE / name)
    result = Campaign(
        sc.agent,
        [f.family for f in sc.families],
        str(tmp_path / "report"),
        name=name,
        seed=sc.seed,
        restarts=sc.restarts,
        expect=sc.expect,
    ).run()
    assert len(result.trials) == 11
    assert all(t.exercised for t in result.trials)
    got = [
        (t.plan.faults[0].arg("op"), t.plan.faults[0].arg("name"), t.plan.faults[0].arg("phase"))
        for t in result.failures
    ]
    assert got == failing
    assert all(
        c.ok for t in result.trials for c in t.checks if c.name == "resumes_from_last_completed"
    )


@pytest.mark.slow
def test_the_sqlite_system_database_under_power_loss_and_corruption(tmp_path: Path) -> None:
    """DBOS's SQLite system database (rollback journal, synchronous=FULL: SQLite's defaults,
    which DBOS keeps) through the power-loss and corruption families: every trial exercised;
    after a power cut the workflow resumes with nothing lost or repeated; after damage DBOS
    either completes correctly or exits with SQLite's "malformed" error (a clear refusal)."""
    if shutil.which("strace") is None:
        pytest.skip("power_loss needs strace")
    sc = load_scenario(EXAMPLE / "sysdb.scenario.yaml")
    for fam in sc.families:
        result = Campaign(
            sc.agent,
            [fam.family],
            str(tmp_path / f"f{fam.line}"),
            name="sysdb",
            seed=sc.seed,
            restarts=sc.restarts,
            expect=sc.expect,
        ).run()
        assert result.trials
        assert all(t.exercised for t in result.trials), [
            str(o) for t in result.trials for o in t.not_fired
        ]
        assert result.ok, [
            f"{t.plan.describe()}: {[str(c) for c in t.failed]}" for t in result.failures
        ]


# -- several resumers: one executor id per process (issue 25) ------------------------------------


class _Invoices:
    """A webhook that counts POSTs; ``hang`` makes it never answer (the process posting is
    killed there), ``slow`` seconds keeps a resumer's POST in flight."""

    def __init__(self, slow: float) -> None:
        import http.server
        import threading

        self.posts = 0
        self.hang = True
        self.slow = slow
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.posts += 1
                if outer.hang:
                    outer.release.wait(60)
                    return
                outer.release.wait(outer.slow)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/invoices"

    def wait_for(self, n: int, timeout: float) -> bool:
        import time

        end = time.monotonic() + timeout
        while self.posts < n:
            if time.monotonic() > end:
                return False
            time.sleep(0.05)
        return True

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.mark.parametrize(
    ("second_id", "posts", "in_flight"),
    [
        # slow: the case to avoid, shown once (a long POST: the second resumer must start
        # while it is in flight); fast cover of the fix: "own"
        pytest.param("A", 3, 8.0, id="one-id", marks=pytest.mark.slow),
        pytest.param("B", 2, 4.0, id="own"),
    ],
)
def test_two_resumers_need_an_executor_id_each(
    runners: _Runners, tmp_path: Path, second_id: str, posts: int, in_flight: float
) -> None:
    """The workflow is left PENDING by executor A, killed inside ``send``. Resumer A recovers
    it and posts again; resumer two starts while that POST is in flight. With the same id it
    re-enqueues the running workflow and posts the invoice once more; with its own id it leaves
    the workflow alone and waits for A's result. Both resumers print the same result.

    Three separate processes, each forked from the module's zygote (dbos imported once: the
    test is about two processes sharing a workflow, not about starting them)."""
    hook = _Invoices(slow=in_flight)
    state = tmp_path / "state"
    state.mkdir()
    z = runners.fork_zygote()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}
    args = ["--state", str(state), "--webhook", hook.url, "--fixed"]
    started: list[Any] = []

    def start(executor: str) -> Any:
        n = len(started)
        p = z.spawn(
            "",
            env=env,
            cwd=str(tmp_path),
            timeout=120,
            args=[*args, "--executor-id", executor],
            main=("path", str(EXAMPLE / "agent.py")),
            stdout_path=str(tmp_path / f"out-{n}"),
            stderr_path=str(tmp_path / f"err-{n}"),
        )
        started.append(p)
        return p

    def err(n: int) -> str:
        path = tmp_path / f"err-{n}"
        return path.read_text(errors="replace") if path.exists() else ""

    try:
        first = start("A")
        assert hook.wait_for(1, 60), err(0)
        first.kill()
        assert first.wait(30).signal == 9
        hook.hang = False
        a = start("A")
        assert hook.wait_for(2, 60), err(1)  # A's re-send is in flight now
        other = start(second_id)
        ea, eo = a.wait(60), other.wait(60)
        assert ea.returncode == 0, ea.stderr.decode(errors="replace")
        assert eo.returncode == 0, eo.stderr.decode(errors="replace")
        assert hook.posts == posts
        want = b"invoice 1042 for 4200 cents sent (200)"
        assert ea.stdout.splitlines()[0] == eo.stdout.splitlines()[0] == want
    finally:
        for p in started:
            p.kill()
            p.wait(30)
        hook.close()
