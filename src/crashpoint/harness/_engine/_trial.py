"""A trial: the attempts of one agent run under one fault plan, until it completes or the
restart limit, judged by the checks. Also the golden (crash-free) run.

:class:`TrialRunner` owns what outlives one trial (the ledger and the stand-ins, the evidence
budget, the fork-mode launcher) and what each attempt starts with (its environment, its
process, its time limit); the attempts themselves are :class:`._attempts.TrialAttempts`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import secrets
import shutil
import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from crashpoint._proc import (
    KEEP_HEAD,
    KEEP_TAIL,
    LIVE,
    REAP_VAR,
    AgentProcess,
    BusyWatch,
    Exit,
    export_commit,
    git_commit,
    memory_cgroup_support,
    new_reap_token,
    shielded,
)
from crashpoint.errors import AgentStartError, BudgetExceeded, GoldenRunFailed, StandInError
from crashpoint.faults import Detacher, disk_capabilities, strace_available, strace_output_of
from crashpoint.harness._checker import TrialFacts, history_text, loop_text, run_checks
from crashpoint.harness._engine import _power
from crashpoint.harness._engine._accounting import (
    account,
    fold_persistent,
    kill_at,
    net_fault,
)
from crashpoint.harness._engine._attempts import TrialAttempts, abort_unwaited
from crashpoint.harness._engine._backing import PostgresService, SharedPostgres
from crashpoint.harness._engine._memory import MEMORY_CGROUP_VAR
from crashpoint.harness._engine._outside import new_temp_entries
from crashpoint.harness._engine._pycache import bytecode_cache, bytecode_env, uncached_env
from crashpoint.harness._engine._recording import GoldenRecording
from crashpoint.harness._engine._scope import TrialScope, dir_size
from crashpoint.harness._engine._zygote import LEARN_VAR
from crashpoint.harness._report import (
    EvidenceBudget,
    bound_folder,
    human_size,
    is_plain_path,
    marker,
    redact_bytes,
    redact_env,
    redact_json,
    redact_text,
    secure_dir,
    write_file,
    write_trial_folder,
)
from crashpoint.harness._spec import (
    ENTRY_ARGV,
    PASS_ENV,
    AgentSpec,
    CheckResult,
    Expect,
    Golden,
    Outcome,
    Plan,
    TrialResult,
    dumps,
    parse_services,
    persist,
    resumed_attempt,
    upgraded,
)
from crashpoint.harness._standins import Ledger

__all__ = [
    "CANARY_VAR",
    "EVIDENCE_PER_CAMPAIGN",
    "EVIDENCE_PER_TRIAL",
    "RUN_ID",
    "TrialRunner",
    "canary_for",
    "new_trial_id",
]

CANARY_VAR = "OPENAI_API_KEY"
RUN_ID = "run-1"


#: The most write data a failing trial's golden.json keeps for a replayed kill (the state
#: before the kill, for ``crashpoint replay``); past it the replay kills for real.
REPLAY_EVIDENCE_BYTES = 1 << 20


def _golden_for(plan: Plan, golden: Golden) -> dict[str, Any]:
    """The golden run as a trial's golden.json: its operation log (``plog``, the data the
    golden run wrote) only where the trial's replay needs it: whole for a power cut, its
    prefix up to the kill for a replayed kill when that is small (:data:`REPLAY_EVIDENCE_BYTES`),
    else left out (``crashpoint replay`` then kills for real, which judges the same)."""
    d = golden.to_json()
    if any(f.kind == "power_loss" for f in plan.faults) or not d.get("plog"):
        return d
    upto = max((int(f.arg("replay")["upto"]) for f in plan.faults if f.arg("replay")), default=-1)
    ops = list(d["plog"].get("ops", []))[: max(0, upto)]
    if upto < 0 or sum(len(o.get("data", "")) for o in ops) > REPLAY_EVIDENCE_BYTES:
        d["plog"] = {}
    else:
        d["plog"] = {**d["plog"], "ops": ops}
    return d


def new_trial_id() -> str:
    """``{trial_id}``: fresh for each trial, golden run and replay (never shared by two, not
    even across gate runs), the same for every attempt within one; letters and digits only,
    so it can name a database, a schema or a key prefix for state kept outside the trial's
    folders."""
    return "t" + secrets.token_hex(6)


#: Variables only a fresh interpreter acts on (the injected sitecustomize reads them at
#: start-up): an attempt that has one is spawned, never forked from the warm zygote.
_FRESH_INTERPRETER = frozenset(
    {
        "CRASHPOINT_FILEOP_KILL",
        "CRASHPOINT_FILEOP_AT",
        "CRASHPOINT_FILEOP_RECORD",
        MEMORY_CGROUP_VAR,
    }
)
#: Default evidence limits (bytes): per trial folder, and per campaign (one runner).
EVIDENCE_PER_TRIAL = 64 << 20
EVIDENCE_PER_CAMPAIGN = 512 << 20


#: How to fix an upgrade family whose version B does not run at all.
UPGRADE_BROKEN_HINT = (
    "run version B alone (the command in the message) until it completes crash-free; the "
    "trials need it to resume runs A began"
)


def canary_for(seed: int, index: int) -> str:
    h = hashlib.sha256(f"crashpoint-canary:{seed}:{index}".encode()).hexdigest()[:24]
    return f"sk-crashpoint-canary-{h}"


def _also(first: Callable[[int], None], then: Callable[[int], None]) -> Callable[[int], None]:
    def both(pid: int) -> None:
        first(pid)
        then(pid)

    return both


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
    #: a PostgreSQL server shared with other runners ({postgres}; its owner closes it), or
    #: None: the runner starts its own at its first golden run and stops it when it closes
    shared_postgres: SharedPostgres | None = None

    def __post_init__(self) -> None:
        # the agent runs in its own working folder: a relative {state_dir} would land there,
        # and the checks would look at an empty folder
        self.folder = os.path.abspath(self.folder)
        self._ledger: Ledger | None = None
        self.scope: TrialScope | None = None  # the trial (or golden run) under way
        self._trial_id = RUN_ID  # {trial_id}: set anew by golden() and each trial
        #: what the fork-mode zygote learned from a golden run (see Zygote.learn), for the notes
        self.launch_notes: list[str] = []
        self.evidence_used = 0  # bytes of the trial folders kept so far
        #: version B's golden run per version (``upgrade`` families): (golden, why it failed)
        self._upgrades: dict[str, tuple[Golden | None, str]] = {}
        self._upgrade_env: tuple[tuple[str, str], ...] = ()  # version B's env: secrets too
        #: the PostgreSQL of an agent that uses {postgres} (started at its first golden run)
        self.postgres: PostgresService | None = None
        #: version B's commits (``upgrade.to.rev``): commit id -> (root, folder it was
        #: exported to, or "" with why not); the folders are removed by close()
        self._checkouts: dict[str, tuple[str, str, str]] = {}

    def ledger(self, history_path: str) -> Ledger:
        """The runner's ledger, reset for a new trial (started once, reused: see
        :meth:`Ledger.reset`); closed by :meth:`close` or when the runner is collected.

        It serves the stand-in services too (HTTP, LLM; the SMTP sink when the agent uses
        ``{smtp}`` or the scenario has ``services.smtp``) on the same ports for the whole
        runner, so an agent that stored a URL finds it again in its next attempt. It is bound to
        the trial: only the processes of its attempts are served without the trial's token
        (new for each trial, carried in the environment only)."""
        if self._ledger is None:
            spec = parse_services(self.agent.services)
            self._ledger = Ledger(
                history_path=history_path, http=True, services=spec, bound=True
            ).start()
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
        for _root, folder, _why in self._checkouts.values():
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
        self._checkouts.clear()
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None
        if self.postgres is not None:
            self.postgres.close()
            self.postgres = None

    def _urls(self, ledger: Ledger) -> dict[str, str]:
        """The stand-ins' addresses for a new trial (or golden run): the ledger's, and for an
        agent that uses {postgres} a fresh database named by the trial's id (the server
        started at the first call; StandInError saying why it cannot be)."""
        urls = dict(ledger.urls())
        if self.agent.uses("postgres"):
            if self.postgres is None:
                service = PostgresService(self.shared_postgres)
                service.start()  # (closes what it started if it fails)
                self.postgres = service
                weakref.finalize(self, PostgresService.close, service)
            urls["postgres"] = self.postgres.open_database(self._trial_id)
        return urls

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
        for k, v in self._upgrade_env:  # version B's values that A's do not have
            if (k, v) not in self.agent.env and not is_plain_path(k, v):
                out[f"{k}_B"] = v
        if self._ledger is not None:  # the services' token is in the agent's environment
            out["CRASHPOINT_TOKEN"] = self._ledger.token
        if self.postgres is not None:  # and the password of its PostgreSQL role
            out["PGPASSWORD"] = self.postgres.password
        out[CANARY_VAR] = canary
        if canary != canary_for(0, -1):
            out[f"{CANARY_VAR}_GOLDEN"] = canary_for(0, -1)
        return out

    def _new_scope(self, folder: str, canary: str, plan: Plan | None = None) -> TrialScope:
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
        if self.scope is not None:  # the last one ended early (it was not asked)
            self.scope.release()
        self.scope = TrialScope(
            folder,
            self.secrets(canary),
            EvidenceBudget(max(0, min(self.evidence_per_trial, left)), why),
            whole_copies=stale,
        )
        return self.scope

    def _end_scope(self, result: TrialResult | None, ledger: Ledger) -> None:
        """The trial's attempts are over: measure and remove their TMPDIRs, list what its own
        processes wrote in the system temp folders (and count what others did), note what the
        ledger refused, redact the messages."""
        scope = self.scope
        if scope is None:
            return
        sizes = scope.tmp.finish()
        writers = scope.writers()
        if result is None:
            return
        outside = new_temp_entries(scope.temp_before, scope.windows, writers=writers)
        for att in result.attempts:
            att.tmp_bytes = sizes.get(att.number, 0)
            # what reports quote of it (the summary's stderr tail) is evidence too
            att.stderr = redact_bytes(att.stderr, scope.secrets)
        result.tmp_bytes = sum(sizes.values())
        result.outside_writes = [redact_text(o, scope.secrets) for o in outside.attributed]
        result.outside_unattributed = outside.unattributed
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
        result.outcomes = [  # where a fault landed names events: the agent's words
            dataclasses.replace(
                o,
                where=redact_text(o.where, scope.secrets),
                why_not=redact_text(o.why_not, scope.secrets),
            )
            for o in result.outcomes
        ]

    # -- environment ----------------------------------------------------------------------------

    def environment(
        self,
        ledger: Ledger,
        attempt: int,
        canary: str,
        trial: str,
        extra: dict[str, str],
        agent: AgentSpec | None = None,
    ) -> dict[str, str]:
        """The environment of attempt ``attempt``: the harness's own variables that pass
        (:data:`PASS_ENV`), ``agent.env`` (of ``agent``, version B of an upgrade, if given),
        the ledger's, the trial's ids and canary, the private bytecode cache
        (:mod:`._pycache`), a private TMPDIR, ``extra``, and a fresh reap token."""
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        env.update(dict((agent or self.agent).env))
        env.update(ledger.env())
        if self.postgres is not None:  # the DSN and the password: never in argv
            env.update(self.postgres.env())
        env.update(
            {
                "CRASHPOINT_ATTEMPT": str(attempt),
                "CRASHPOINT_TRIAL": trial,
                "CRASHPOINT_RUN_ID": RUN_ID,
                "CRASHPOINT_TRIAL_ID": self._trial_id,
                CANARY_VAR: canary,
                **bytecode_env(dict(self.agent.env), bytecode_cache()),
            }
        )
        if self.scope is not None:  # a private temp folder, measured and removed after it
            tmp = self.scope.tmp.for_attempt(attempt)
            env.update({"TMPDIR": tmp, "TEMP": tmp, "TMP": tmp})
        env.update(extra)
        # one fresh marker per attempt: the reaper finds what the attempt detached by it
        env[REAP_VAR] = new_reap_token()
        return env

    def spawn(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        rlimit: int | None,
        on_start: Callable[[int], None],
        output: str | None = None,
        counted: bool | None = None,
        agent: AgentSpec | None = None,
    ) -> AgentProcess:
        """Start an attempt; ``on_start(pid)`` registers it before it can send an event.
        ``output``: stream its stdout and stderr to ``output + ".stdout"`` / ``".stderr"``.
        ``counted``: whether its file operations are counted (None: when it is traced or
        has the audit hook).

        With a launcher (fork mode) an entry agent, or a ``{python}`` command agent whose
        launcher runs its script (``Zygote.main``), is forked, unless the attempt needs a
        process set-up only a fresh interpreter has: a wrapper such as nsenter (tmpfs) or
        strace, an RLIMIT_FSIZE, or the injected sitecustomize of a fileop kill. Then it is
        spawned. An attempt under strace or the audit hook runs without the bytecode cache
        (:func:`~._pycache.uncached_env`): its counts of file operations must not depend on
        what the cache held. ``agent``: version B of an upgrade (another program, another
        interpreter), always spawned with its own timeout.
        """
        upgraded = agent is not None and agent is not self.agent
        agent = agent or self.agent
        if self.scope is not None:  # what its processes write outside is the trial's
            on_start = _also(self.scope.started, on_start)
        out, err = (output + ".stdout", output + ".stderr") if output else (None, None)
        if counted is None:
            counted = bool(_FRESH_INTERPRETER & set(env)) or any(
                os.path.basename(a) == "strace" for a in argv
            )
        if counted:
            env = uncached_env(env, dict(agent.env))  # its file operations are counted
        prefix = [*ENTRY_ARGV, self.agent.entry]
        forkable = (
            self.launcher is not None
            and rlimit is None
            and not _FRESH_INTERPRETER & set(env)
            and not upgraded  # A's warm interpreter holds A's code
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
            timeout=agent.timeout,
            rlimit_fsize=rlimit,
            stdout_path=out,
            stderr_path=err,
            keep_head=self.keep_head,
            keep_tail=self.keep_tail,
        ).start()
        on_start(proc.pid)
        return proc

    def time_limit(self, t_spawn: float, timeout: float | None = None) -> float:
        """How long an attempt started at ``t_spawn`` may run: its timeout (``timeout``, or the
        agent's), within the budget."""
        limit = self.agent.timeout if timeout is None else timeout
        if self.deadline is None:
            return limit
        return max(0.0, min(limit, self.deadline - t_spawn))

    def cut_by_budget(self, ex: Exit | None, t_spawn: float) -> bool:
        """True if the budget, not the agent's own timeout, ended this attempt."""
        return (
            ex is not None
            and ex.timed_out
            and self.deadline is not None
            and self.deadline - t_spawn < self.agent.timeout
        )

    # -- golden ---------------------------------------------------------------------------------

    def recording_needs(self, needs: frozenset[str] | set[str]) -> frozenset[str]:
        """What :meth:`golden` records of ``needs`` with this runner's launcher."""
        needs = frozenset(needs)
        if self.launcher is not None and "fileops" not in needs:
            # fork mode: a killed attempt costs a fork and the run up to the kill, while
            # recording for a replay would spawn the golden run under strace; only a kill
            # before a file operation (itself spawned under strace) gains from replaying
            needs -= {"killreplay"}
        return needs

    def golden(self, needs: frozenset[str] | set[str] = frozenset()) -> Golden:
        """Run the agent once without faults and record what it did.

        ``needs``: what the fault families must learn from it besides its events:
        ``fileops`` (its file operations, for kill at fileop) and ``writes`` (its write points,
        for disk_full without a capacity). Both come from a syscall trace (strace); without
        strace, file operations of a Python agent come from the injected audit hook, and
        write points are not recorded (:attr:`Golden.recorded_by` says why).

        ``killreplay`` alone (kills at events, nothing else traced) is worth a trace only for
        an agent whose kills can be replayed: the golden run first runs untraced while its
        threads, children and event loops are watched, and is run again traced only if it
        had none (a heavy multi-threaded agent pays no trace; a small one, one more run)."""
        needs = self.recording_needs(needs)
        if (
            "killreplay" in needs
            and not needs & {"fileops", "writes", "plog"}
            and strace_available()[0]
        ):
            first, busy = self._golden(needs - {"killreplay"}, watch=True)
            if busy:
                why = (
                    f"{busy} (seen in the golden run): its kills are real ones, and no trace "
                    "was recorded for a replay"
                )
                first.boundary_replay = [{"why": why} for _ in first.events]
                return first
        return self._golden(needs)[0]

    def _golden(self, needs: frozenset[str], watch: bool = False) -> tuple[Golden, str]:
        """The golden run (see :meth:`golden`); with ``watch``, also why its kills could not
        be replayed, seen from outside ("" if nothing was)."""
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
        try:
            urls = self._urls(ledger)
        except StandInError as exc:
            raise GoldenRunFailed(f"the golden run (no faults) could not start: {exc}") from None
        argv = self.agent.argv(
            state_dir=state,
            workdir=work,
            run_id=RUN_ID,
            urls=urls,
            trial_id=self._trial_id,
        )
        scope = self._new_scope(folder, canary_for(0, -1))
        env = self.environment(ledger, 1, canary_for(0, -1), "golden", {})
        rec = GoldenRecording(
            needs, os.path.join(folder, "record"), self.agent.cwd or work, self._python_agent()
        )
        argv, env = rec.wrap(argv), rec.environ(env)
        learn = ""
        launcher: Any = self.launcher
        if (
            getattr(launcher, "learned", True) is False
            and getattr(launcher, "main", None)
            and os.environ.get("CRASHPOINT_NO_LEARN", "").lower() in ("", "0", "false", "no")
        ):
            learn = os.path.join(folder, "imports.learned")  # what a forked run imports
            env = {**env, LEARN_VAR: learn}
        t0 = time.monotonic()
        token = env[REAP_VAR]
        LIVE.add_token(token)  # before it starts: a harness killed now leaves it to the reaper
        procs: list[AgentProcess] = []
        ex: Exit | None = None
        detacher: Detacher | None = None
        watcher: BusyWatch | None = None
        try:
            with shielded():  # started and recorded as one step
                try:
                    procs.append(
                        self.spawn(
                            argv,
                            env,
                            self.agent.cwd or work,
                            None,
                            functools.partial(ledger.begin_attempt, 1),
                            # kills and full disks armed by a count in the golden run need
                            # it uncached, as their attempts are; a trace only replayed or
                            # cut by power loss does not count
                            counted=None if {"fileops", "writes"} & set(needs) else False,
                        )
                    )
                except AgentStartError as exc:  # one line, not a traceback
                    raise GoldenRunFailed(
                        f"the golden run (no faults) could not start: {exc}"
                    ) from None
                watcher = BusyWatch(procs[0].pid) if watch else None
                out = strace_output_of(argv)
                if out:  # the run ends with the agent, not with a helper it left
                    detacher = Detacher(procs[0].pid, out)
            ex = procs[0].wait(timeout=self.time_limit(t0))
        finally:
            with shielded():
                if watcher is not None:
                    watcher.stop()
                if detacher is not None:
                    detacher.stop()
                    if ex is not None:
                        ex = detacher.exit(ex)
                if ex is None:
                    abort_unwaited(procs)
                LIVE.drop_token(token)
        assert ex is not None
        if self.cut_by_budget(ex, t0):
            raise BudgetExceeded("the golden run was stopped")
        duration = time.monotonic() - t0
        self._end_scope(None, ledger)
        learned = (
            rec.learn(
                state,
                work,
                [float(e.get("wall", 0.0)) for e in ledger.events],
                private=tuple(env[k] for k in ("TMPDIR", "PYTHONPYCACHEPREFIX") if env.get(k)),
                refuse=self._no_kill_replay(),
            )
            if ex.returncode == 0
            else {}
        )
        self._bound_folder(folder, scope)
        events = [dict(e) for e in ledger.events]
        applied = Counter({k: n for k, n in ledger.applied_counts().items() if n})
        if learn and ex.returncode == 0 and os.path.exists(learn):
            note = self.launcher.learn(learn)  # the trials fork with what it imported
            if note:
                self.launch_notes.append(note)
        if ex.returncode != 0:
            stderr = ex.stderr.decode("utf-8", "replace")
            last = next((x.strip() for x in reversed(stderr.splitlines()) if x.strip()), "")
            # the first line says it all (what, the command as the user wrote it, the exit, the
            # last line of stderr): never the filled argv, which may be a strace wrapper's
            raise GoldenRunFailed(
                redact_text(
                    f"the golden run (no faults) did not complete: {ex.describe()}"
                    + (f" ({last[-300:]})" if last else " (nothing on stderr)")
                    + f". Command: {self.agent.describe()}"
                    + (f"\nstderr:\n{stderr[-2000:]}" if stderr.strip() else ""),
                    scope.secrets,
                )
            )
        steps = [str(e.get("step")) for e in events if e["op"] == "step_started"]
        span = events[-1]["t"] - events[0]["t"] if events else 0.0
        for e in events:
            e.pop("t", None)
            e.pop("pid", None)
            e.pop("wall", None)
        golden = Golden(
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
            fileop_events=learned.get("fileop_events", []),
            fileop_replay=learned.get("fileop_replay", []),
            boundary_replay=learned.get("boundary_replay", []),
        )
        return golden, (watcher.busy if watcher is not None else "")

    def _no_kill_replay(self) -> str:
        """Why no kill of this agent can be replayed from a recorded state ("" if it can):
        it names state kept outside its folders with ``{trial_id}`` (a database, a schema),
        which a replay cannot put back as it was at the kill."""
        parts = (*self.agent.command, *self.agent.args, *(v for _k, v in self.agent.env))
        if any("{trial_id}" in p for p in parts):
            return (
                "the agent is given {trial_id}, so it may keep state outside its folders, "
                "which a replay cannot restore"
            )
        if self.agent.uses("postgres"):
            return (
                "the agent keeps state in the harness's PostgreSQL ({postgres}), which a "
                "replay cannot restore"
            )
        return ""

    def _python_agent(self) -> bool:
        """Started by this interpreter (an entry, or a command run with {python})."""
        return bool(self.agent.entry) or (
            bool(self.agent.command) and self.agent.command[0] == "{python}"
        )

    # -- upgrade ----------------------------------------------------------------------------------

    def version_b(self, to: Mapping[str, Any]) -> tuple[AgentSpec, str]:
        """Version B of an ``upgrade`` family and why it cannot run ("" if it can). With
        ``rev``, B is that commit of the agent's repository (``repo``; else the one holding the
        scenario's folder or the agent's cwd), exported once per runner into a folder of its
        own under the runner's folder (removed by :meth:`close`, also after Ctrl-C), and run
        from there."""
        if not to.get("rev"):
            return upgraded(self.agent, to), ""
        where = str(to.get("repo") or self.agent.scenario_dir or self.agent.cwd or os.getcwd())
        rev = str(to["rev"])
        if rev not in self._checkouts:
            try:
                root, sha = git_commit(where, rev)
                folder = export_commit(root, sha, self.folder)
                self._checkouts[rev] = (root, folder, "")
            except ValueError as exc:
                self._checkouts[rev] = (
                    "",
                    "",
                    f"version B (rev {rev}) cannot be checked out: {exc}",
                )
        root, folder, why = self._checkouts[rev]
        if why:
            return upgraded(self.agent, to), why
        return upgraded(self.agent, to, (root, folder)), ""

    def upgrade_golden(self, agent: AgentSpec) -> tuple[Golden | None, str]:
        """Version B's own golden run (once per version): what B does crash-free, which the
        ``replay_divergence`` check sets beside A's. (None, why) when it failed: then every
        trial of the family fails with why, never a pass."""
        key = json.dumps(agent.to_json(), sort_keys=True, default=str)
        if key not in self._upgrades:
            sub = TrialRunner(
                agent,
                os.path.join(self.folder, f"upgrade-{len(self._upgrades) + 1}"),
                restarts=0,
                expect=self.expect,
                deadline=self.deadline,
                evidence_per_trial=self.evidence_per_trial,
                evidence_per_campaign=self.evidence_per_campaign,
                source=self.source,
                keep_head=self.keep_head,
                keep_tail=self.keep_tail,
                shared_postgres=self.shared_postgres,
            )
            try:
                self._upgrades[key] = (sub.golden(), "")
            except GoldenRunFailed as exc:
                self._upgrades[key] = (
                    None,
                    f"version B ({agent.describe()}) failed its own crash-free run, so no "
                    f"crash can be resumed under it: {exc}",
                )
            finally:
                sub.close()
        return self._upgrades[key]

    # -- trial ------------------------------------------------------------------------------------

    def agent_argv(self, state: str, work: str, ledger: Ledger) -> list[str]:
        """The agent's argv for a new trial in folders ``state`` and ``work``: a fresh
        ``{trial_id}`` (the same for each of the trial's attempts)."""
        self._trial_id = new_trial_id()
        return self.agent.argv(
            state_dir=state,
            workdir=work,
            run_id=RUN_ID,
            urls=self._urls(ledger),
            trial_id=self._trial_id,
        )

    def argv_of(self, agent: AgentSpec, state: str, work: str, ledger: Ledger) -> list[str]:
        """``agent``'s argv (version B of an upgrade) in the trial under way: its folders,
        run id and ``{trial_id}``, as the scenario's agent gets them."""
        return agent.argv(
            state_dir=state,
            workdir=work,
            run_id=RUN_ID,
            urls=ledger.urls(),
            trial_id=self._trial_id,
        )

    def run(self, plan: Plan, golden: Golden) -> TrialResult:
        """Run one trial under ``plan``; keep its folder only if it failed (or keep_passing)."""
        tdir = os.path.join(self.folder, f"trial-{plan.index:04d}")
        secure_dir(self.folder)  # refuse a planted or foreign folder before touching it
        shutil.rmtree(tdir, ignore_errors=True)
        state, work = os.path.join(tdir, "state"), os.path.join(tdir, "work")
        secure_dir(state, root=self.folder)
        secure_dir(work, root=self.folder)
        skipped = self._unsupported(plan, golden)
        marker = resumed_attempt(plan)  # upgrade / always_replay: the attempt that resumes
        upgrade: tuple[int, AgentSpec] | None = None
        golden_b: Golden | None = None
        broken = ""  # why version B cannot be tried (its own golden run failed)
        self._upgrade_env = ()
        if marker is not None and marker.kind == "upgrade" and not skipped:
            agent_b, broken = self.version_b(marker.arg("to") or {})
            self._upgrade_env = agent_b.env  # the trial's secrets include B's env values
            if not broken:
                golden_b, broken = self.upgrade_golden(agent_b)  # once per version
            upgrade = (marker.attempt, agent_b)
        canary = canary_for(plan.seed, plan.index)
        scope = self._new_scope(tdir, canary, plan)
        # (version B's env values, in an upgrade's ``to``, are secrets like agent.env's)
        plan_json = redact_json(plan.to_json(), scope.secrets)
        write_file(os.path.join(tdir, "plan.json"), dumps(plan_json), durable=False)
        t0 = time.monotonic()
        ledger = self.ledger(os.path.join(tdir, "history.jsonl"))
        # a persistent fault (every_attempt) is planned once and repeated for every attempt
        ran, origin = persist(plan, golden, self.restarts)
        ledger.kills = [
            kill_at(f)
            for f in ran.faults
            if f.kind in ("kill", "exit") or (f.kind == "power_loss" and f.arg("op"))
        ]
        nets = {i: net_fault(f) for i, f in enumerate(ran.faults) if f.kind == "network"}
        ledger.net_faults = list(nets.values())  # the stand-ins fail these requests
        run = TrialAttempts(self, ran, golden, ledger, state, work, tdir, canary, upgrade=upgrade)
        if not skipped and not broken:
            run.run()
        attempts, notes = run.attempts, run.notes
        for i, nf in nets.items():  # how many requests each failed: fault accounting
            notes.setdefault(i, {})["net_fired"] = nf.fired
            if nf.missed:  # a stream failure on a reply it could not cut
                notes[i]["net_missed"] = nf.missed
        events = [dict(e) for e in ledger.events]
        applied = Counter({k: n for k, n in ledger.applied_counts().items() if n})
        duplicates = sum(e.duplicates for e in ledger.effects.values())
        run.saw_size(dir_size(state))
        copies = [a.state_copy for a in attempts if a.state_copy]
        power = next((nt["power"] for nt in notes.values() if "power" in nt), None)
        outcomes: list[Outcome] = []
        hits: dict[int, str] = {}
        if broken:
            outcomes = [
                Outcome(i, f.kind, False, why_not=broken) for i, f in enumerate(plan.faults)
            ]
        elif not skipped:
            outcomes, hits = fold_persistent(
                plan,
                ran,
                origin,
                account(ran, attempts, events, list(ledger.killed), notes, golden),
                attempts,
            )
        facts = TrialFacts(
            # a run finished by version B prints what B prints (its own golden output); its
            # effects are judged against A's golden run, where the run began
            golden if golden_b is None else dataclasses.replace(golden, output=golden_b.output),
            plan,
            self.expect,
            attempts,
            events,
            applied,
            canary,
            [state, *copies],
            run.max_state_bytes,
            {
                "ended": dict(ledger.ended),
                "power": power,
                "race": run.race,
                "hits": hits,
                "restarts": self.restarts,
                **(
                    {"upgrade": {"agent": upgrade[1].describe(), "golden": golden_b.events}}
                    if upgrade is not None and golden_b is not None
                    else {}
                ),
                "backing": run.backing,
            },
        )
        checks: list[CheckResult] = []
        if broken:  # version B does not run even without a crash: nothing can be resumed
            checks = [CheckResult("replay_divergence", False, broken, hint=UPGRADE_BROKEN_HINT)]
        elif skipped or not attempts:  # nothing ran (a power cut with nothing to cut): no
            pass  # evidence to judge; the accounting says why
        else:
            checks = run_checks(facts, self.extra_checks)
            story = loop_text(facts)  # a fault on every attempt: each attempt's story
            if story:
                write_file(os.path.join(tdir, "loop.txt"), story, durable=False)
            witness = history_text(facts)  # two writers: each anomaly and its witness
            if witness:
                write_file(os.path.join(tdir, "anomalies.txt"), witness, durable=False)
            div = next((c for c in checks if c.name == "replay_divergence" and not c.ok), None)
            if div is not None:  # where the resumed run parted from the golden run
                write_file(
                    os.path.join(tdir, "divergence.txt"),
                    f"{div.message}\n\nhint: {div.hint}\n",
                    durable=False,
                )
        result = TrialResult(
            plan,
            attempts,
            events,
            dict(applied),
            duplicates,
            checks,
            time.monotonic() - t0,
            tdir,
            run.max_state_bytes,
            run.corruptions,
            _reruns(events),
            skipped,
            run.resume_times,
        )
        result.outcomes = outcomes
        self._end_scope(result, ledger)
        if result.ok and not self.keep_passing:  # evidence is for failures (and replays)
            shutil.rmtree(tdir, ignore_errors=True)
            result.folder = ""
        else:
            self._write_evidence(result, golden, tdir)
        return result

    def _unsupported(self, plan: Plan, golden: Golden) -> str:
        for f in plan.faults:
            if f.kind == "memory":
                why = memory_cgroup_support()
                if why:
                    return f"memory faults skipped: no writable memory cgroup here ({why})"
            if f.kind == "disk_full":
                mech = f.arg("mechanism", "tmpfs")
                caps = disk_capabilities()
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

    def _write_evidence(self, result: TrialResult, golden: Golden, tdir: str) -> None:
        """The failing (or kept) trial's folder as evidence (see :func:`write_trial_folder`):
        the golden run and the runner's settings with every secret redacted."""
        scope = (
            self.scope
            if self.scope is not None and self.scope.folder == tdir
            else TrialScope(
                tdir,
                self.secrets(canary_for(result.plan.seed, result.plan.index)),
                EvidenceBudget(self.evidence_per_trial),
                watch_writes=False,
            )
        )
        golden_secrets = self.secrets(canary_for(0, -1))
        agent = self.agent.to_json()
        agent["env"] = redact_env(agent.get("env", {}))  # replay: see replay_inputs()
        runner = {
            "agent": agent,
            "restarts": self.restarts,
            "expect": self.expect.to_json(),
            "scenario": self.source,
            "redacted_env": sorted(k for k, v in agent["env"].items() if v == marker(k)),
        }
        write_trial_folder(
            tdir,
            result,
            golden=redact_json(_golden_for(result.plan, golden), golden_secrets),
            runner=runner,
            budget=scope.budget,
            secrets=scope.secrets,
        )
        self.evidence_used += result.evidence_bytes

    def _bound_folder(self, folder: str, scope: TrialScope) -> None:
        """Keep ``folder`` within ``scope``'s evidence budget, its secrets redacted."""
        bound_folder(folder, scope.budget, scope.secrets)


def _reruns(events: list[dict[str, Any]]) -> list[str]:
    done: set[str] = set()
    again: list[str] = []
    for e in events:
        if e["op"] == "step_completed":
            done.add(str(e.get("step")))
        elif e["op"] == "step_started" and e.get("step") in done:
            again.append(str(e.get("step")))
    return again
