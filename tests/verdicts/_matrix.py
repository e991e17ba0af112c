"""The verdict matrix: read ``matrix.yaml``, render each cell's scenario, run it through the
gate the way users do (``crashpoint run FILE --report DIR``), and read the verdict back from the
gate's ``gate.json``.

Shared by ``test_matrix.py`` and ``benchmarks/verdicts.py``; imports no pytest.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psutil
import yaml

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "matrix.yaml"
SCENARIOS = HERE / "scenarios"
AGENTS = HERE / "agents"
ROOT = HERE.parent.parent

#: Settings of a cell: the scenario's defaults, or the strictest documented ones.
DEFAULT, STRICT = "default", "strict"
#: Outcomes of a cell.
TRUE_PASS, TRUE_FAIL, FALSE_ALARM, MISS, WRONG_CHECK, SKIPPED, ERROR = (
    "true pass",
    "true fail",
    "FALSE ALARM",
    "MISS",
    "WRONG CHECK",
    "skipped",
    "error",
)


@dataclass(frozen=True)
class Agent:
    id: str
    family: str
    command: list[str]
    bug_args: list[str]
    correct_bug: str | None
    needs: list[str]
    faults: list[Any]
    twins: dict[str, str]


@dataclass(frozen=True)
class Cell:
    agent: Agent
    variant: str  # "correct" or the bug's name
    settings: str  # DEFAULT or STRICT
    check: str | None  # the check that must fail, or "a|b": either (None: the cell must pass)

    @property
    def id(self) -> str:
        suffix = "" if self.settings == DEFAULT else "@strict"
        return f"{self.agent.id}:{self.variant}{suffix}"

    @property
    def file_stem(self) -> str:
        suffix = "" if self.settings == DEFAULT else "-strict"
        return f"{self.agent.id}.{self.variant}{suffix}"

    @property
    def checks(self) -> list[str]:
        """The checks of which one must fail (empty: the cell must pass)."""
        return self.check.split("|") if self.check else []

    @property
    def expected(self) -> str:
        return "PASS" if self.check is None else f"FAIL {self.check}"


@dataclass
class Failure:
    """One failing check of one trial (or of a family: ``not exercised``)."""

    check: str
    campaign: str
    trial: int | None
    message: str
    hint: str
    folder: str


@dataclass
class CellResult:
    cell: Cell
    outcome: str
    got: str  # "PASS", "FAIL", "skipped", "error"
    failed_checks: list[str] = field(default_factory=list)
    warned: list[str] = field(default_factory=list)
    trials: int = 0
    exercised: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    reason: str = ""
    report: str = ""


# -- the manifest ---------------------------------------------------------------------------


def load(path: Path = MANIFEST) -> tuple[dict[str, Any], list[Agent]]:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    sets = doc["fault_sets"]
    agents = []
    for a in doc["agents"]:
        if "program" in a:
            command = [
                "{python}",
                "{scenario_dir}/../agents/" + a["program"],
                "--state",
                "{state_dir}",
                *a.get("args", []),
            ]
            bug_args = ["--bug", "{bug}"]
        else:
            command, bug_args = list(a["command"]), list(a.get("bug_args", []))
        faults = a["faults"]
        agents.append(
            Agent(
                id=a["id"],
                family=a["family"],
                command=command,
                bug_args=bug_args,
                correct_bug=a.get("correct_bug"),
                needs=list(a.get("needs", [])),
                faults=copy.deepcopy(sets[faults] if isinstance(faults, str) else faults),
                twins=dict(a.get("twins", {})),
            )
        )
    return doc["settings"], agents


def cells(agents: list[Agent]) -> list[Cell]:
    out = []
    for a in agents:
        out.append(Cell(a, "correct", DEFAULT, None))
        out.append(Cell(a, "correct", STRICT, None))
        out += [Cell(a, bug, STRICT, check) for bug, check in a.twins.items()]
    return out


def missing(agent: Agent) -> str:
    """Why ``agent`` cannot run here ("" if it can)."""
    for need in agent.needs:
        if need == "postgres":
            from crashpoint.harness._standins._postgres import unavailable

            reason = unavailable()
            if reason:
                return f"no PostgreSQL server: {reason}"
        elif need in ("node", "sh", "curl"):
            if shutil.which(need) is None:
                return f"`{need}` is not on PATH"
        else:
            try:
                found = importlib.util.find_spec(need) is not None
            except ImportError:
                found = False
            if not found:
                return f"Python module {need!r} is not installed (pip install {need.split('.')[0]})"
    return ""


# -- scenario files --------------------------------------------------------------------------


def render(cell: Cell, settings: dict[str, Any], trials: int | None = None) -> str:
    """The scenario file of ``cell`` (YAML text)."""
    a = cell.agent
    bug = cell.variant if cell.variant != "correct" else a.correct_bug
    command = [part.replace("{bug}", bug or "") for part in a.command]
    if cell.variant != "correct" or a.correct_bug is None:
        command += [p.replace("{bug}", bug or "") for p in a.bug_args] if bug else []
    faults = copy.deepcopy(a.faults)
    if trials is not None:
        for family in faults:
            for opts in family.values():
                if isinstance(opts, dict) and "count" in opts:
                    opts["count"] = trials
    doc: dict[str, Any] = {
        "name": f"{a.id} {cell.variant}"
        + (" (strictest settings)" if cell.settings == STRICT else ""),
        "agent": {"command": command, "timeout": "60s"},
        "faults": faults,
        "restarts": settings["restarts"],
        "seed": settings["seed"],
        "budget": settings["budget"],
        "marks": ["slow"],
    }
    if command[0] == "{python}":
        doc["agent"]["warm"] = True
    if cell.settings == STRICT:
        doc["expect"] = dict(settings["strict"])
    head = (
        f"# {cell.id}: {a.family} agent, {'correct' if cell.check is None else 'buggy twin'}"
        f" -> expected {cell.expected}\n"
        "# Rendered from tests/verdicts/matrix.yaml by `python benchmarks/verdicts.py --render`;"
        " edit that file.\n"
        f"#   crashpoint run tests/verdicts/scenarios/{cell.file_stem}.scenario.yaml\n"
    )
    return head + yaml.safe_dump(doc, sort_keys=False, width=100, default_flow_style=None)


def renderable(cell: Cell) -> bool:
    """Whether the cell's scenario file can be kept in the repository (not: one that needs a
    server started at run time)."""
    return not any("{pg}" in part for part in cell.agent.command)


def render_all(out: Path = SCENARIOS) -> list[Path]:
    settings, agents = load()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for cell in cells(agents):
        if renderable(cell):
            path = out / f"{cell.file_stem}.scenario.yaml"
            path.write_text(render(cell, settings), encoding="utf-8")
            written.append(path)
    return written


# -- running a cell --------------------------------------------------------------------------


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A throw-away PostgreSQL server's base URL (``postgresql://user:password@host:port``;
    :func:`run_cell` puts it in argv without the password and the password in agent.env)."""
    from crashpoint.harness._standins._postgres import PostgresServer

    with PostgresServer.start() as server:
        dsn = server.create_database("verdicts")
        yield dsn.rsplit("/", 1)[0]


def run_cell(
    cell: Cell,
    out: Path,
    *,
    trials: int | None = None,
    pg: str | None = None,
    timeout: float = 1800,
) -> CellResult:
    """Run ``cell`` with ``crashpoint run`` into ``out`` and judge its verdict."""
    reason = missing(cell.agent)
    if reason:
        return CellResult(cell, SKIPPED, "skipped", reason=reason)
    settings, _ = load()
    text = render(cell, settings, trials)
    if not renderable(cell):
        if pg is None:
            return CellResult(cell, SKIPPED, "skipped", reason="needs a PostgreSQL URL")
        # the URL goes in argv without its password; the agent gets that in agent.env
        # (PGPASSWORD, which libpq reads, and reports redact), as a user should pass it
        url = urlsplit(pg)
        bare = url._replace(netloc=f"{url.username}@{url.hostname}:{url.port}").geturl()
        text = text.replace("{pg}", bare)
        if url.password:
            env = f"  env: {{PGPASSWORD: {json.dumps(unquote(url.password))}}}\n"
            text = text.replace("\nagent:\n", "\nagent:\n" + env, 1)
    text = text.replace("{scenario_dir}", str(SCENARIOS))
    out.mkdir(parents=True, exist_ok=True)
    scenario = out / f"{cell.file_stem}.scenario.yaml"
    scenario.write_text(text, encoding="utf-8")
    report = out / "report"
    if report.exists():
        shutil.rmtree(report)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    argv = [sys.executable, "-m", "crashpoint.cli", "run", str(scenario), "--report", str(report)]
    argv.append("--quiet")
    t0 = time.monotonic()
    with open(out / "gate.log", "wb") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        finally:  # a timeout, a failure, Ctrl-C: the whole tree goes, not just the CLI
            _reap_tree(proc)
    seconds = time.monotonic() - t0
    result = judge(cell, report / "gate.json", out / "gate.log")
    result.seconds = seconds
    result.report = str(report)
    if result.got == "error":
        result.reason = f"crashpoint run exited {proc.returncode}: " + result.reason
    return result


def _reap_tree(proc: subprocess.Popen[bytes]) -> None:
    """Kill what is left of ``proc``'s tree (its session, and every descendant psutil still
    sees, wherever it moved) and reap it; a no-op once the gate reaped its own agents."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        kids = []
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the pgid is its pid
    for k in kids:
        with contextlib.suppress(psutil.Error):
            k.kill()
    psutil.wait_procs(kids, timeout=10)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _hint(trial: dict[str, Any], check: str) -> tuple[str, str]:
    """The message and hint of ``check`` in a trial's result: its failure line reads
    ``CHECK: FAIL: MESSAGE -- hint: HINT``."""
    for line in trial.get("failures", []):
        text = line if isinstance(line, str) else json.dumps(line)
        if text.startswith(check + ":"):
            message, _, hint = text.partition(" -- hint: ")
            return message, hint
    return "", ""


def judge(cell: Cell, gate_json: Path, log: Path) -> CellResult:
    """The cell's verdict from the gate's ``gate.json``."""
    try:
        gate = json.loads(gate_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:] if log.exists() else ""
        return CellResult(cell, ERROR, "error", reason=f"no gate.json ({exc}); log: {tail}")
    failed: dict[str, None] = {}
    warned: dict[str, None] = {}
    failures: list[Failure] = []
    trials = exercised = 0
    for camp in gate.get("campaigns", []):
        name = camp.get("family", "?")
        trials += int(camp.get("ran", 0))
        exercised += int(camp.get("exercised", 0))
        for check, counts in camp.get("checks", {}).items():
            if counts.get("failed"):
                failed[check] = None
        for fam, f in camp.get("families", {}).items():
            if not f.get("exercised"):
                failed["not exercised"] = None
                why = "; ".join(str(w) for w in f.get("not_fired", []))[:500]
                failures.append(Failure("not exercised", fam, None, why, "", ""))
        if camp.get("stopped"):
            failed["stopped"] = None
            failures.append(Failure("stopped", name, None, str(camp["stopped"]), "", ""))
        for t in camp.get("trial_results", []):
            for w in t.get("warnings", []):
                warned[str(w).split(":", 1)[0][:40]] = None
            for check, ok in t.get("checks", {}).items():
                if ok is False:
                    message, hint = _hint(t, check)
                    failures.append(
                        Failure(check, name, t.get("index"), message, hint, t.get("folder", ""))
                    )
        for f in camp.get("failures", []):
            if isinstance(f, dict) and f.get("golden"):
                failed[str(f.get("check", "golden"))] = None
    if not gate.get("campaigns"):
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:] if log.exists() else ""
        return CellResult(cell, ERROR, "error", reason=f"no campaign ran; log: {tail}")
    got = "FAIL" if failed or not gate.get("ok", False) else "PASS"
    if got == "FAIL" and not failed:
        failed["gate not ok"] = None
    if cell.check is None:
        outcome = TRUE_PASS if got == "PASS" else FALSE_ALARM
    elif got == "PASS":
        outcome = MISS
    else:
        outcome = TRUE_FAIL if any(c in failed for c in cell.checks) else WRONG_CHECK
    return CellResult(
        cell, outcome, got, list(failed), list(warned), trials, exercised, 0.0, failures
    )


def fast_ids() -> list[str]:
    """The cells run by the default (not slow) test run: one correct agent and its twin."""
    return ["json-steps:correct@strict", "json-steps:time_key@strict"]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]+", "_", text)
