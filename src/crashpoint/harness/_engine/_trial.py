"""A trial: the attempts of one agent run under one fault plan, until it completes or the
restart limit, judged by the checks. Also the golden (crash-free) run."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import sys
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crashpoint._failpoints import LOG_ENV as FAILPOINT_LOG
from crashpoint._placeholders import fill
from crashpoint._proc._cleanup import LIVE, kill_marked, shielded
from crashpoint._proc._process import (
    KEEP_HEAD,
    KEEP_TAIL,
    REAP_VAR,
    AgentProcess,
    Exit,
    kill_tree,
    new_reap_token,
)
from crashpoint.errors import AgentStartError, CrashpointError
from crashpoint.faults import _fileops, _powercut, _strace
from crashpoint.faults._disk import TmpfsNamespace, UsageSample, UsageSampler, capabilities
from crashpoint.faults._files import corrupt
from crashpoint.faults._writes import (
    TRACE_SYSCALLS,
    WritePoint,
    confirm,
    rlimit_argv,
    write_points,
)
from crashpoint.harness._checker._checks import TrialFacts, run_checks
from crashpoint.harness._engine import _power
from crashpoint.harness._engine._accounting import account, kill_at, net_fault
from crashpoint.harness._engine._outside import PrivateTmp, Snapshot, new_temp_entries, temp_entries
from crashpoint.harness._report._safe import (
    EvidenceBudget,
    copy_tree_bounded,
    human_size,
    is_plain_path,
    marker,
    redact_env,
    redact_json,
    redact_text,
    scrub_tree,
    secure_dir,
    tree_size,
    unredact_json,
    write_file,
)
from crashpoint.harness._spec._model import (
    ENTRY_ARGV,
    AgentSpec,
    Attempt,
    CheckResult,
    Expect,
    Fault,
    Golden,
    Plan,
    TrialResult,
    dumps,
)
from crashpoint.harness._standins._http import parse_services
from crashpoint.harness._standins._ledger import Ledger, canonical

__all__ = [
    "CANARY_VAR",
    "BudgetExceeded",
    "GoldenRunFailed",
    "ReplayError",
    "TrialRunner",
    "replay_inputs",
]

CANARY_VAR = "OPENAI_API_KEY"
RUN_ID = "run-1"


def new_trial_id() -> str:
    """``{trial_id}``: fresh for each trial, golden run and replay (never shared by two, not
    even across gate runs), the same for every attempt within one; letters and digits only,
    so it can name a database, a schema or a key prefix for state kept outside the trial's
    folders."""
    return "t" + secrets.token_hex(6)


_PASS_ENV = (
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
#: Variables only a fresh interpreter acts on (the injected sitecustomize reads them at
#: start-up): an attempt that has one is spawned, never forked from the warm zygote.
_FRESH_INTERPRETER = frozenset(
    {"CRASHPOINT_FILEOP_KILL", "CRASHPOINT_FILEOP_AT", "CRASHPOINT_FILEOP_RECORD"}
)
#: Default evidence limits (bytes): per trial folder, and per campaign (one runner).
EVIDENCE_PER_TRIAL = 64 << 20
EVIDENCE_PER_CAMPAIGN = 512 << 20
#: The files of a trial folder that are always kept (small; the history is capped).
_ESSENTIAL = ("result.json", "golden.json", "runner.json", "REPLAY", "plan.json", "history.jsonl")


class GoldenRunFailed(CrashpointError, RuntimeError):
    """The agent does not complete even without faults: nothing to judge trials against."""


class BudgetExceeded(CrashpointError, TimeoutError):
    """The campaign's time budget ran out (:attr:`TrialRunner.deadline`); what was running was
    stopped and cleaned up."""


def _abort(procs: list[Any]) -> None:
    """Kill attempts that were not waited for (an interruption): their whole trees and what
    their reap token marks, then reap them and close their output."""
    for p in procs:
        with contextlib.suppress(Exception):
            if _unreaped(p):
                kill_tree(p.pid, sid=p.pid, token=p.reap_token)
            else:  # its pid may name another process by now: only its token is safe
                kill_marked([p.reap_token])
    for p in procs:
        with contextlib.suppress(Exception):
            p.wait(timeout=0)


def _unreaped(p: Any) -> bool:
    """True while ``p``'s pid is still its own (not reaped: cannot name another process)."""
    proc = getattr(p, "proc", None)
    if proc is not None:
        return proc.returncode is None
    return not p.zygote._has_exited(p.pid)


class ReplayError(CrashpointError, ValueError):
    """A trial folder cannot be replayed as it is (e.g. a redacted agent.env value is unknown)."""


def _alive(pid: int) -> bool:
    """True while process ``pid`` runs (exists and is not a zombie waiting to be reaped)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, _d, files in os.walk(path):
        for n in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, n)).st_size
    return total


def _copy_state(src: str, dst: str, scope: _Scope | None = None) -> None:
    """Copy the state folder ``src`` to ``dst`` (a ``crash-N`` folder of the trial): links as
    links, folders 0700, files 0600, and within what is left of the trial's evidence limit
    (what does not fit is left out and listed in the trial's result). A plan with a stale-copy
    corruption needs its copies whole (they are the fault's input): they are bounded only
    when the trial's evidence is written."""
    allowance = scope.allowance(dst) if scope is not None else 1 << 62
    budget = scope.budget if scope is not None else EvidenceBudget(allowance)
    with contextlib.suppress(OSError):
        copy_tree_bounded(src, dst, allowance, budget, os.path.basename(dst) + "/")


@dataclass
class _Scope:
    """What the runner keeps for the trial (or golden run) under way: the attempts' private
    TMPDIRs, the system temp folders' entries before it, its secrets, its evidence budget."""

    folder: str
    secrets: dict[str, str]
    budget: EvidenceBudget
    whole_copies: bool = False  # a stale-copy corruption reads the copies
    tmp: PrivateTmp = field(init=False)
    temp_before: Snapshot = field(init=False)

    def __post_init__(self) -> None:
        self.tmp = PrivateTmp(os.path.join(self.folder, "tmp"))
        self.temp_before = temp_entries()

    def allowance(self, dst: str) -> int:
        """Bytes a new copy at ``dst`` may take: the limit minus the evidence already there
        (the live state, work and tmp folders are not evidence yet)."""
        if self.whole_copies:
            return 1 << 62
        used = 0
        with contextlib.suppress(OSError):
            for name in os.listdir(self.folder):
                if name not in ("state", "work", "tmp") and os.path.join(self.folder, name) != dst:
                    used += tree_size(os.path.join(self.folder, name))
        return max(0, self.budget.limit - used)


def canary_for(seed: int, index: int) -> str:
    h = hashlib.sha256(f"crashpoint-canary:{seed}:{index}".encode()).hexdigest()[:24]
    return f"sk-crashpoint-canary-{h}"


@dataclass
class TrialRunner:
    """Runs golden runs and trials of one agent; every process it starts, it reaps."""

    agent: AgentSpec
    folder: str
    restarts: int = 3
    expect: Expect = field(default_factory=Expect)
    keep_passing: bool = False
    extra_checks: dict[str, Callable[[TrialFacts], CheckResult]] = field(default_factory=dict)
    launcher: Any = None  # a fork-mode zygote (crashpoint.harness._engine._zygote.Zygote) or None
    #: time.monotonic() by which every attempt must have ended (the campaign's budget); an
    #: attempt still running then is stopped and BudgetExceeded raised
    deadline: float | None = None
    #: bytes of evidence one kept trial folder may hold; all the runner's trials together
    evidence_per_trial: int = EVIDENCE_PER_TRIAL
    evidence_per_campaign: int = EVIDENCE_PER_CAMPAIGN
    source: str = ""  # the scenario file, if any: where replay finds redacted agent.env values
    keep_head: int = KEEP_HEAD  # bytes of each attempt's stdout/stderr kept from the start
    keep_tail: int = KEEP_TAIL  # and from the end (the rest is cut, and the cut stated)

    def __post_init__(self) -> None:
        # the agent runs in its own working folder: a relative {state_dir} would land there,
        # and the checks would look at an empty folder
        self.folder = os.path.abspath(self.folder)
        self._ledger: Ledger | None = None
        self._scope: _Scope | None = None
        self._trial_id = RUN_ID  # {trial_id}: set anew by golden() and each trial
        self.evidence_used = 0  # bytes of the trial folders kept so far

    def ledger(self, history_path: str) -> Ledger:
        """The runner's ledger, reset for a new trial (started once, reused: see
        :meth:`Ledger.reset`); closed by :meth:`close` or when the runner is collected.

        It serves the stand-in services too (HTTP, LLM; the SMTP sink when the agent uses
        ``{smtp}`` or the scenario has ``services.smtp``) on the same ports for the whole
        runner, so an agent that stored a URL finds it again in its next attempt; the token in
        the URLs is new for each trial (a past trial's requests get 403)."""
        if self._ledger is None:
            spec = parse_services(self.agent.services)
            self._ledger = Ledger(history_path=history_path, http=True, services=spec).start()
            weakref.finalize(self, Ledger.close, self._ledger)
            if spec.smtp or self.agent.uses("smtp"):
                try:
                    self._ledger.start_smtp()
                except Exception:
                    self._ledger.close()
                    self._ledger = None
                    raise
            return self._ledger
        return self._ledger.reset(history_path)

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    def __enter__(self) -> TrialRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- what a trial keeps -----------------------------------------------------------------------

    def secrets(self, canary: str) -> dict[str, str]:
        """Name -> value of what evidence must never hold: every ``agent.env`` value (but an
        existing absolute path: :func:`is_plain_path`) and the canary (it wins over an
        ``agent.env`` entry of the same name, as in the environment);
        a trial's messages also quote the golden run's output, so its canary too."""
        out = {k: v for k, v in self.agent.env if not is_plain_path(k, v)}
        out[CANARY_VAR] = canary
        if canary != canary_for(0, -1):
            out[f"{CANARY_VAR}_GOLDEN"] = canary_for(0, -1)
        return out

    def _new_scope(self, folder: str, canary: str, plan: Plan | None = None) -> _Scope:
        left = self.evidence_per_campaign - self.evidence_used
        if left < self.evidence_per_trial:
            why = (
                f"the campaign's evidence limit of {human_size(self.evidence_per_campaign)}"
                f", {human_size(self.evidence_used)} already used by earlier trials"
            )
        else:
            why = f"the per-trial evidence limit of {human_size(self.evidence_per_trial)}"
        stale = plan is not None and any(
            f.kind == "corrupt" and f.arg("how") == "stale-copy" for f in plan.faults
        )
        self._scope = _Scope(
            folder,
            self.secrets(canary),
            EvidenceBudget(max(0, min(self.evidence_per_trial, left)), why),
            whole_copies=stale,
        )
        return self._scope

    def _end_scope(self, result: TrialResult | None, ledger: Ledger) -> None:
        """The trial's attempts are over: measure and remove their TMPDIRs, list what appeared
        in the system temp folders, note what the ledger refused, redact the messages."""
        scope = self._scope
        if scope is None:
            return
        sizes = scope.tmp.finish()
        outside = new_temp_entries(scope.temp_before)
        if result is None:
            return
        for att in result.attempts:
            att.tmp_bytes = sizes.get(att.number, 0)
        result.tmp_bytes = sum(sizes.values())
        result.outside_writes = [redact_text(o, scope.secrets) for o in outside]
        result.ledger_refused = {k: n for k, n in sorted(ledger.refused.items()) if n}
        result.checks = [
            dataclasses.replace(
                c,
                message=redact_text(c.message, scope.secrets),
                hint=redact_text(c.hint, scope.secrets),
            )
            for c in result.checks
        ]
        result.corruptions = redact_json(result.corruptions, scope.secrets)

    # -- environment ----------------------------------------------------------------------------

    def _env(
        self, ledger: Ledger, attempt: int, canary: str, trial: str, extra: dict[str, str]
    ) -> dict[str, str]:
        env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
        env.update(dict(self.agent.env))
        env.update(ledger.env())
        env.update(
            {
                "CRASHPOINT_ATTEMPT": str(attempt),
                "CRASHPOINT_TRIAL": trial,
                "CRASHPOINT_RUN_ID": RUN_ID,
                "CRASHPOINT_TRIAL_ID": self._trial_id,
                CANARY_VAR: canary,
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        if self._scope is not None:  # a private temp folder, measured and removed after it
            tmp = self._scope.tmp.for_attempt(attempt)
            env.update({"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp})
        env.update(extra)
        # one fresh marker per attempt: the reaper finds what the attempt detached by it
        env[REAP_VAR] = new_reap_token()
        return env

    def _spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        rlimit: int | None,
        on_start: Callable[[int], None],
        output: str | None = None,
    ) -> AgentProcess:
        """Start an attempt; ``on_start(pid)`` registers it before it can send an event.
        ``output``: stream its stdout and stderr to ``output + ".stdout"`` / ``".stderr"``.

        With a launcher (fork mode) an entry agent, or a ``{python}`` command agent whose
        launcher runs its script (``Zygote.main``), is forked, unless the attempt needs a
        process set-up only a fresh interpreter has: a wrapper such as nsenter (tmpfs) or
        strace, an RLIMIT_FSIZE, or the injected sitecustomize of a fileop kill. Then it is
        spawned.
        """
        out, err = (output + ".stdout", output + ".stderr") if output else (None, None)
        prefix = [*ENTRY_ARGV, self.agent.entry]
        forkable = (
            self.launcher is not None and rlimit is None and not _FRESH_INTERPRETER & set(env)
        )
        main = (
            self.launcher.main_of(argv)
            if forkable and self.agent.command and getattr(self.launcher, "main", None)
            else None
        )
        if forkable and (main is not None or (self.agent.entry and argv[: len(prefix)] == prefix)):
            proc: AgentProcess = self.launcher.spawn(
                self.agent.entry,
                env=env,
                cwd=cwd,
                timeout=self.agent.timeout,
                args=main[2] if main is not None else argv[len(prefix) :],
                on_start=on_start,
                keep_head=self.keep_head,
                keep_tail=self.keep_tail,
                stdout_path=out,
                stderr_path=err,
                **({"main": main[:2]} if main is not None else {}),
            )
            return proc
        proc = AgentProcess(
            argv,
            env,
            cwd=cwd,
            timeout=self.agent.timeout,
            rlimit_fsize=rlimit,
            stdout_path=out,
            stderr_path=err,
            keep_head=self.keep_head,
            keep_tail=self.keep_tail,
        ).start()
        on_start(proc.pid)
        return proc

    def _limit(self, t_spawn: float) -> float:
        """How long an attempt started at ``t_spawn`` may run: its timeout, within the budget."""
        if self.deadline is None:
            return self.agent.timeout
        return max(0.0, min(self.agent.timeout, self.deadline - t_spawn))

    def _budget_cut(self, ex: Exit | None, t_spawn: float) -> bool:
        """True if the budget, not the agent's own timeout, ended this attempt."""
        return (
            ex is not None
            and ex.timed_out
            and self.deadline is not None
            and self.deadline - t_spawn < self.agent.timeout
        )

    # -- golden ---------------------------------------------------------------------------------

    def golden(self, needs: frozenset[str] | set[str] = frozenset()) -> Golden:
        """Run the agent once without faults and record what it did.

        ``needs``: what the fault families must learn from it besides its events:
        ``fileops`` (its file operations, for kill at fileop) and ``writes`` (its write points,
        for disk_full without a capacity). Both come from a syscall trace (strace); without
        strace, file operations of a Python agent come from the injected audit hook, and
        write points are not recorded (:attr:`Golden.recorded_by` says why)."""
        folder = os.path.join(self.folder, "golden")
        secure_dir(self.folder)  # refuse a planted or foreign folder before touching it
        shutil.rmtree(folder, ignore_errors=True)
        state, work = os.path.join(folder, "state"), os.path.join(folder, "work")
        secure_dir(state, root=self.folder)
        secure_dir(work, root=self.folder)
        # the same ledger (HTTP front included) as the trials: an agent that speaks HTTP needs
        # it in the golden run too, or its golden run records no effect
        ledger = self.ledger(os.path.join(folder, "history.jsonl"))
        self._trial_id = new_trial_id()
        argv = self.agent.argv(
            state_dir=state,
            workdir=work,
            run_id=RUN_ID,
            urls=ledger.urls(),
            trial_id=self._trial_id,
        )
        scope = self._new_scope(folder, canary_for(0, -1))
        env = self._env(ledger, 1, canary_for(0, -1), "golden", {})
        rec = _Recording(
            needs, os.path.join(folder, "record"), self.agent.cwd or work, self._python_agent()
        )
        argv, env = rec.wrap(argv), rec.environ(env)
        t0 = time.monotonic()
        token = env[REAP_VAR]
        LIVE.add_token(token)  # before it starts: a harness killed now leaves it to the reaper
        procs: list[AgentProcess] = []
        ex: Exit | None = None
        detacher: _strace.Detacher | None = None
        try:
            with shielded():  # started and recorded as one step
                try:
                    procs.append(
                        self._spawn(
                            argv,
                            env,
                            self.agent.cwd or work,
                            None,
                            functools.partial(ledger.begin_attempt, 1),
                        )
                    )
                except AgentStartError as exc:  # one line, not a traceback
                    raise GoldenRunFailed(
                        f"the golden run (no faults) could not start: {exc}"
                    ) from None
                out = _strace.output_of(argv)
                if out:  # the run ends with the agent, not with a helper it left
                    detacher = _strace.Detacher(procs[0].pid, out)
            ex = procs[0].wait(timeout=self._limit(t0))
        finally:
            with shielded():
                if detacher is not None:
                    detacher.stop()
                    if ex is not None:
                        ex = detacher.exit(ex)
                if ex is None:
                    _abort(procs)
                LIVE.drop_token(token)
        assert ex is not None
        if self._budget_cut(ex, t0):
            raise BudgetExceeded("the golden run was stopped")
        duration = time.monotonic() - t0
        self._end_scope(None, ledger)
        learned = (
            rec.learn(state, work, [float(e.get("wall", 0.0)) for e in ledger.events])
            if ex.returncode == 0
            else {}
        )
        self._bound_folder(folder, scope)
        events = [dict(e) for e in ledger.events]
        applied = Counter({k: n for k, n in ledger.applied_counts().items() if n})
        if ex.returncode != 0:
            raise GoldenRunFailed(
                redact_text(
                    f"the golden run (no faults) did not complete: {ex.describe()}. Command: "
                    f"{' '.join(argv)}\nstderr:\n{ex.stderr.decode('utf-8', 'replace')[-2000:]}",
                    scope.secrets,
                )
            )
        steps = [str(e.get("step")) for e in events if e["op"] == "step_started"]
        span = events[-1]["t"] - events[0]["t"] if events else 0.0
        for e in events:
            e.pop("t", None)
            e.pop("pid", None)
            e.pop("wall", None)
        return Golden(
            steps,
            events,
            applied,
            ex.stdout,
            duration,
            span=round(span, 4),
            fileops=learned.get("fileops", []),
            writes=learned.get("writes", {}),
            recorded_by=rec.how,
            plog=learned.get("plog", {}),
            plog_events=learned.get("plog_events", []),
        )

    def _python_agent(self) -> bool:
        """Started by this interpreter (an entry, or a command run with {python})."""
        return bool(self.agent.entry) or (
            bool(self.agent.command) and self.agent.command[0] == "{python}"
        )

    # -- trial ------------------------------------------------------------------------------------

    def run(self, plan: Plan, golden: Golden) -> TrialResult:
        """Run one trial under ``plan``; keep its folder only if it failed (or keep_passing)."""
        tdir = os.path.join(self.folder, f"trial-{plan.index:04d}")
        secure_dir(self.folder)  # refuse a planted or foreign folder before touching it
        shutil.rmtree(tdir, ignore_errors=True)
        state, work = os.path.join(tdir, "state"), os.path.join(tdir, "work")
        secure_dir(state, root=self.folder)
        secure_dir(work, root=self.folder)
        write_file(os.path.join(tdir, "plan.json"), dumps(plan.to_json()), durable=False)
        canary = canary_for(plan.seed, plan.index)
        self._new_scope(tdir, canary, plan)
        skipped = self._unsupported(plan, golden)
        t0 = time.monotonic()
        attempts: list[Attempt] = []
        corruptions: list[dict[str, Any]] = []
        max_bytes = [0]
        resume_times: list[float] = []
        ledger = self.ledger(os.path.join(tdir, "history.jsonl"))
        ledger.kills = [
            kill_at(f)
            for f in plan.faults
            if f.kind == "kill" or (f.kind == "power_loss" and f.arg("op"))
        ]
        nets = {i: net_fault(f) for i, f in enumerate(plan.faults) if f.kind == "network"}
        ledger.net_faults = list(nets.values())  # the stand-ins fail these requests
        notes: dict[int, dict[str, Any]] = {}
        if not skipped:
            self._attempts(
                plan,
                ledger,
                state,
                work,
                tdir,
                canary,
                attempts,
                corruptions,
                max_bytes,
                resume_times,
                notes,
                golden,
            )
        for i, nf in nets.items():  # how many requests each failed: fault accounting
            notes.setdefault(i, {})["net_fired"] = nf.fired
        events = [dict(e) for e in ledger.events]
        applied = Counter({k: n for k, n in ledger.applied_counts().items() if n})
        duplicates = sum(e.duplicates for e in ledger.effects.values())
        max_bytes[0] = max(max_bytes[0], _dir_size(state))
        copies = [a.state_copy for a in attempts if a.state_copy]
        power = next((nt["power"] for nt in notes.values() if "power" in nt), None)
        facts = TrialFacts(
            golden,
            plan,
            self.expect,
            attempts,
            events,
            applied,
            canary,
            [state, *copies],
            max_bytes[0],
            {"ended": dict(ledger.ended), "power": power},
        )
        if skipped or not attempts:  # nothing ran (a power cut with nothing to cut): no
            checks: list[CheckResult] = []  # evidence to judge; the accounting says why
        else:
            checks = run_checks(facts, self.extra_checks)
        result = TrialResult(
            plan,
            attempts,
            events,
            dict(applied),
            duplicates,
            checks,
            time.monotonic() - t0,
            tdir,
            max_bytes[0],
            corruptions,
            _reruns(events),
            skipped,
            resume_times,
        )
        if not skipped:
            result.outcomes = account(plan, attempts, events, list(ledger.killed), notes, golden)
        self._end_scope(result, ledger)
        if result.ok and not self.keep_passing:  # evidence is for failures (and replays)
            shutil.rmtree(tdir, ignore_errors=True)
            result.folder = ""
        else:
            self._write_evidence(result, golden, tdir)
        return result

    def _unsupported(self, plan: Plan, golden: Golden) -> str:
        for f in plan.faults:
            if f.kind == "disk_full":
                mech = f.arg("mechanism", "tmpfs")
                caps = capabilities()
                if mech == "tmpfs" and not caps.tmpfs:
                    return f"disk_full via tmpfs skipped: {caps.tmpfs_reason}"
                if mech == "rlimit" and not caps.rlimit:
                    return f"disk_full via RLIMIT_FSIZE skipped: {caps.rlimit_reason}"
            if f.kind == "power_loss":
                why = _power.unsupported(f, golden)
                if why:
                    return why
            if (
                f.kind == "fileop"
                and f.arg("n") is not None
                and self.agent.command
                and "{python}" not in " ".join(self.agent.command)
            ):
                return "fileop faults by number need a Python agent started with {python}"
        return ""

    def _attempts(
        self,
        plan: Plan,
        ledger: Ledger,
        state: str,
        work: str,
        tdir: str,
        canary: str,
        attempts: list[Attempt],
        corruptions: list[dict[str, Any]],
        max_bytes: list[int],
        resume_times: list[float],
        notes: dict[int, dict[str, Any]],
        golden: Golden,
    ) -> None:
        """Run the trial's attempts; ``notes`` collects, per planned fault (its index in the
        plan), the evidence of whether it took effect (see :mod:`._accounting`)."""
        self._trial_id = new_trial_id()
        argv0 = self.agent.argv(
            state_dir=state,
            workdir=work,
            run_id=RUN_ID,
            urls=ledger.urls(),
            trial_id=self._trial_id,
        )
        golden_note = golden.recorded_by
        n = 0
        one_resume = False
        for i, f in enumerate(plan.faults):
            if f.kind == "power_loss" and f.attempt == 1:
                if f.arg("upto") is None:  # nothing to cut: never a pass (accounting)
                    notes[i] = {"cut": (False, "", str(f.arg("label") or "no crash state"))}
                    return
                # attempt 1 is the golden run up to the cut (not re-run): its crash state
                # and the events it had sent; then the agent resumes once
                cut = _power.cut(f, golden, {"state_dir": state, "workdir": work})
                _power.replay_events(ledger, cut.events, 1)
                ledger.end_attempt(1, reaped=True)
                att = _power.synthetic_attempt(cut, argv0)
                att.state_copy = os.path.join(tdir, "crash-1")
                _copy_state(state, att.state_copy, self._scope)
                write_file(
                    os.path.join(tdir, "powerloss.txt"),
                    _power.trace_excerpt(golden, f),
                    durable=False,
                )
                attempts.append(att)
                notes[i] = {
                    "cut": cut.note(),
                    "power": {
                        "explain": cut.state.explain,
                        "lost": list(cut.state.lost),
                        "label": cut.state.label(),
                    },
                }
                n = 1
                one_resume = not any(g.attempt > 1 for g in plan.faults)
        while n < 1 + self.restarts and not (one_resume and n >= 2):
            n += 1
            mine = [(i, f) for i, f in enumerate(plan.faults) if f.attempt == n]
            faults = [f for _i, f in mine]
            for i, f in mine:
                if f.kind == "corrupt":
                    rng = random.Random(f"{plan.seed}:{plan.index}:{f.arg('seed', 0)}")
                    older = next((a.state_copy for a in attempts if a.state_copy), None)
                    pattern = fill(
                        str(f.arg("path", "{state_dir}/**")), {"state_dir": state, "workdir": work}
                    )
                    aim = f.arg("aim")
                    c = corrupt(
                        str(f.arg("how")),
                        pattern,
                        rng,
                        older=older,
                        root=state,
                        roots=(state, work),
                        aim=None
                        if aim is None
                        else [
                            (
                                fill(str(p), {"state_dir": state, "workdir": work}),
                                int(off),
                                int(size),
                            )
                            for p, off, size in aim
                        ],
                    )
                    notes[i] = {
                        "corruption": c.to_json() if c else None,
                        "pattern": f.arg("path", "{state_dir}/**"),
                    }
                    corruptions.append(
                        c.to_json()
                        if c
                        else {"how": f.arg("how"), "path": pattern, "detail": "nothing to corrupt"}
                    )
            extra: dict[str, str] = {}
            fps = [str(f.arg("spec")) for f in faults if f.kind == "failpoint"]
            fp_log = os.path.join(tdir, f"attempt-{n}.failpoints")
            if fps:
                extra["CRASHPOINT_FAILPOINTS"] = ";".join(fps)
            armed: _fileops.Armed | None = None
            for i, f in mine:
                if f.kind != "fileop":
                    continue
                if f.arg("n") is not None:  # a hand-written plan: the n-th operation (audit)
                    extra["CRASHPOINT_FILEOP_KILL"] = str(int(f.arg("n", 1)))
                    extra["PYTHONPATH"] = os.pathsep.join(
                        [_fileops.INJECT_DIR, *filter(None, [os.environ.get("PYTHONPATH", "")])]
                    )
                elif f.arg("fileop"):
                    op = _fileops.FileOp.from_json(f.arg("fileop"))
                    armed = _fileops.arm(
                        op,
                        {"state_dir": state, "workdir": work},
                        os.path.join(tdir, f"attempt-{n}"),
                        use_strace=op.via == "strace",
                        cwd=self.agent.cwd or work,
                    )
                    notes.setdefault(i, {})["armed"] = armed
            rlimit = None
            ns: TmpfsNamespace | None = None
            usage: UsageSampler | None = None
            disk: _DiskWatch | None = None
            argv = list(argv0)
            for i, f in mine:
                if f.kind != "disk_full":
                    continue
                mech = f.arg("mechanism", "tmpfs")
                if mech == "failpoint":
                    extra["CRASHPOINT_FAILPOINTS"] = ";".join(
                        filter(
                            None,
                            [
                                extra.get("CRASHPOINT_FAILPOINTS"),
                                f"journal.write=enospc@{int(f.arg('nth', 3))}",
                            ],
                        )
                    )
                    continue
                note = notes.setdefault(i, {})
                point = f.arg("point")
                if point is not None and not point:  # the golden run recorded no write point
                    note["disk"] = (
                        False,
                        "",
                        "no write point to fill the disk at: "
                        + (golden_note or "the golden run wrote no file"),
                    )
                    continue
                wp = WritePoint.from_json(point) if point else None
                value = wp.value if wp is not None else int(f.arg("capacity", 65536))
                traced, why = _strace.available()
                trace = os.path.join(tdir, f"attempt-{n}.disk.strace") if traced else None
                inner = list(argv)  # (one trace per attempt: a fileop kill planned for the
                #                      same attempt, which no family does, is not armed)
                armed = None
                if mech == "tmpfs":
                    ns = (
                        TmpfsNamespace(state, free=value)
                        if wp is not None
                        else TmpfsNamespace(state, value)
                    )
                    if trace:
                        inner = _strace.wrap(inner, trace, syscalls=_DISK_SYSCALLS)
                    argv = ns.wrap(inner, cwd=self.agent.cwd or work)
                elif trace:  # the limit set inside the trace: strace's own file is not cut
                    argv = _strace.wrap(rlimit_argv(inner, value), trace, syscalls=_DISK_SYSCALLS)
                else:
                    rlimit = value
                disk = _DiskWatch(i, mech, state, wp, value, trace, why, n)
                note["watch"] = disk
            if "CRASHPOINT_FAILPOINTS" in extra:
                extra[FAILPOINT_LOG] = fp_log
                for i, f in mine:
                    if f.kind in ("failpoint", "disk_full"):
                        notes.setdefault(i, {})["failpoint_log"] = fp_log
            if armed is not None:
                argv = armed.wrap(argv)
            recovery: tuple[int, _power.Recovery] | None = None
            for i, f in mine:
                if f.kind == "power_loss" and f.arg("op"):  # a power cut during recovery
                    try:
                        initial = _power.snapshot({"state_dir": state, "workdir": work})
                    except ValueError as exc:  # too much to model: the cut does not fire
                        notes[i] = {"cut": (False, "", f"{exc} (what attempt {n} starts from)")}
                        continue
                    rec = _power.Recovery(
                        f, i, os.path.join(tdir, f"attempt-{n}.power.strace"), initial
                    )
                    argv = rec.wrap(argv)
                    recovery = (i, rec)
            together = any(f.kind == "resumers" for f in faults)
            numbers = [n, n + 1] if together else [n]
            procs: list[tuple[int, AgentProcess, float]] = []
            exits: list[tuple[int, Exit]] = []
            timers: list[threading.Timer] = []
            watches: list[_fileops.Watch] = []
            detachers: list[_strace.Detacher] = []
            sampler: _Sampler | None = None
            tokens: list[str] = []
            try:
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    raise BudgetExceeded(f"trial {plan.index} was stopped")
                for num in numbers:
                    env = self._env(ledger, num, canary, f"{plan.seed}:{plan.index}", extra)
                    for note in notes.values():
                        if note.get("armed") is not None:
                            env = note["armed"].environ(env)
                    tokens.append(env[REAP_VAR])
                    LIVE.add_token(tokens[-1])  # before it starts (see golden)
                    t_spawn = time.monotonic()
                    with shielded():  # started and recorded as one step
                        p = self._spawn(
                            argv,
                            env,
                            self.agent.cwd or work,
                            rlimit,
                            functools.partial(ledger.begin_attempt, num),
                            os.path.join(tdir, f"attempt-{num}"),
                        )
                        procs.append((num, p, t_spawn))
                        out = _strace.output_of(argv)
                        if out:  # the attempt ends with the agent, not its last helper
                            detachers.append(_strace.Detacher(p.pid, out))
                with shielded():
                    timers = self._timers(
                        mine, procs[0][1], procs[0][0], procs[0][2], ledger, notes
                    )
                    if disk is not None:
                        if ns is not None and disk.trace is None:
                            usage = UsageSampler(ns)
                        ledger.kill_when = disk.full_before
                    lead = procs[0][1]
                    watches = [
                        _fileops.Watch(
                            note["armed"], functools.partial(lead.signal, signal.SIGKILL)
                        )
                        for note in notes.values()
                        if note.get("armed") is not None and "landed" not in note
                    ]
                sampler = _Sampler(state, max_bytes) if self.expect.max_state_bytes else None
                for j, (num, p, t_spawn) in enumerate(procs):
                    end = p.wait(timeout=self._limit(t_spawn))
                    d = detachers[j] if j < len(detachers) else None
                    exits.append((num, d.exit(end) if d is not None else end))
            finally:
                with shielded():  # stopped (a signal, the budget, an error): nothing left behind
                    ledger.on_first_event = None
                    ledger.kill_when = None
                    for w in watches:
                        w.stop()
                    for d in detachers:
                        d.stop()
                    for t in timers:
                        t.cancel()
                    if sampler:
                        sampler.stop()
                    if usage is not None and disk is not None:
                        disk.sample = usage.stop()
                    _abort([p for _num, p, _t in procs[len(exits) :]])
                    for token in tokens:
                        LIVE.drop_token(token)
                    if ns is not None:
                        ns.close()
            if disk is not None:
                notes[disk.index]["disk"] = disk.outcome(
                    ledger, exits[0][1].returncode if exits else None
                )
            for i, f in mine:
                note = notes.get(i, {})
                if f.kind == "fileop" and note.get("armed") is not None:
                    note["landed"] = tuple(_fileops.landed(note.pop("armed"), attempt=n))
            if any(
                self._budget_cut(ex, t) for (_n, ex), (_m, _p, t) in zip(exits, procs, strict=True)
            ):
                raise BudgetExceeded(f"trial {plan.index} was stopped")
            if together:
                n += 1
                for i, f in mine:
                    if f.kind == "resumers":
                        notes[i] = {
                            "spans": [
                                (t, t + ex.duration)
                                for (_n, ex), (_m, _p, t) in zip(exits, procs, strict=True)
                            ]
                        }
            for num, _ex in exits:
                ledger.end_attempt(num, reaped=True)
            for (num, ex), (_m, _p, t_spawn) in zip(exits, procs, strict=True):
                killed = [k for k in ledger.killed if k["attempt"] == num]
                why = ""
                if killed:
                    k = killed[-1]
                    why = f"killed at event #{k['event']} {k['op']}:{k['name']} ({k['phase']})"
                elif ex.signal is not None:
                    why = next((str(f) for f in faults if f.kind != "corrupt"), "")
                # its stdout/stderr are in attempt-N.stdout/.stderr already (streamed, capped)
                att = Attempt(
                    num,
                    argv,
                    ex.returncode,
                    ex.signal,
                    ex.timed_out,
                    ex.duration,
                    ex.stdout,
                    ex.stderr,
                    ex.orphans,
                    why,
                    containment=ex.containment,
                )
                max_bytes[0] = max(max_bytes[0], _dir_size(state))
                if ex.returncode != 0:
                    att.state_copy = os.path.join(tdir, f"crash-{num}")
                    _copy_state(state, att.state_copy, self._scope)
                first = ledger.first_event.get(num)
                if num > 1 and first is not None:
                    resume_times.append(max(0.0, first - t_spawn))
                attempts.append(att)
            if recovery is not None:
                i, rec = recovery
                want = kill_at(rec.fault)
                hit = next((k for k in ledger.killed if k.get("kill") == want), None)
                where = (
                    f"event #{hit['event']} {hit['op']}:{hit['name']}"
                    if hit
                    else (
                        f"it ended ({attempts[-1].describe().split(': ', 1)[-1]}) without "
                        f"sending {want.op}:{want.name} #{want.nth}, where the cut was planned"
                    )
                )
                mine_events = [e for e in ledger.events if e["attempt"] == n]
                cut_note, st, text = rec.apply(
                    {"state_dir": state, "workdir": work},
                    hit is not None,
                    where,
                    self.agent.cwd or work,
                    mine_events,
                    random.Random(f"{plan.seed}:{plan.index}:{rec.fault.arg('seed', 0)}"),
                )
                notes[i] = {"cut": cut_note}
                if st is not None:
                    notes[i]["power"] = {
                        "explain": st.explain,
                        "lost": list(st.lost),
                        "label": st.label(),
                    }
                    write_file(os.path.join(tdir, f"powerloss-{n}.txt"), text, durable=False)
                with contextlib.suppress(OSError):
                    os.unlink(rec.trace)
            # stop when it completed; or when it stopped as documented (a fail-stop code, a
            # refusal of corrupt state) and no fault is planned for a later attempt. A
            # completed run is never restarted: a fault planned for a later attempt did not
            # take effect, and the accounting says so.
            final = attempts[-1]
            pending = any(f.attempt > n for f in plan.faults)
            documented = final.returncode in self.expect.fail_stop_codes or (
                plan.corrupts and bool(self.expect.refusal(final.returncode, final.stderr))
            )
            if final.returncode == 0 or (documented and not pending):
                break

    def _timers(
        self,
        mine: list[tuple[int, Fault]],
        proc: AgentProcess,
        num: int,
        t_spawn: float,
        ledger: Ledger,
        notes: dict[int, dict[str, Any]],
    ) -> list[threading.Timer]:
        """Timers for the attempt's faults at an instant: started at its first event (or at
        its start, for a fault anchored there); each delivery is noted for the accounting:
        when, and whether the process was still running."""
        timers: list[threading.Timer] = []
        early: list[threading.Timer] = []

        def deliver(i: int, sig: int, what: str) -> None:
            alive = _alive(proc.pid)
            if alive:
                proc.signal(sig)
            sent = notes.setdefault(i, {}).setdefault("sent", [])
            origin = ledger.first_event.get(num, t_spawn)
            sent.append(
                {
                    "what": what,
                    "alive": alive,
                    "at": time.monotonic() - origin,
                    "events": sum(1 for e in list(ledger.events) if e["attempt"] == num),
                }
            )

        for i, f in mine:
            if f.kind not in ("kill_at_time", "signal"):
                continue
            at = float(f.arg("seconds", 0.1))
            pairs: list[tuple[float, int, str]] = []
            if f.kind == "kill_at_time":
                pairs.append((at, signal.SIGKILL, "SIGKILL"))
            elif str(f.arg("sig", "TERM")).upper() == "TERM":
                pairs += [
                    (at, signal.SIGTERM, "SIGTERM"),
                    (at + float(f.arg("grace", 2.0)), signal.SIGKILL, "SIGKILL"),
                ]
            else:
                pairs += [
                    (at, signal.SIGSTOP, "SIGSTOP"),
                    (at + float(f.arg("pause", 0.5)), signal.SIGCONT, "SIGCONT"),
                ]
            notes.setdefault(i, {})["anchor"] = f.arg("anchor", "first event")
            for secs, sig, what in pairs:
                t = threading.Timer(secs, deliver, (i, sig, what))
                t.daemon = True
                timers.append(t)
                if f.arg("anchor") == "start":
                    early.append(t)
        later = [t for t in timers if t not in early]
        once = threading.Lock()

        def start_later(attempt: int) -> None:
            if attempt == num and once.acquire(blocking=False):  # the ledger's thread or us
                for t in later:
                    t.start()

        if later:
            ledger.on_first_event = start_later
            if num in ledger.first_event:  # it spoke before the timers were made
                start_later(num)
        for t in early:
            t.start()
        return timers

    def _write_evidence(self, result: TrialResult, golden: Golden, tdir: str) -> None:
        """The failing (or kept) trial's folder as evidence: result.json, golden.json,
        runner.json and REPLAY written safely (0600, temp + rename, no link followed); every
        secret redacted from every file; everything within the evidence limit, what was left
        out listed in result.json."""
        scope = (
            self._scope
            if self._scope is not None and self._scope.folder == tdir
            else _Scope(
                tdir,
                self.secrets(canary_for(result.plan.seed, result.plan.index)),
                EvidenceBudget(self.evidence_per_trial),
            )
        )
        golden_secrets = self.secrets(canary_for(0, -1))
        write_file(
            os.path.join(tdir, "golden.json"), dumps(redact_json(golden.to_json(), golden_secrets))
        )
        agent = self.agent.to_json()
        agent["env"] = redact_env(agent.get("env", {}))  # replay: see replay_inputs()
        write_file(
            os.path.join(tdir, "runner.json"),
            dumps(
                {
                    "agent": agent,
                    "restarts": self.restarts,
                    "expect": self.expect.to_json(),
                    "scenario": self.source,
                    "redacted_env": sorted(k for k, v in agent["env"].items() if v == marker(k)),
                }
            ),
        )
        replay = f"{sys.executable} -m crashpoint replay {tdir}"
        write_file(os.path.join(tdir, "REPLAY"), replay + "\n")
        self._bound_folder(tdir, scope)
        result.evidence_omitted = scope.budget.messages()
        summary = result.to_json()
        summary["checks_detail"] = [str(c) for c in result.checks]
        summary["replay"] = replay
        write_file(os.path.join(tdir, "result.json"), dumps(summary))
        result.evidence_bytes = tree_size(tdir)
        self.evidence_used += result.evidence_bytes

    def _bound_folder(self, folder: str, scope: _Scope) -> None:
        """Keep ``folder`` within ``scope``'s evidence budget (the essential files first, then
        attempt outputs, crash copies in order, the final state and work folders: a file that
        does not fit is deleted and listed), then redact every secret in what is left."""
        budget = scope.budget
        used = sum(tree_size(os.path.join(folder, n)) for n in _ESSENTIAL)
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            return

        def rank(name: str) -> tuple[int, int, str]:
            num = int("".join(c for c in name if c.isdigit()) or 0)
            if name.startswith("attempt-"):
                return (0, num, name)
            if name.startswith("crash-"):
                return (1, num, name)
            return (2 if name == "state" else 3 if name == "work" else 4, 0, name)

        for name in sorted((n for n in names if n not in _ESSENTIAL), key=rank):
            path = os.path.join(folder, name)
            entry = name + "/" if os.path.isdir(path) and not os.path.islink(path) else name
            for fpath, size in _files(path):
                if used + size <= budget.limit:
                    used += size
                    continue
                with contextlib.suppress(OSError):
                    os.unlink(fpath)
                budget.leave_out(entry, size)
        _redact_history(os.path.join(folder, "history.jsonl"), scope.secrets)
        scrub_tree(folder, scope.secrets, skip=_ESSENTIAL)


#: What a disk_full attempt is traced for: its writes, and how it reads the free space.
_DISK_SYSCALLS = (*TRACE_SYSCALLS, "?statfs", "?fstatfs", "?statfs64", "?fstatfs64")


class _Recording:
    """What the golden run is recorded with: one syscall trace for both file operations and
    write points when strace works here, else the audit hook of a Python agent for its file
    operations (and no write points). :attr:`how` says which, or why nothing."""

    def __init__(
        self, needs: frozenset[str] | set[str], prefix: str, cwd: str, python: bool
    ) -> None:
        self.needs, self.prefix, self.cwd = frozenset(needs), prefix, cwd
        self.trace = ""
        self.armed: _fileops.Armed | None = None
        self.how = ""
        if not self.needs:
            return
        ok, why = _strace.available()
        if ok:
            self.trace = prefix + ".strace"
            self.how = "strace"
        elif "fileops" in self.needs and python:
            self.armed = _fileops.recorder(prefix, use_strace=False, cwd=cwd)
            self.how = f"audit hook (no strace: {why})"
        else:
            self.how = f"not recorded: strace is unavailable ({why})" + (
                "; the audit hook only sees a Python agent started with {python}"
                if "fileops" in self.needs
                else ""
            )

    def wrap(self, argv: list[str]) -> list[str]:
        if self.trace:
            plog = "plog" in self.needs
            calls = sorted(
                {
                    c.lstrip("?")
                    for c in (
                        *TRACE_SYSCALLS,
                        *_fileops.GOLDEN_SYSCALLS,
                        *(_powercut.SYSCALLS if plog else ()),
                    )
                }
            )
            return _strace.wrap(
                argv,
                self.trace,
                syscalls=calls,
                strsize=_powercut.STRSIZE if plog else 0,
                timestamps=plog,
            )
        return argv

    def environ(self, env: dict[str, str]) -> dict[str, str]:
        return self.armed.environ(env) if self.armed is not None else env

    def learn(self, state: str, work: str, walls: list[float]) -> dict[str, Any]:
        """What the recording holds (JSON for :class:`Golden`); its files are then removed.
        ``walls``: the wall-clock times of the golden run's events (placed among its file
        operations for ``plog``)."""
        out: dict[str, Any] = {}
        roots = {"state_dir": state, "workdir": work}
        try:
            if "plog" in self.needs and self.trace:
                log = _powercut.oplog(_strace.read(self.trace, cwd=self.cwd), roots)
                out["plog"] = log.to_json()
                out["plog_events"] = _powercut.event_points(log, walls)
                if not log.ops:
                    self.how += (
                        "; the golden run made no file operation under {state_dir} "
                        "or {workdir}: a power cut there loses nothing"
                    )
            elif "plog" in self.needs:
                self.how += "; no syscall trace, so no power-loss crash state"
            if "fileops" in self.needs and (self.trace or self.armed is not None):
                source: _fileops.Armed | str = self.armed if self.armed is not None else self.trace
                ops = _fileops.record_golden(source, roots)
                out["fileops"] = [op.to_json() for op in ops]
                if not ops:
                    self.how += "; " + _fileops.explain_empty(
                        self.armed or _fileops.Armed(via="strace", trace=self.trace, cwd=self.cwd),
                        roots,
                    )
            if "writes" in self.needs and self.trace:
                calls = _strace.parse(self.trace, cwd=self.cwd)
                out["writes"] = {
                    "tmpfs": [w.to_json() for w in write_points(calls, state, "tmpfs")],
                    "rlimit": [
                        w.to_json()
                        for w in write_points(calls, state, "rlimit", within=(state, work))
                    ],
                }
                if not any(out["writes"].values()):
                    self.how += (
                        "; the golden run wrote no file under {state_dir}: nothing "
                        "for a full disk to refuse"
                    )
        finally:
            for f in (self.trace, *(self.armed.files if self.armed else ())):
                with contextlib.suppress(OSError):
                    if f:
                        os.unlink(f)
        return out


@dataclass
class _DiskWatch:
    """A disk_full fault of one attempt: what was planned, its syscall trace (or the tmpfs
    usage samples, without strace), and the kill at the agent's first event after the disk
    refused a write: an agent that swallows ENOSPC and reports a step completed is then
    restarted, and its next attempt shows whether that step was really durable."""

    index: int
    mechanism: str
    state: str
    point: WritePoint | None
    value: int
    trace: str | None
    untraced: str
    attempt: int
    sample: UsageSample | None = None
    _offset: int = 0
    _seen: bool = False

    def full_before(self, ev: dict[str, Any]) -> bool:
        """For the ledger (under its lock): kill before ``ev``? Yes, once, at this attempt's
        first event after a write failed with ENOSPC/EFBIG (read from the live trace)."""
        if self._seen or int(ev["attempt"]) != self.attempt or self.trace is None:
            return False
        try:
            with open(self.trace, "rb") as fh:
                fh.seek(max(0, self._offset - 32))
                chunk = fh.read()
        except OSError:
            return False
        self._offset += len(chunk) - min(32, self._offset)
        if re.search(rb"= -1 (ENOSPC|EFBIG|EDQUOT)", chunk):
            self._seen = True
            return True
        return False

    def _looked(self, calls: list[_strace.Syscall], exit_code: int | None) -> str:
        """An agent that reads the free space (statfs) and stops cleanly before writing, as
        the reference library does, met the full disk too: where, or ""."""
        if exit_code is None or exit_code <= 0:
            return ""
        for c in calls:
            if (
                c.name.rstrip("64") in ("statfs", "fstatfs")
                and not c.errno
                and (c.path == self.state or c.path.startswith(self.state + "/"))
            ):
                m = re.search(r"f_bsize=(\d+).*?f_bavail=(\d+)", ", ".join(c.args))
                free = f"{int(m.group(1)) * int(m.group(2))} bytes" if m else "little"
                return (
                    f"the agent read the free space under {{state_dir}} ({c.name}: "
                    f"{free} free) and stopped before writing (exit {exit_code})"
                )
        return ""

    def outcome(self, ledger: Ledger, exit_code: int | None) -> tuple[bool, str, str]:
        calls = None
        if self.trace is not None:
            try:
                calls = _strace.parse(self.trace)
            except OSError:
                calls = None
        fired = confirm(
            self.mechanism,
            self.state,
            point=self.point,
            capacity=None if self.point is not None else self.value,
            calls=calls,
            sample=self.sample,
            untraced=self.untraced,
        )
        if not fired.fired and calls is not None and self.mechanism == "tmpfs":
            looked = self._looked(calls, exit_code)
            if looked:
                return True, looked, ""
        where = fired.where
        then = [
            k
            for k in ledger.killed
            if k.get("kill") == "disk_full" and k["attempt"] == self.attempt
        ]
        if fired.fired and then:
            k = then[0]
            where += f"; then killed at its next event #{k['event']} {k['op']}:{k['name']}"
        return fired.fired, where, fired.why_not


class _Sampler:
    """Samples the state folder's size every 50 ms while an attempt runs."""

    def __init__(self, folder: str, sink: list[int]) -> None:
        self.folder, self.sink = folder, sink
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self.sink[0] = max(self.sink[0], _dir_size(self.folder))

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def _files(path: str) -> list[tuple[str, int]]:
    """(path, size) of the regular files at or under ``path``, in a stable order."""
    try:
        st = os.lstat(path)
    except OSError:
        return []
    if not os.path.isdir(path) or os.path.islink(path):
        return [(path, st.st_size)] if os.path.isfile(path) and not os.path.islink(path) else []
    out = []
    for dirpath, dirs, files in os.walk(path):
        dirs.sort()
        for n in sorted(files):
            p = os.path.join(dirpath, n)
            with contextlib.suppress(OSError):
                fst = os.lstat(p)
                if os.path.isfile(p) and not os.path.islink(p):
                    out.append((p, fst.st_size))
    return out


def _redact_history(path: str, secrets: dict[str, str]) -> None:
    """Rewrite a history.jsonl with the secrets redacted inside each event's strings (so a
    value escaped in JSON is found too); lines that are not JSON are redacted as text."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    out = []
    for line in lines:
        try:
            out.append(
                json.dumps(redact_json(json.loads(line), secrets), sort_keys=True, default=str)
            )
        except ValueError:
            out.append(redact_text(line, secrets))
    write_file(path, "".join(x + "\n" for x in out))


def _reruns(events: list[dict[str, Any]]) -> list[str]:
    done: set[str] = set()
    again: list[str] = []
    for e in events:
        if e["op"] == "step_completed":
            done.add(str(e.get("step")))
        elif e["op"] == "step_started" and e.get("step") in done:
            again.append(str(e.get("step")))
    return again


def replay_inputs(folder: str) -> tuple[AgentSpec, Golden, dict[str, Any]]:
    """The agent, golden run and runner.json of the trial folder ``folder``, with the agent.env
    values that evidence never holds filled back in.

    Each redacted value comes from the scenario file runner.json names (if it still sets
    it), else from this process's environment; a value found in neither is a
    :class:`ReplayError` that says how to give it. golden.json gets its values back too.
    """
    cfg = load_json(os.path.join(folder, "runner.json"))
    agent = dict(cfg["agent"])
    env = {str(k): str(v) for k, v in (agent.get("env") or {}).items()}
    redacted = [k for k, v in env.items() if v == marker(k)]
    source = str(cfg.get("scenario") or "")
    known: dict[str, str] = {}
    if redacted and source and os.path.isfile(source):
        from crashpoint.harness._spec._scenario import ScenarioError, load_scenario

        try:
            from_file = dict(load_scenario(source).agent.env)
        except ScenarioError as exc:
            raise ReplayError(
                f"cannot take the redacted agent.env values from {source}: {exc}"
            ) from None
        known.update({k: from_file[k] for k in redacted if k in from_file})
    known.update({k: os.environ[k] for k in redacted if k not in known and k in os.environ})
    missing = [k for k in redacted if k not in known]
    if missing:
        where = (
            f"the scenario file {source} does not set them"
            if source
            else "runner.json names no scenario file to take them from"
        )
        raise ReplayError(
            f"{os.path.join(folder, 'runner.json')}: the agent.env value(s) of "
            f"{', '.join(missing)} are redacted (evidence never holds them) and {where}. Set "
            f"them in the environment and replay again, e.g. {missing[0]}=... crashpoint "
            f"replay {folder}"
        )
    env.update(known)
    agent["env"] = env
    golden = load_json(os.path.join(folder, "golden.json"))
    golden = unredact_json(golden, {**known, CANARY_VAR: canary_for(0, -1)})
    return AgentSpec.from_json(agent), golden_from_json(golden), cfg


def golden_from_json(d: dict[str, Any]) -> Golden:
    eff: Counter[tuple[str, str]] = Counter({(k, p): n for k, p, n in d["effects"]})
    return Golden(
        d["steps"],
        d["events"],
        eff,
        d["output"].encode("utf-8"),
        d["duration"],
        fileops=list(d.get("fileops") or []),
        writes=dict(d.get("writes") or {}),
        recorded_by=str(d.get("recorded_by") or ""),
        span=float(d.get("span") or 0.0),
        plog=dict(d.get("plog") or {}),
        plog_events=[int(x) for x in d.get("plog_events") or []],
    )


def canonical_effects(events: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter(
        (str(e.get("kind")), canonical(e.get("payload")))
        for e in events
        if e["op"] == "effect" and e.get("applied")
    )


def load_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)
