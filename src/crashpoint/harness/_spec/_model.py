"""The harness's vocabulary: agents, faults, plans, golden runs, attempts, trials, verdicts."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from crashpoint._placeholders import fields, fill
from crashpoint.errors import InvalidArgument
from crashpoint.harness._spec._events import event_name, size_text
from crashpoint.harness._spec._services import parse_services
from crashpoint.harness._spec._stderr import error_line

__all__ = [
    "AGENT_PLACEHOLDERS",
    "CHECKS",
    "ENTRY_ARGV",
    "FAULT_KINDS",
    "LLM_POLICIES",
    "PASS_ENV",
    "REFUSE_PATTERNS",
    "ROOT_ORDER",
    "SERVICE_PLACEHOLDERS",
    "WARM_IMPORTS",
    "AgentSpec",
    "Attempt",
    "Boundary",
    "CheckResult",
    "Expect",
    "Fault",
    "Golden",
    "Outcome",
    "Plan",
    "TrialResult",
    "dumps",
]

#: The checks of Contract 2, in report order.
CHECKS = (
    "completes",
    "same_output",
    "exactly_once",
    "resumes_from_last_completed",
    "single_writer",
    "no_secret_leak",
    "within_disk_budget",
    "no_orphans",
    "corruption_detected",
    "no_repeated_llm_calls",
    "no_retry_storm",
    "crash_loop",
    "replay_divergence",
    "no_silent_failure",
)

#: Which failure is a trial's root cause when several are not consequences of one another:
#: the earliest in a crash's story first (two writers, a wrong resume point, an effect
#: repeated or dropped, damage accepted, no completion, a wrong output), then the independent
#: ones; a check not listed (a custom one) comes last.
ROOT_ORDER = (
    "single_writer",
    "replay_divergence",
    "resumes_from_last_completed",
    "crash_loop",
    "exactly_once",
    "no_repeated_llm_calls",
    "corruption_detected",
    "no_silent_failure",
    "completes",
    "same_output",
    "no_secret_leak",
    "within_disk_budget",
    "no_orphans",
    "no_retry_storm",
)

#: Fault kinds a plan can hold (one trial applies its faults in order).
FAULT_KINDS = (
    "kill",
    "kill_at_time",
    "failpoint",
    "fileop",
    "signal",
    "corrupt",
    "disk_full",
    "resumers",
    "power_loss",
    "network",
    "upgrade",
    "always_replay",
    "backing",
    "exit",
    "memory",
)

#: The placeholders of ``command`` and ``args`` ({scenario_dir}: AgentSpec.scenario_dir;
#: {http}, {llm}, {anthropic}, {smtp}, {mcp}, {mcp_stdio}: the stand-in services' addresses
#: (and the MCP stand-in's stdio command line), see AgentSpec.argv;
#: {postgres}: the DSN of the harness's PostgreSQL, a database per trial, without its password).
AGENT_PLACEHOLDERS = (
    "python",
    "state_dir",
    "workdir",
    "run_id",
    "trial_id",
    "scenario_dir",
    "http",
    "llm",
    "anthropic",
    "smtp",
    "mcp",
    "mcp_stdio",
    "postgres",
)
#: A command-line part shown quoted (placeholders' braces are not).
_NEEDS_QUOTES = re.compile(r"[\s'\"\\$`;&|<>*?]")
#: The placeholders that name a stand-in service.
SERVICE_PLACEHOLDERS = ("http", "llm", "anthropic", "smtp", "mcp", "mcp_stdio", "postgres")

#: ``AgentSpec.warm`` item meaning "the script's own top-level imports" (``warm: true``).
WARM_IMPORTS = "*"
#: The harness's own environment variables an agent inherits (the rest of its environment is
#: the scenario's ``agent.env`` and the ledger's variables).
PASS_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "SYSTEMROOT",
    "TZ",
)
#: How an entry agent is spawned: ``[*ENTRY_ARGV, "module:function", *args]``.
ENTRY_ARGV = (sys.executable, "-m", "crashpoint._entry")


@dataclass(frozen=True)
class AgentSpec:
    """How to start the agent: exactly one of ``command`` or ``entry``.

    ``command``: an argv; placeholders {python} {state_dir} {workdir} {run_id}
    {scenario_dir}, and the stand-in services' {http} (base URL of the HTTP stand-in), {llm}
    (the OpenAI base URL, ending in /v1) and {smtp} (host:port of the mail sink, started only
    when used); only bare names: no format spec, conversion or index.
    ``entry`` (``module:function``): spawned as ``python -m crashpoint._entry ENTRY
    ARGS...``, or forked from a warm zygote (fork mode); either way the function is called with
    one argument, the list ``args`` with the same placeholders filled in (see
    :mod:`crashpoint._entry` for the exit-code convention).
    ``scenario_dir``: the absolute folder of the scenario file the agent came from (what
    ``{scenario_dir}`` becomes); empty for an agent built in Python.
    ``services``: the scenario's ``services:`` mapping (scripted replies of the stand-ins;
    see :func:`crashpoint.harness._standins._http.parse_services`), or None.
    ``warm``: fork mode (scenario key ``agent.warm``): None spawns every attempt; a tuple of
    module names has a warm zygote import them once and fork each attempt (``"*"``: the
    script's own top-level imports); see :func:`crashpoint.harness._engine._zygote.fork_plan`.
    ``python``: the interpreter ``{python}`` becomes (and an entry agent runs under); empty:
    the harness's own (``sys.executable``). Set for version B of an ``upgrade`` family that
    runs in another virtual environment.
    """

    command: tuple[str, ...] = ()
    entry: str = ""
    timeout: float = 30.0
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    args: tuple[str, ...] = ()
    scenario_dir: str = ""
    services: Any = field(default=None, hash=False)
    warm: tuple[str, ...] | None = None
    python: str = ""

    def __post_init__(self) -> None:
        parse_services(self.services)  # a ServiceSpecError is a ValueError
        if bool(self.command) == bool(self.entry):
            raise InvalidArgument("an agent needs exactly one of command or entry")
        if self.args and not self.entry:
            raise InvalidArgument(
                "args are what an entry agent's function is called with; a "
                "command agent takes its arguments in command"
            )
        for part in (*self.command, *self.args):
            used = fields(part, AGENT_PLACEHOLDERS)  # PlaceholderError is a ValueError
            if "scenario_dir" in used and not self.scenario_dir:
                raise InvalidArgument(
                    f"{part!r} uses {{scenario_dir}}, but this agent has no "
                    "scenario_dir (set AgentSpec.scenario_dir to a folder)"
                )

    def _fill(
        self,
        parts: tuple[str, ...],
        state_dir: str,
        workdir: str,
        run_id: str,
        urls: Mapping[str, str] | None,
        trial_id: str = "",
    ) -> list[str]:
        subst = {
            "python": self.python or sys.executable,
            "state_dir": state_dir,
            "workdir": workdir,
            "run_id": run_id,
            "trial_id": trial_id or run_id,
            "scenario_dir": self.scenario_dir,
        }
        for name in SERVICE_PLACEHOLDERS:
            subst[name] = (urls or {}).get(name, "")
        out = [fill(part, subst) for part in parts]
        for part in parts:
            for name in fields(part):
                if name in SERVICE_PLACEHOLDERS and not subst[name]:
                    raise InvalidArgument(
                        f"{part!r} uses {{{name}}}, but the stand-in services "
                        "are not running (the harness starts them for a trial)"
                    )
        return out

    def argv(
        self,
        *,
        state_dir: str,
        workdir: str,
        run_id: str,
        urls: Mapping[str, str] | None = None,
        trial_id: str = "",
    ) -> list[str]:
        """The argv with the placeholders filled; ``urls``: the stand-ins' addresses
        (:meth:`crashpoint.harness.Ledger.urls`), needed when the agent uses them;
        ``trial_id``: ``{trial_id}``, fresh for each trial (``run_id`` if not given)."""
        if self.entry:
            return [
                self.python or ENTRY_ARGV[0],
                *ENTRY_ARGV[1:],
                self.entry,
                *self._fill(self.args, state_dir, workdir, run_id, urls, trial_id),
            ]
        return self._fill(self.command, state_dir, workdir, run_id, urls, trial_id)

    def describe(self) -> str:
        """The command as written, placeholders unfilled (``{python} -m myagent --state
        {state_dir}``), or ``entry module:function args...``: what error messages show."""
        parts = ["entry", self.entry, *self.args] if self.entry else list(self.command)
        return " ".join(p if p and not _NEEDS_QUOTES.search(p) else shlex.quote(p) for p in parts)

    def uses(self, placeholder: str) -> bool:
        """Does the command (or the entry's args) use ``{placeholder}``?"""
        return any(placeholder in fields(p) for p in (*self.command, *self.args))

    def to_json(self) -> dict[str, Any]:
        return {
            "command": list(self.command),
            "entry": self.entry,
            "timeout": self.timeout,
            "env": dict(self.env),
            "cwd": self.cwd,
            "args": list(self.args),
            "scenario_dir": self.scenario_dir,
            "services": self.services,
            "warm": list(self.warm) if self.warm is not None else None,
            **({"python": self.python} if self.python else {}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AgentSpec:
        return cls(
            tuple(d.get("command") or ()),
            d.get("entry", ""),
            float(d.get("timeout", 30.0)),
            tuple(sorted((d.get("env") or {}).items())),
            d.get("cwd", ""),
            tuple(str(a) for a in d.get("args") or ()),
            str(d.get("scenario_dir") or ""),
            d.get("services"),
            tuple(str(w) for w in d["warm"]) if d.get("warm") is not None else None,
            str(d.get("python") or ""),
        )


@dataclass(frozen=True)
class Fault:
    """One fault of a plan. ``attempt``: which attempt it hits (file faults: applied just
    before that attempt starts). ``args`` depend on ``kind``:

    - kill: the event it lands on, by identity: ``op`` (step_started, step_completed,
      effect, event), ``name`` (the step or the effect's kind) and ``nth`` (its occurrence
      among the attempt's events of that op and name, from 1); or, for a plan written by
      hand or a Hypothesis strategy, ``index`` (the attempt's event number, from 0). ``phase``
      before|in_doubt; ``label`` (what reports show)
    - kill_at_time: ``seconds`` after the attempt's first event (after its start if
      ``anchor`` is ``start``: an agent that reports no events)
    - failpoint: ``spec`` (``CRASHPOINT_FAILPOINTS`` syntax)
    - fileop: ``n`` (SIGKILL before the n-th file-mutating operation; Python agents)
    - signal: ``sig`` TERM|STOP, ``seconds``, ``grace`` (TERM) / ``pause`` (STOP then CONT)
    - corrupt: ``how``, ``path`` glob, ``seed``
    - disk_full: ``capacity`` bytes, ``mechanism`` tmpfs|rlimit|failpoint
    - resumers: start ``attempt`` and ``attempt + 1`` at once; with ``processes`` k (2 to
      32; absent: 2), the k attempts ``attempt`` to ``attempt + k - 1``
    - power_loss: ``model`` (posix|ext4-ordered), ``upto`` (the golden run's file operations
      performed when the power went), ``events`` (its events that happened before),
      ``mutation`` (crashpoint.faults._powercut.Mutation as JSON), ``label``: attempt
      ``attempt`` is not run; the crash state is materialised and the next attempt resumes
    - network: a request to a stand-in service fails: ``call`` (``"POST /hook"``, ``llm``,
      ``mail``; "" when the golden run made none, with a ``label`` saying so), ``fail``
      (``reset``, ``timeout``, an HTTP status such as 503, or a stream failure of ``llm``:
      ``cut 3``, ``stall 5s after 2``, ``reset_after 1``), ``nth`` (its occurrence among
      the attempt's requests of that call, from 1), ``times`` (consecutive requests failed)
    - upgrade: attempt ``attempt`` and every one after it run version B: ``to`` (what B
      changes of the agent, see :func:`crashpoint.harness._spec._upgrade.upgraded`), ``label``
    - always_replay: attempt ``attempt`` resumes the crash of the one before (no other
      change); both mark the attempt ``replay_divergence`` compares with the golden run
    - backing: a backing service goes away while the agent is inside a step: ``service``
      (sqlite|postgres), ``do`` (lock|restart|partition), ``for`` (seconds it lasts), where it
      begins (``op``/``name``/``nth``: before the agent is answered at that event, as a kill
      names it; or ``seconds`` after the attempt's first event), ``path`` (SQLite: a glob in
      the trial's folders), ``lock`` (immediate|exclusive), ``how`` (a partition:
      reset|blackhole), ``shutdown`` (a restart: immediate|fast), ``then`` (kill: the agent is
      killed at its first step report after the outage began; continue), ``label``
    """

    kind: str
    attempt: int = 1
    args: tuple[tuple[str, Any], ...] = ()

    def arg(self, name: str, default: Any = None) -> Any:
        return dict(self.args).get(name, default)

    @property
    def processes(self) -> int:
        """How many attempts this fault starts at once: ``resumers``' k (2 by default), else
        1."""
        return int(self.arg("processes", 2)) if self.kind == "resumers" else 1

    @classmethod
    def make(cls, kind: str, attempt: int = 1, **args: Any) -> Fault:
        if kind not in FAULT_KINDS:
            raise InvalidArgument(
                f"unknown fault kind {kind!r}; use one of {', '.join(FAULT_KINDS)}"
            )
        return cls(kind, attempt, tuple(sorted(args.items())))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "attempt": self.attempt, **dict(self.args)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fault:
        d = dict(d)
        return cls.make(d.pop("kind"), int(d.pop("attempt", 1)), **d)

    def __str__(self) -> str:
        a = dict(self.args)
        if self.kind == "kill":
            if a.get("op"):
                nth = f" #{a['nth']}" if int(a.get("nth", 1)) > 1 else ""
                return (
                    f"kill attempt {self.attempt} at {a['op']}:{a.get('name', '')}{nth} "
                    f"({a.get('phase', 'before')})"
                )
            return (
                f"kill attempt {self.attempt} at event #{a.get('index')} "
                f"{a.get('label', '')} ({a.get('phase', 'before')})".replace("  ", " ")
            )
        if self.kind == "exit":
            nth = f" #{a['nth']}" if int(a.get("nth", 1)) > 1 else ""
            return (
                f"exit {a.get('code', 1)} in attempt {self.attempt} at {a.get('op')}:"
                f"{a.get('name', '')}{nth} ({a.get('phase', 'before')})"
            )
        if self.kind == "memory":
            where = (
                f"at {a['op']}:{a.get('name', '')}"
                + (f" #{a['nth']}" if int(a.get("nth", 1)) > 1 else "")
                if a.get("op")
                else "from its start"
            )
            size = size_text(int(a.get("limit", 0)))
            return f"memory limit {size} in attempt {self.attempt} {where}"
        if self.kind == "fileop" and a.get("fileop") is not None:
            return f"kill attempt {self.attempt} before {a.get('label') or 'a file operation'}"
        if self.kind == "disk_full" and a.get("point") is not None:
            return f"disk full in attempt {self.attempt} at {a.get('label') or 'a write point'}"
        if self.kind == "power_loss":
            if a.get("upto") is None:
                return f"power loss in attempt {self.attempt} ({a.get('label') or 'no trace'})"
            return f"power loss ({a.get('model')}) {a.get('label') or ''}".rstrip()
        if self.kind == "network":
            if not a.get("call"):
                return f"network fault in attempt {self.attempt} ({a.get('label') or 'no call'})"
            fail = a.get("fail")
            what = f"HTTP {fail}" if isinstance(fail, int) else str(fail)
            times = int(a.get("times", 1))
            return f"{what} for {a['call']} #{a.get('nth', 1)} in attempt {self.attempt}" + (
                f" ({times} times)" if times != 1 else ""
            )
        if self.kind == "resumers":
            k = int(a.get("processes", 2))
            last = self.attempt + k - 1
            if a.get("stagger"):
                at = str(a["stagger"]).replace(",", ", #")
                return (
                    f"resumers: attempts {self.attempt} to {last}, each released when the one "
                    f"before reached its event #{at}"
                )
            return (
                f"resumers: attempts {self.attempt} to {last} at once"
                if k > 2
                else (f"resumers(attempt {self.attempt})")
            )
        if self.kind == "upgrade":
            return f"resume under version B from attempt {self.attempt} ({a.get('label', '')})"
        if self.kind == "always_replay":
            return f"attempt {self.attempt} resumes, compared with the golden run"
        if self.kind == "backing":
            service = a.get("service", "sqlite")
            what = (
                f"SQLite lock of {a.get('path', '{state_dir}/**')}"
                if service == "sqlite"
                else f"PostgreSQL {a.get('do', 'restart')}"
            )
            when = (
                f"at {a['op']}:{a.get('name', '')}"
                + (f" #{a['nth']}" if int(a.get("nth", 1)) > 1 else "")
                if a.get("op")
                else f"{float(a.get('seconds', 0)):.3f}s after its first event"
            )
            return f"{what} for {float(a.get('for', 1.0)):g}s in attempt {self.attempt} {when}"
        if self.kind == "kill_at_time":
            origin = "start" if a.get("anchor") == "start" else "first event"
            return (
                f"kill attempt {self.attempt} {float(a.get('seconds', 0)):.3f}s after its {origin}"
            )
        body = ", ".join(f"{k}={v}" for k, v in a.items())
        return f"{self.kind}(attempt {self.attempt}{', ' if body else ''}{body})"


@dataclass(frozen=True)
class Plan:
    """The faults of one trial, reproducible from (seed, index)."""

    faults: tuple[Fault, ...]
    family: str = ""
    seed: int = 0
    index: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "seed": self.seed,
            "index": self.index,
            "faults": [f.to_json() for f in self.faults],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        return cls(
            tuple(Fault.from_json(f) for f in d.get("faults", [])),
            d.get("family", ""),
            int(d.get("seed", 0)),
            int(d.get("index", 0)),
        )

    def describe(self) -> str:
        return "; ".join(str(f) for f in self.faults) or "no fault"

    @property
    def corrupts(self) -> bool:
        return any(f.kind == "corrupt" for f in self.faults)


@dataclass(frozen=True, slots=True)
class Boundary:
    """A point of the golden run's event stream where a kill can land."""

    index: int
    phase: str  # before | in_doubt
    label: str  # e.g. "step_completed:search" or "effect:publish"


@dataclass
class Golden:
    """The crash-free run every trial is judged against."""

    steps: list[str]
    events: list[dict[str, Any]]
    effects: Counter[tuple[str, str]]
    output: bytes
    duration: float
    returncode: int = 0
    #: the file operations recorded in the golden run (crashpoint.faults._fileops.FileOp as
    #: JSON), when a fault family needed them
    fileops: list[dict[str, Any]] = field(default_factory=list)
    #: the write points learned from the golden run (crashpoint.faults._writes.WritePoint as
    #: JSON) per mechanism, when a disk_full family needed them
    writes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: how the file operations / writes were recorded ("strace", "audit hook") or why not
    recorded_by: str = ""
    #: seconds from the golden run's first event to its last (what a kill at time's `within`
    #: should be about; reported in hints, never used to plan)
    span: float = 0.0
    #: the golden run's logical file-operation log (crashpoint.faults._powercut.OpLog as
    #: JSON), when a power_loss family (or an aimed corruption) needed it
    plog: dict[str, Any] = field(default_factory=dict)
    #: per golden event, how many operations of ``plog`` came before it
    plog_events: list[int] = field(default_factory=list)
    #: per file operation of ``fileops``, how many golden events came before it (from a
    #: timed trace; [] without one): where reports draw it among the events
    fileop_events: list[int] = field(default_factory=list)
    #: per file operation of ``fileops``, how a kill just before it is replayed from the
    #: recorded state (``{"upto": k, "events": e}``: the first k operations of ``plog`` and
    #: e events) or why it must be a real kill (``{"why": ...}``); [] when not recorded
    #: (see :func:`crashpoint.faults._killreplay.kill_points`)
    fileop_replay: list[dict[str, Any]] = field(default_factory=list)
    #: per golden event, how a kill at it (before it or in its in-doubt window) is replayed
    #: from the recorded state (``{"upto": k, "events": i}``) or why not (``{"why": ...}``)
    boundary_replay: list[dict[str, Any]] = field(default_factory=list)

    def identity(self, index: int) -> tuple[str, str, int]:
        """(op, name, nth) of event ``index``: its op, its step or effect kind, and its
        occurrence among the events of that op and name up to it (from 1)."""
        ev = self.events[index]
        name = event_name(ev)
        nth = sum(
            1 for e in self.events[: index + 1] if e["op"] == ev["op"] and event_name(e) == name
        )
        return str(ev["op"]), name, nth

    def boundaries(self) -> list[Boundary]:
        out = []
        for i, ev in enumerate(self.events):
            label = f"{ev['op']}:{event_name(ev)}"
            out.append(Boundary(i, "before", label))
            if ev["op"] in ("effect", "llm_call") and not ev.get("failed"):
                # applied (or billed) and then the reply lost
                out.append(Boundary(i, "in_doubt", label))
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "events": self.events,
            "effects": [[k, p, n] for (k, p), n in sorted(self.effects.items())],
            "output": self.output.decode("utf-8", "replace"),
            "duration": self.duration,
            "fileops": self.fileops,
            "writes": self.writes,
            "recorded_by": self.recorded_by,
            "span": self.span,
            "plog": self.plog,
            "plog_events": self.plog_events,
            "fileop_events": self.fileop_events,
            "fileop_replay": self.fileop_replay,
            "boundary_replay": self.boundary_replay,
        }


#: What a clear refusal of damaged state says on stderr (Expect.refuse_patterns' default):
#: the reference library's CheckpointCorrupt, SQLite's "database disk image is malformed" and
#: "file is not a database", and the words such messages use.
REFUSE_PATTERNS = (
    r"CheckpointCorrupt",
    r"\bcorrupt",
    r"malformed",
    r"not a database",
    r"checksum",
    r"integrity",
    r"\bdamaged\b",
    r"bad magic",
)


#: The policies of Expect.no_repeated_llm_calls besides a token budget.
LLM_POLICIES = ("warn", "fail", "off")


@dataclass(frozen=True)
class Expect:
    """What a scenario expects (Contract 3 ``expect:``)."""

    exactly_once: bool = True
    resumes_from_last_completed: bool = True
    same_output: bool = True
    single_writer: bool = True
    no_secret_leak: bool = True
    no_orphans: bool = True
    no_retry_storm: bool = True
    #: no_retry_storm: requests of one network call an attempt may send beyond the golden
    #: run's count of it (retries after a failure) before it is a retry storm
    max_retries: int = 10
    max_state_bytes: int | None = None
    fail_stop_codes: tuple[int, ...] = ()  # exit codes that count as a documented fail-stop
    refuse_codes: tuple[int, ...] = (65,)  # exit codes that count as "refused corrupt state"
    #: after a corruption, a non-zero exit whose stderr matches one of these (regular
    #: expressions, case-insensitive) is a clear refusal too, whatever its code
    refuse_patterns: tuple[str, ...] = REFUSE_PATTERNS
    #: LLM calls the golden run made and the trial made again (re-billed): "warn" (reported,
    #: the trial still passes), "fail", "off", or a whole number: the budget of re-billed
    #: tokens (over it: fail; within it: warn)
    no_repeated_llm_calls: str | int = "warn"
    #: crash_loop, judged in trials with a persistent fault (a family's ``every_attempt``):
    #: the agent must stop (give up, dead-letter, refuse) instead of looping; False: off
    crash_loop: bool = True
    #: crash_loop: the attempt by which it must have stopped (counted from the first attempt
    #: the persistent fault hits); None: the last one the restarts allow
    crash_loop_within: int | None = None
    #: replay_divergence, judged in ``upgrade`` and ``always_replay`` trials: the resumed
    #: attempt continues as the golden run did from the crash; False: off
    replay_divergence: bool = True
    #: no_silent_failure: an attempt that exits 0 must have done the golden run's work
    #: (every step it started completed, no step of the golden run left undone)
    no_silent_failure: bool = True
    #: the checks the scenario asked for by name (``exactly_once: true``, ``crash_loop:
    #: {within: 3}``): if none of a scenario's trials gave one of them anything to judge, the
    #: gate says it could not judge (exit 3), not pass
    required: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        w = self.crash_loop_within
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 2):
            raise InvalidArgument(
                f"crash_loop_within is the attempt by which the agent must have stopped, a "
                f"whole number from 2 (attempt 1 is the one the fault hits first), not {w!r}"
            )
        p = self.no_repeated_llm_calls
        if isinstance(p, bool) or not (p in LLM_POLICIES or (isinstance(p, int) and p >= 0)):
            raise InvalidArgument(
                f"no_repeated_llm_calls is one of {', '.join(LLM_POLICIES)} or a "
                f"token budget (a whole number >= 0), not {p!r}"
            )

    def refusal(self, returncode: int | None, stderr: bytes) -> str:
        """Why an exit is a clear refusal of damaged state ("" if it is not): a refuse code
        with something on stderr, or any other non-zero exit whose stderr matches a refuse
        pattern (a signal or a hang is never a refusal)."""
        if returncode is None or returncode <= 0 or not stderr.strip():
            return ""
        if returncode in self.refuse_codes:
            return f"exit {returncode}"
        import re

        text = stderr[-65536:].decode("utf-8", "replace")
        for pat in self.refuse_patterns:
            m = re.search(pat, text, re.IGNORECASE)
            if m:
                line = next((ln for ln in text.splitlines() if m.group(0) in ln), m.group(0))
                return f"exit {returncode}, stderr: {line.strip()[:160]!r}"
        return ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["fail_stop_codes"] = list(self.fail_stop_codes)
        d["refuse_codes"] = list(self.refuse_codes)
        d["refuse_patterns"] = list(self.refuse_patterns)
        d["required"] = list(self.required)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Expect:
        d = dict(d)
        d["fail_stop_codes"] = tuple(d.get("fail_stop_codes", ()))
        d["refuse_codes"] = tuple(d.get("refuse_codes", (65,)))
        d["refuse_patterns"] = tuple(d.get("refuse_patterns", REFUSE_PATTERNS))
        d["required"] = tuple(d.get("required", ()))
        return cls(**d)


@dataclass
class Attempt:
    """One process run of the agent within a trial."""

    number: int
    argv: list[str]
    returncode: int | None
    signal: int | None
    timed_out: bool
    duration: float
    stdout: bytes
    stderr: bytes
    orphans: tuple[int, ...] = ()
    killed_by: str = ""  # which fault ended it, if one did
    state_copy: str = ""  # folder holding the state as it was when the attempt ended
    tmp_bytes: int = 0  # what it left in its private TMPDIR (measured, then removed)
    containment: str = ""  # how its processes were contained: "cgroup" or "session (why)"

    def describe(self) -> str:
        if self.timed_out:
            how = f"hung, killed after {self.duration:.1f}s"
        elif self.signal is not None:
            how = f"killed by signal {self.signal}"
        else:
            how = f"exit {self.returncode}"
        return f"attempt {self.number}: {how}" + (f" ({self.killed_by})" if self.killed_by else "")

    def error_line(self) -> str:
        """The line of its stderr that names the error (a Node.js error above its stack
        frames, a Python traceback's exception, ...; see :func:`._stderr.error_line`)."""
        return error_line(self.stderr)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's verdict on a trial. ``cause``: for a failure that follows from another
    (e.g. no output because the agent did not complete), the name of that check; ``hint``:
    how to fix it, drawn from the evidence."""

    name: str
    ok: bool
    message: str = ""
    skipped: bool = False
    cause: str = ""
    hint: str = ""
    #: passed, with something to report (shown in the reports, never a failure): e.g. LLM
    #: calls re-billed under the ``warn`` policy
    warning: bool = False

    def __str__(self) -> str:
        mark = (
            "skip"
            if self.skipped
            else ("WARN" if self.ok and self.warning else "ok" if self.ok else "FAIL")
        )
        text = f"{self.name}: {mark}" + (f": {self.message}" if self.message else "")
        if self.cause:
            text += f" [a consequence of {self.cause}]"
        if self.hint and (not self.ok or self.warning):
            text += f" -- hint: {self.hint}"
        return text


@dataclass(frozen=True, slots=True)
class Outcome:
    """Whether planned fault ``fault`` (its index in the plan) took effect in the trial.

    ``fired``: it did (the kill landed at the planned event, instant or file operation; the
    agent really got ENOSPC/EFBIG; the corruption changed an existing file; the failpoint was
    hit; the signal reached a running process). ``where``: where it landed. ``why_not``: when
    it did not, why, and how to make it fire."""

    fault: int
    kind: str
    fired: bool
    where: str = ""
    why_not: str = ""

    def __str__(self) -> str:
        return f"fired: {self.where}" if self.fired else f"did not fire: {self.why_not}"

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault,
            "kind": self.kind,
            "fired": self.fired,
            "where": self.where,
            "why_not": self.why_not,
        }


@dataclass
class TrialResult:
    """One trial as it ran and was judged: its plan, its attempts and events, the effects the
    outside world applied, the checks' verdicts, whether each planned fault took effect
    (:attr:`outcomes`), and what its evidence folder kept. :attr:`status` is the verdict."""

    plan: Plan
    attempts: list[Attempt]
    events: list[dict[str, Any]]
    applied: dict[tuple[str, str], int]
    duplicates: int
    checks: list[CheckResult]
    duration: float
    folder: str = ""
    max_state_bytes: int = 0
    corruptions: list[dict[str, Any]] = field(default_factory=list)
    rerun_steps: list[str] = field(default_factory=list)
    skipped: str = ""  # a reason the trial could not run here (e.g. no tmpfs)
    resume_times: list[float] = field(default_factory=list)
    tmp_bytes: int = 0  # bytes its attempts left in their private TMPDIRs (since removed)
    #: what its own processes made or changed in the system temp folders, each with its size
    #: and how that is known; and how many other changes were seen there meanwhile (not listed)
    outside_writes: list[str] = field(default_factory=list)
    outside_unattributed: int = 0
    ledger_refused: dict[str, int] = field(default_factory=dict)  # what the ledger's limits hit
    evidence_bytes: int = 0  # size of the trial's folder as kept (0: not kept)
    evidence_omitted: list[str] = field(default_factory=list)  # left out over the limit
    #: per planned fault, whether it took effect (one entry per fault of the plan)
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No check failed (a trial that was not exercised is not a failure, nor a pass: see
        :attr:`status`)."""
        return all(c.ok for c in self.checks)

    @property
    def exercised(self) -> bool:
        """Every planned fault took effect (and there was one): only then can it pass."""
        return not self.skipped and bool(self.outcomes) and all(o.fired for o in self.outcomes)

    @property
    def status(self) -> str:
        """``failed`` (a check failed: evidence, whatever fired), ``skipped`` (could not run
        here), ``not exercised`` (a planned fault did not take effect: proves nothing) or
        ``passed``."""
        if self.skipped:
            return "skipped"
        if not self.ok:
            return "failed"
        return "passed" if self.exercised else "not exercised"

    @property
    def not_fired(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.fired]

    @property
    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.ok]

    @property
    def warnings(self) -> list[CheckResult]:
        """Checks that passed with a warning (reported, not a failure)."""
        return [c for c in self.checks if c.ok and c.warning]

    @property
    def root_cause(self) -> CheckResult | None:
        """The failing check, first in :data:`ROOT_ORDER`, that is not a consequence of
        another."""
        roots = [c for c in self.failed if not c.cause]
        order = {n: k for k, n in enumerate(ROOT_ORDER)}
        return min(roots, key=lambda c: order.get(c.name, len(order)), default=None)

    def landed(self) -> str:
        """Where each planned fault landed, or why it did not, in one line."""
        return "; ".join(str(o) for o in self.outcomes) or "no fault planned"

    def verdict(self) -> dict[str, Any]:
        """The comparable outcome of the trial (same across fork/spawn, shards, workers)."""
        return {
            "index": self.plan.index,
            "family": self.plan.family,
            "plan": self.plan.describe(),
            "skipped": self.skipped,
            "checks": {c.name: ("skip" if c.skipped else c.ok) for c in self.checks},
        }

    def to_json(self) -> dict[str, Any]:
        return {
            **self.verdict(),
            "status": self.status,  # not in verdict(): a wall-clock fault may land or not
            "ok": self.ok,
            "seed": self.plan.seed,
            "attempts": [a.describe() for a in self.attempts],
            "failures": [str(c) for c in self.failed],
            "warnings": [str(c) for c in self.warnings],
            "duplicates": self.duplicates,
            "duration": round(self.duration, 4),
            "max_state_bytes": self.max_state_bytes,
            "corruptions": self.corruptions,
            "rerun_steps": self.rerun_steps,
            "folder": self.folder,
            "tmp_bytes": self.tmp_bytes,
            "outside_writes": self.outside_writes,
            "outside_unattributed": self.outside_unattributed,
            "ledger_refused": self.ledger_refused,
            "evidence_bytes": self.evidence_bytes,
            "evidence_omitted": self.evidence_omitted,
            "exercised": self.exercised,
            "outcomes": [o.to_json() for o in self.outcomes],
            "root_cause": self.root_cause.name if self.root_cause else None,
        }


def dumps(obj: Any) -> str:
    """``json.dumps(obj, indent=2, sort_keys=True, default=str)``, the same text, made about
    three times faster: with ``indent`` the standard library encodes in Python through nested
    generators (every trial writes its plan, every failing one its golden run with the data it
    wrote); here one recursive function appends to a list and strings are escaped in C. Falls
    back to the standard encoder for what it does not handle alike (a cycle, an odd key)."""
    out: list[str] = []
    try:
        _encode(obj, out, "\n")
    except (TypeError, ValueError, RecursionError):
        return json.dumps(obj, indent=2, sort_keys=True, default=str)
    return "".join(out)


_escape = json.encoder.encode_basestring_ascii  # the C function where there is one


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == float("inf"):
        return "Infinity"
    if o == -float("inf"):
        return "-Infinity"
    return float.__repr__(o)


def _key(k: Any) -> str:
    if isinstance(k, str):
        return _escape(k)
    if isinstance(k, float):
        return _escape(_float(k))
    if k is True:
        return '"true"'
    if k is False:
        return '"false"'
    if k is None:
        return '"null"'
    if isinstance(k, int):
        return '"' + int.__repr__(k) + '"'
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")


def _encode(o: Any, out: list[str], nl: str) -> None:
    """Append ``o`` as :func:`json.dumps` with ``indent=2, sort_keys=True, default=str``
    writes it, at the indentation ``nl`` (a newline and the spaces of the current level)."""
    if isinstance(o, str):
        out.append(_escape(o))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif isinstance(o, int):
        out.append(int.__repr__(o))
    elif isinstance(o, float):
        out.append(_float(o))
    elif isinstance(o, (list, tuple)):
        if not o:
            out.append("[]")
            return
        inner = nl + "  "
        first = True
        for v in o:
            out.append(("[" if first else ",") + inner)
            first = False
            _encode(v, out, inner)
        out.append(nl + "]")
    elif isinstance(o, dict):
        if not o:
            out.append("{}")
            return
        inner = nl + "  "
        first = True
        for k, v in sorted(o.items()):
            out.append(("{" if first else ",") + inner + _key(k) + ": ")
            first = False
            _encode(v, out, inner)
        out.append(nl + "}")
    else:
        _encode(str(o), out, nl)
