"""The attempts of one trial: set up each attempt's faults, start it, wait, record what it did.

:class:`TrialAttempts` runs the attempts of one trial under its plan until the agent completes,
stops as documented, or runs out of restarts. Each attempt is prepared by one method per fault
kind that acts before or while it runs (a corruption of its files, armed failpoints, a kill at a
file operation, a full disk, a power cut during recovery, signals and kills at an instant), then
started (k at once for ``resumers``: two by default), waited for, and recorded. A power cut
planned for attempt 1 replaces that attempt by the golden run cut at the instant.

For every planned fault (by its index in the plan) :attr:`TrialAttempts.notes` collects the
evidence of whether it took effect; the accounting (:mod:`._accounting`) reads it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import re
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from crashpoint._failpoints import LOG_ENV as FAILPOINT_LOG
from crashpoint._placeholders import fill
from crashpoint._proc import (
    LIVE,
    REAP_VAR,
    AgentProcess,
    Exit,
    hosts_unavailable,
    kill_marked,
    kill_tree,
    memory_cgroup,
    on_own_host,
    running,
    shielded,
)
from crashpoint.errors import BudgetExceeded
from crashpoint.faults import (
    INJECT_DIR,
    SQLITE_LOCK_SYSCALLS,
    WRITE_SYSCALLS,
    Armed,
    Detacher,
    FileOp,
    OpLog,
    Syscall,
    TmpfsNamespace,
    UsageSample,
    UsageSampler,
    Watch,
    WritePoint,
    arm_fileop_kill,
    confirm_disk_fault,
    corrupt,
    fileop_landing,
    kill_state,
    materialize,
    parse_trace,
    rlimit_argv,
    strace_available,
    strace_output_of,
    strace_wrap,
)
from crashpoint.harness._engine import _power
from crashpoint.harness._engine._accounting import kill_at
from crashpoint.harness._engine._backing import Outage
from crashpoint.harness._engine._memory import MEMORY_CGROUP_VAR, Squeeze
from crashpoint.harness._engine._races import (
    Barrier,
    EndWatch,
    Stagger,
    WriteRecorder,
    patience_for,
    race_note,
)
from crashpoint.harness._engine._scope import copy_state, dir_size
from crashpoint.harness._report import write_file
from crashpoint.harness._spec import (
    REPLAY_KINDS,
    AgentSpec,
    Attempt,
    Fault,
    Golden,
    Plan,
    oplog_of,
)
from crashpoint.harness._standins import Ledger

if TYPE_CHECKING:
    from crashpoint.harness._engine._trial import TrialRunner

__all__ = ["TrialAttempts", "abort_unwaited"]

#: At most this many of the resumers' file changes are kept in the trial's race.json.
_RACE_WRITES = 2000
#: What a disk_full attempt is traced for: its writes, and how it reads the free space.
_DISK_SYSCALLS = (*WRITE_SYSCALLS, "?statfs", "?fstatfs", "?statfs64", "?fstatfs64")


#: The last golden run's parsed operation log: one parse for all of a campaign's replayed
#: kills (the log holds every byte the golden run wrote). Keyed by the plog's identity.
_LAST_LOG: list[tuple[dict[str, Any], OpLog]] = []


def _oplog(golden: Golden) -> OpLog:
    if _LAST_LOG and _LAST_LOG[0][0] is golden.plog:
        return _LAST_LOG[0][1]
    log = oplog_of(golden)
    _LAST_LOG[:] = [(golden.plog, log)]
    return log


def abort_unwaited(procs: list[Any]) -> None:
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
        return bool(proc.returncode is None)
    return not p.zygote._has_exited(p.pid)


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

    def _looked(self, calls: list[Syscall], exit_code: int | None) -> str:
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
                calls = parse_trace(self.trace)
            except OSError:
                calls = None
        fired = confirm_disk_fault(
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

    def __init__(self, folder: str, sink: Callable[[int], None]) -> None:
        self.folder, self.sink = folder, sink
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            self.sink(dir_size(self.folder))

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


@dataclass
class _Setup:
    """How one attempt (k, for ``resumers``) starts: its number, the faults planned for it
    (with their index in the plan), and what they changed: its argv (wrapped by a tmpfs
    namespace, strace, an armed file-operation kill), its extra environment, a file-size
    limit, the tmpfs it writes into, the full-disk watch, a power cut during recovery."""

    n: int
    mine: list[tuple[int, Fault]]
    argv: list[str]
    extra: dict[str, str] = field(default_factory=dict)
    rlimit: int | None = None
    ns: TmpfsNamespace | None = None
    disk: _DiskWatch | None = None
    armed: Armed | None = None
    recovery: tuple[int, _power.Recovery] | None = None
    #: ``upgrade``: version B, which this attempt runs (None: the scenario's agent)
    agent: AgentSpec | None = None
    outages: list[Outage] = field(default_factory=list)
    #: ``memory``: the attempt's memory cgroup and its limit (set, or armed for an event)
    squeezes: list[Squeeze] = field(default_factory=list)

    @property
    def faults(self) -> list[Fault]:
        return [f for _i, f in self.mine]

    def of(self, *kinds: str) -> list[tuple[int, Fault]]:
        return [(i, f) for i, f in self.mine if f.kind in kinds]


def _outages_before_reply(
    outages: list[Outage], ev: dict[str, Any], squeezes: Sequence[Squeeze] = ()
) -> None:
    for sq in squeezes:  # (a limit is squeezed before an outage holds the reply)
        sq.before_reply(ev)
    for o in outages:
        o.before_reply(ev)


def _outages_kill_when(outages: list[Outage], ev: dict[str, Any]) -> str:
    return next((k for o in outages if (k := o.kill_when(ev))), "")


def _events_sent(ledger: Ledger, attempt: int) -> int:
    """How many events attempt ``attempt`` has sent so far (a staggered resumer's progress)."""
    return sum(1 for e in list(ledger.events) if int(e["attempt"]) == attempt)


def _group(s: _Setup) -> int:
    """How many attempts start at once: k for ``resumers`` (2 by default), else 1."""
    return max((f.processes for f in s.faults), default=1)


@dataclass
class _Started:
    """The processes of one attempt (or k resumers) while they run, and how they ended."""

    procs: list[tuple[int, AgentProcess, float]] = field(default_factory=list)  # (num, p, t)
    exits: list[tuple[int, Exit]] = field(default_factory=list)
    #: ``resumers``: the barrier that released them together, and each one's recorder
    barrier: Barrier | None = None
    recorders: dict[int, WriteRecorder] = field(default_factory=dict)
    ends: EndWatch | None = None

    def alive(self, num: int) -> bool:
        """Attempt ``num`` still runs (or is not started yet)."""
        for m, p, _t in self.procs:
            if m == num:
                return running(p.pid)
        return True

    def pairs(self) -> list[tuple[int, Exit, float]]:
        """(attempt number, exit, spawn time) of each process that was waited for."""
        return [(num, ex, t) for (num, ex), (_m, _p, t) in zip(self.exits, self.procs, strict=True)]


@dataclass
class TrialAttempts:
    """The attempts of one trial (see the module docstring). ``runner`` starts them (its
    environment, launcher, timeouts and budget), ``ledger`` is the trial's, ``state`` and
    ``work`` its folders, ``tdir`` its evidence folder. :meth:`run` fills :attr:`attempts`,
    :attr:`corruptions`, :attr:`resume_times`, :attr:`max_state_bytes` and :attr:`notes`."""

    runner: TrialRunner
    plan: Plan
    golden: Golden
    ledger: Ledger
    state: str
    work: str
    tdir: str
    canary: str
    attempts: list[Attempt] = field(default_factory=list)
    corruptions: list[dict[str, Any]] = field(default_factory=list)
    resume_times: list[float] = field(default_factory=list)
    max_state_bytes: int = 0
    #: per planned fault (its index in the plan): the evidence of whether it took effect
    notes: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: ``backing``: each outage as it happened (:meth:`Outage.note`; the checks read it)
    backing: list[dict[str, Any]] = field(default_factory=list)
    #: ``resumers``: what the live attempts did (``single_writer`` judges it): ``attempts``,
    #: ``live`` (attempt -> [spawned, ended], monotonic), ``writes`` (each a dict: attempt,
    #: t, op, path), ``by`` (how they were recorded), ``why_not`` (why not, if not)
    race: dict[str, Any] = field(default_factory=dict)
    #: ``upgrade``: (the first attempt that runs version B, version B); None: no upgrade
    upgrade: tuple[int, AgentSpec] | None = None

    @property
    def roots(self) -> dict[str, str]:
        return {"state_dir": self.state, "workdir": self.work}

    @property
    def cwd(self) -> str:
        return self.runner.agent.cwd or self.work

    def saw_size(self, n: int) -> None:
        """The state folder held ``n`` bytes at some instant of the trial."""
        self.max_state_bytes = max(self.max_state_bytes, n)

    # -- the trial ---------------------------------------------------------------------------

    def run(self) -> None:
        """Run the attempts until the agent completes, stops as documented, or the restarts
        run out (a power cut at attempt 1 with nothing to cut runs none)."""
        argv0 = self.runner.agent_argv(self.state, self.work, self.ledger)
        argv_b: list[str] = []
        if self.upgrade is not None:  # version B, with the same folders and {trial_id}
            argv_b = self.runner.argv_of(self.upgrade[1], self.state, self.work, self.ledger)
        n, one_resume = 0, False
        first = [f for f in self.plan.faults if f.attempt == 1]
        for i, f in enumerate(self.plan.faults):
            if f.kind == "power_loss" and f.attempt == 1:
                if not self._power_cut_at_start(i, f, argv0):
                    return
                n = 1
                one_resume = not any(g.attempt > 1 for g in self.plan.faults)
            elif f.kind in ("fileop", "kill") and self._replayable(f) and first == [f]:
                self._kill_replayed_at_start(i, f, argv0)
                n = 1
        while n < 1 + self.runner.restarts and not (one_resume and n >= 2):
            n += 1
            s = _Setup(n, [(i, f) for i, f in enumerate(self.plan.faults) if f.attempt == n], [])
            s.argv = list(argv0)
            if self.upgrade is not None and n >= self.upgrade[0]:  # from here on: version B
                s.agent, s.argv = self.upgrade[1], list(argv_b)
            self._corrupt(s)
            self._arm_failpoints(s)
            self._arm_fileop_kills(s)
            self._fill_disk(s)
            self._log_failpoints(s)
            if s.armed is not None:
                s.argv = s.armed.wrap(s.argv)
            self._cut_power_in_recovery(s)
            self._arm_backing(s)
            self._arm_memory(s)
            started = self._start_and_wait(s)
            n = self._account(s, started)
            self._record(s, started)
            self._apply_recovery_cut(s, n)
            if self._stopped(n):
                break

    def _stopped(self, n: int) -> bool:
        """Stop when it completed; or when it stopped as documented (a fail-stop code, a
        refusal of corrupt state) and no fault is planned for a later attempt. A completed
        run is never restarted: a fault planned for a later attempt did not take effect, and
        the accounting says so."""
        final = self.attempts[-1]
        expect = self.runner.expect
        pending = any(f.attempt > n for f in self.plan.faults)
        documented = final.returncode in expect.fail_stop_codes or (
            self.plan.corrupts and bool(expect.refusal(final.returncode, final.stderr))
        )
        return final.returncode == 0 or (documented and not pending)

    # -- faults that act before an attempt starts --------------------------------------------

    def _power_cut_at_start(self, i: int, f: Fault, argv0: list[str]) -> bool:
        """Attempt 1 is the golden run up to the cut (not re-run): its crash state and the
        events it had sent; then the agent resumes. False when there is nothing to cut (the
        trial then runs no attempt, and the accounting says why: never a pass)."""
        if f.arg("upto") is None:
            self.notes[i] = {"cut": (False, "", str(f.arg("label") or "no crash state"))}
            return False
        cut = _power.cut(f, self.golden, self.roots)
        _power.replay_events(self.ledger, cut.events, 1)
        self.ledger.end_attempt(1, reaped=True)
        att = _power.synthetic_attempt(cut, argv0)
        att.state_copy = os.path.join(self.tdir, "crash-1")
        copy_state(self.state, att.state_copy, self.runner.scope)
        write_file(
            os.path.join(self.tdir, "powerloss.txt"),
            _power.trace_excerpt(self.golden, f, cut.state),
            durable=False,
        )
        self.attempts.append(att)
        self.notes[i] = {"cut": cut.note(), "power": _power.state_note(cut.state)}
        return True

    def _replayable(self, f: Fault) -> bool:
        """``f`` is planned as a replayed kill and the golden run's log holds its state (a
        failing trial's golden.json may have left a large one out: then the kill is real)."""
        how = f.arg("replay")
        ops = (self.golden.plog or {}).get("ops")
        return bool(how) and ops is not None and len(ops) >= int(how["upto"])

    def _kill_replayed_at_start(self, i: int, f: Fault, argv0: list[str]) -> None:
        """Attempt 1 is the golden run killed at the planned point (just before a file
        operation, or at a probe event), not re-run: what that kill leaves on disk (the golden
        run's first operations, from its recorded trace) is put in the trial's folders and the
        events it had sent in the ledger (for a kill at an event, through the ledger's own
        kill there, as a real attempt's would be); then the agent restarts as after a real
        kill. :func:`crashpoint.faults._killreplay.kill_points` decided it can be."""
        how = f.arg("replay")
        log = _oplog(self.golden)
        st = kill_state(log, int(how["upto"]))
        materialize(st, self.roots)
        if f.kind == "fileop":
            sent = int(how["events"])
            _power.replay_events(self.ledger, self.golden.events[:sent], 1)
            where = f"before {f.arg('label') or 'a file operation'}"
        else:
            sent = self._replay_until_killed()
            where = f"at {f.arg('label')} ({f.arg('phase', 'before')})"
        self.ledger.end_attempt(1, reaped=True)
        att = Attempt(
            1,
            list(argv0),
            None,
            signal.SIGKILL,
            False,
            0.0,
            b"",
            b"",
            killed_by=(
                f"SIGKILL {where}, replayed from the golden run's recorded state (its first "
                f"{st.upto} traced operations and {sent} events), not re-run"
            ),
        )
        att.state_copy = os.path.join(self.tdir, "crash-1")
        copy_state(self.state, att.state_copy, self.runner.scope)
        for stream in ("stdout", "stderr"):  # it printed nothing: it did not run
            write_file(os.path.join(self.tdir, f"attempt-1.{stream}"), "", durable=False)
        done = [op.describe() for op in log.ops[: st.upto]]
        at = "fileop" if f.kind == "fileop" else "every-boundary"
        write_file(
            os.path.join(self.tdir, "killreplay.txt"),
            f"attempt 1 was not run: {att.killed_by}.\n"
            f"What it left is the golden run's first {st.upto} file operations "
            f"(from its syscall trace), the last of them:\n"
            + "".join(f"  {line}\n" for line in done[-8:])
            + f"and the golden run's first {sent} events, loaded into the ledger as attempt "
            "1's. Re-run it as a real kill with `replay: false` on its family (e.g. kill: "
            f"{{at: {at}, replay: false}}).\n",
            durable=False,
        )
        self.attempts.append(att)
        if f.kind == "fileop":  # where a real kill lands: the label
            self.notes[i] = {"landed": (True, str(f.arg("label")), "")}

    def _replay_until_killed(self) -> int:
        """Feed the golden run's events to the ledger as attempt 1's until its planned kill
        takes one (the ledger records it killed, as it does a live attempt's); how many."""
        self.ledger.begin_attempt(1, None)
        for n, ev in enumerate(self.golden.events, 1):
            if self.ledger.handle(_power.as_sent(ev, 1)) is None:
                return n
        return len(self.golden.events)

    def _corrupt(self, s: _Setup) -> None:
        """``corrupt``: change one file of the trial's folders before the attempt starts."""
        for i, f in s.of("corrupt"):
            rng = random.Random(f"{self.plan.seed}:{self.plan.index}:{f.arg('seed', 0)}")
            older = next((a.state_copy for a in self.attempts if a.state_copy), None)
            pattern = fill(str(f.arg("path", "{state_dir}/**")), self.roots)
            aim = f.arg("aim")
            c = corrupt(
                str(f.arg("how")),
                pattern,
                rng,
                older=older,
                root=self.state,
                roots=(self.state, self.work),
                aim=None
                if aim is None
                else [(fill(str(p), self.roots), int(off), int(size)) for p, off, size in aim],
            )
            self.notes[i] = {
                "corruption": c.to_json() if c else None,
                "pattern": f.arg("path", "{state_dir}/**"),
            }
            self.corruptions.append(
                c.to_json()
                if c
                else {"how": f.arg("how"), "path": pattern, "detail": "nothing to corrupt"}
            )

    def _arm_failpoints(self, s: _Setup) -> None:
        """``failpoint``: arm the reference library's named failpoints in the attempt."""
        fps = [str(f.arg("spec")) for f in s.faults if f.kind == "failpoint"]
        if fps:
            s.extra["CRASHPOINT_FAILPOINTS"] = ";".join(fps)

    def _arm_fileop_kills(self, s: _Setup) -> None:
        """``fileop``: a SIGKILL armed before one file operation (by number, through the audit
        hook of a Python agent; or one recorded in the golden run, by strace or the hook)."""
        for i, f in s.of("fileop"):
            if f.arg("n") is not None:  # a hand-written plan: the n-th operation (audit)
                s.extra["CRASHPOINT_FILEOP_KILL"] = str(int(f.arg("n", 1)))
                s.extra["PYTHONPATH"] = os.pathsep.join(
                    [INJECT_DIR, *filter(None, [os.environ.get("PYTHONPATH", "")])]
                )
            elif f.arg("fileop"):
                op = FileOp.from_json(f.arg("fileop"))
                s.armed = arm_fileop_kill(
                    op,
                    self.roots,
                    os.path.join(self.tdir, f"attempt-{s.n}"),
                    use_strace=op.via == "strace",
                    cwd=self.cwd,
                )
                self.notes.setdefault(i, {})["armed"] = s.armed

    def _fill_disk(self, s: _Setup) -> None:
        """``disk_full``: a failpoint in the library, or the attempt's state folder on a small
        tmpfs (or under RLIMIT_FSIZE), filled to the planned write point or capacity; traced
        where strace works, so the accounting can confirm that a write was refused."""
        for i, f in s.of("disk_full"):
            mech = f.arg("mechanism", "tmpfs")
            if mech == "failpoint":
                s.extra["CRASHPOINT_FAILPOINTS"] = ";".join(
                    filter(
                        None,
                        [
                            s.extra.get("CRASHPOINT_FAILPOINTS"),
                            f"journal.write=enospc@{int(f.arg('nth', 3))}",
                        ],
                    )
                )
                continue
            note = self.notes.setdefault(i, {})
            point = f.arg("point")
            if point is not None and not point:  # the golden run recorded no write point
                note["disk"] = (
                    False,
                    "",
                    "no write point to fill the disk at: "
                    + (self.golden.recorded_by or "the golden run wrote no file"),
                )
                continue
            wp = WritePoint.from_json(point) if point else None
            value = wp.value if wp is not None else int(f.arg("capacity", 65536))
            traced, why = strace_available()
            trace = os.path.join(self.tdir, f"attempt-{s.n}.disk.strace") if traced else None
            inner = list(s.argv)  # (one trace per attempt: a fileop kill planned for the
            #                        same attempt, which no family does, is not armed)
            s.armed = None
            if mech == "tmpfs":
                s.ns = (
                    TmpfsNamespace(self.state, free=value)
                    if wp is not None
                    else TmpfsNamespace(self.state, value)
                )
                if trace:
                    inner = strace_wrap(inner, trace, syscalls=_DISK_SYSCALLS)
                s.argv = s.ns.wrap(inner, cwd=self.cwd)
            elif trace:  # the limit set inside the trace: strace's own file is not cut
                s.argv = strace_wrap(rlimit_argv(inner, value), trace, syscalls=_DISK_SYSCALLS)
            else:
                s.rlimit = value
            s.disk = _DiskWatch(i, mech, self.state, wp, value, trace, why, s.n)
            note["watch"] = s.disk

    def _log_failpoints(self, s: _Setup) -> None:
        """Where armed failpoints log that they fired (the accounting's evidence)."""
        if "CRASHPOINT_FAILPOINTS" not in s.extra:
            return
        fp_log = os.path.join(self.tdir, f"attempt-{s.n}.failpoints")
        s.extra[FAILPOINT_LOG] = fp_log
        for i, _f in s.of("failpoint", "disk_full"):
            self.notes.setdefault(i, {})["failpoint_log"] = fp_log

    def _cut_power_in_recovery(self, s: _Setup) -> None:
        """``power_loss`` after another fault: trace the attempt, to cut it at a planned
        event and leave one of the crash states its own trace allows."""
        for i, f in s.of("power_loss"):
            if not f.arg("op"):
                continue
            try:
                initial = _power.snapshot(self.roots)
            except ValueError as exc:  # too much to model: the cut does not fire
                self.notes[i] = {"cut": (False, "", f"{exc} (what attempt {s.n} starts from)")}
                continue
            rec = _power.Recovery(
                f, i, os.path.join(self.tdir, f"attempt-{s.n}.power.strace"), initial
            )
            s.argv = rec.wrap(s.argv)
            s.recovery = (i, rec)

    def _arm_backing(self, s: _Setup) -> None:
        """``backing``: the outages of the attempt (begun by the ledger at the planned event,
        or at an instant); an SQLite lock's attempt is traced for its lock requests (strace
        ``fcntl``), where strace runs and nothing else traces it, to see that it met the
        lock."""
        for i, f in s.of("backing"):
            o = Outage(i, f, s.n, self.roots, self.runner.postgres)
            if o.service_name == "sqlite":
                ok, why = strace_available()
                if ok and strace_output_of(s.argv) is None:
                    o.trace = os.path.join(self.tdir, f"attempt-{s.n}.locks.strace")
                    s.argv = strace_wrap(
                        s.argv, o.trace, syscalls=SQLITE_LOCK_SYSCALLS, timestamps=True
                    )
                else:
                    o.untraced = why or "the attempt is traced for another fault"
            s.outages.append(o)

    def _arm_memory(self, s: _Setup) -> None:
        """``memory``: the attempt runs in a memory cgroup of its own (its argv joins it
        first), the limit set now or armed for the planned event. Where none can be made the
        fault is noted as not fired, with why (the trial is skipped before: see
        ``TrialRunner._unsupported``)."""
        for i, f in s.of("memory"):
            cg, why = memory_cgroup()
            if cg is None:
                self.notes.setdefault(i, {})["memory"] = (False, "", f"no memory cgroup: {why}")
                continue
            try:
                sq = Squeeze.arm(i, f, cg)
            except OSError as exc:
                cg.close()
                self.notes.setdefault(i, {})["memory"] = (
                    False,
                    "",
                    f"the memory limit could not be set: {exc}",
                )
                continue
            s.squeezes.append(sq)
            s.argv = cg.wrap(s.argv)
            s.extra[MEMORY_CGROUP_VAR] = cg.folder  # a fresh process (never forked)

    # -- running ------------------------------------------------------------------------------

    def _start_and_wait(self, s: _Setup) -> _Started:
        """Start the attempt (``resumers``: k at once), arm what acts while it runs (timed
        signals, the full-disk kill, file-operation watches, the size sampler), wait for it
        within its time limit, and leave nothing behind whatever happens."""
        runner, ledger, plan = self.runner, self.ledger, self.plan
        group = _group(s)
        together = group > 1
        numbers = list(range(s.n, s.n + group))
        started = _Started()
        stagger = next((str(f.arg("stagger")) for f in s.faults if f.arg("stagger")), "")
        if together and stagger:  # one after the other, each at the previous one's event N
            started.barrier = Stagger(
                tuple(numbers),
                patience_for(self.golden, runner.agent.timeout) + self.golden.span,
                started.alive,
                tuple(int(x) for x in stagger.split(",")),
                functools.partial(_events_sent, ledger),
            )
        elif together:
            started.barrier = Barrier(
                tuple(numbers), patience_for(self.golden, runner.agent.timeout), started.alive
            )
        if started.barrier is not None:
            started.recorders = {
                num: WriteRecorder(
                    os.path.join(self.tdir, f"attempt-{num}"),
                    self.roots,
                    self.cwd,
                    runner._python_agent(),
                )
                for num in numbers
            }
            ledger.hold_first, ledger.together = started.barrier.wait, True
        if s.outages or s.squeezes:  # before the agent starts: the first event may be it
            ledger.before_reply = functools.partial(
                _outages_before_reply, s.outages, squeezes=s.squeezes
            )
            ledger.kill_when = functools.partial(_outages_kill_when, s.outages)
        timers: list[threading.Timer] = []
        watches: list[Watch] = []
        detachers: list[Detacher] = []
        cwd = (s.agent.cwd or self.work) if s.agent is not None else self.cwd
        limit = s.agent.timeout if s.agent is not None else None
        sampler: _Sampler | None = None
        usage: UsageSampler | None = None
        tokens: list[str] = []
        walls: list[tuple[float, float, list[str]]] = []  # each one's start, end (wall), argv
        # resumers: {hosts: true}: each in a pid and UTS namespace of its own (or why not)
        hosts = [(i, f) for i, f in s.of("resumers") if together and f.arg("hosts")]
        if hosts and hosts_unavailable():
            for i, _f in hosts:
                self.notes.setdefault(i, {})["hosts_unavailable"] = hosts_unavailable()
            hosts = []
        try:
            if runner.deadline is not None and time.monotonic() >= runner.deadline:
                raise BudgetExceeded(f"trial {plan.index} was stopped")
            for num in numbers:
                env = runner.environment(
                    ledger, num, self.canary, f"{plan.seed}:{plan.index}", s.extra, s.agent
                )
                for note in self.notes.values():
                    if note.get("armed") is not None:
                        env = note["armed"].environ(env)
                argv = s.argv
                if hosts:  # its own pid namespace and host name: another machine to the agent
                    argv = on_own_host(list(argv), f"crashpoint-resumer-{num}")
                rec = started.recorders.get(num)
                if rec is not None:  # resumers: what each changes on disk, and when
                    argv, env = rec.wrap(argv), rec.environ(env)
                tokens.append(env[REAP_VAR])
                LIVE.add_token(tokens[-1])  # before it starts (see TrialRunner.golden)
                t_spawn, wall = time.monotonic(), time.time()
                if started.barrier is not None:
                    started.barrier.spawned[num] = t_spawn
                with shielded():  # started and recorded as one step
                    p = runner.spawn(
                        argv,
                        env,
                        cwd,
                        s.rlimit,
                        functools.partial(ledger.begin_attempt, num),
                        os.path.join(self.tdir, f"attempt-{num}"),
                        agent=s.agent,
                    )
                    started.procs.append((num, p, t_spawn))
                    walls.append((wall, 0.0, argv))
                    out = strace_output_of(argv)
                    if out:  # the attempt ends with the agent, not its last helper
                        detachers.append(Detacher(p.pid, out))
            with shielded():
                num, lead, t_lead = started.procs[0]
                timers = self._start_timers(s, lead, num, t_lead)
                if s.disk is not None:
                    if s.ns is not None and s.disk.trace is None:
                        usage = UsageSampler(s.ns)
                    ledger.kill_when = s.disk.full_before
                watches = [
                    Watch(note["armed"], functools.partial(lead.signal, signal.SIGKILL))
                    for note in self.notes.values()
                    if note.get("armed") is not None and "landed" not in note
                ]
            if together:  # when each ends (they are waited for one after the other)
                started.ends = EndWatch({num: p.pid for num, p, _t in started.procs}, running)
            if runner.expect.max_state_bytes:
                sampler = _Sampler(self.state, self.saw_size)
            for j, (num, p, t_spawn) in enumerate(started.procs):
                end = p.wait(timeout=runner.time_limit(t_spawn, limit))
                d = detachers[j] if j < len(detachers) else None
                started.exits.append((num, d.exit(end) if d is not None else end))
                walls[j] = (walls[j][0], time.time(), walls[j][2])  # its whole tree is gone
        finally:
            with shielded():  # stopped (a signal, the budget, an error): nothing left behind
                if started.barrier is not None:
                    started.barrier.cancel()
                if started.ends is not None:
                    started.ends.stop()
                ledger.hold_first, ledger.together = None, False
                ledger.on_first_event = None
                ledger.kill_when = None
                ledger.before_reply = None
                for o in s.outages:  # the service is back before anything else runs
                    o.end()
                for sq in s.squeezes:  # its counters read, the memory cgroup removed
                    sq.finish()
                for w in watches:
                    w.stop()
                for d in detachers:
                    d.stop()
                for t in timers:
                    t.cancel()
                if sampler:
                    sampler.stop()
                if usage is not None and s.disk is not None:
                    s.disk.sample = usage.stop()
                abort_unwaited([p for _num, p, _t in started.procs[len(started.exits) :]])
                for token in tokens:
                    LIVE.drop_token(token)
                if s.ns is not None:
                    s.ns.close()
                if runner.scope is not None:  # when each ran: what it wrote in the system
                    now = time.time()  # temp folders is told from what others did
                    for j, (wall, ended, argv) in enumerate(walls):
                        waited = j < len(started.exits)
                        runner.scope.ran(
                            wall, ended if waited else now, argv if waited else None, cwd
                        )
        return started

    def _start_timers(
        self, s: _Setup, proc: AgentProcess, num: int, t_spawn: float
    ) -> list[threading.Timer]:
        """``kill_at_time`` and ``signal``: timers started at the attempt's first event (or
        at its start, for a fault anchored there); each delivery is noted for the accounting:
        when, and whether the process was still running."""
        ledger = self.ledger
        timers: list[threading.Timer] = []
        early: list[threading.Timer] = []

        def deliver(i: int, sig: int, what: str) -> None:
            alive = running(proc.pid)
            if alive:
                proc.signal(sig)
            sent = self.notes.setdefault(i, {}).setdefault("sent", [])
            origin = ledger.first_event.get(num, t_spawn)
            sent.append(
                {
                    "what": what,
                    "alive": alive,
                    "at": time.monotonic() - origin,
                    "events": sum(1 for e in list(ledger.events) if e["attempt"] == num),
                }
            )

        for i, f in s.of("kill_at_time", "signal"):
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
            self.notes.setdefault(i, {})["anchor"] = f.arg("anchor", "first event")
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

    # -- after an attempt ---------------------------------------------------------------------

    def _account(self, s: _Setup, started: _Started) -> int:
        """Note where the attempt's faults landed (a full disk, a file-operation kill, the
        span of each resumer); stop the trial if the budget ended it. The number of the last
        attempt that ran (``resumers`` ran k)."""
        n = s.n
        exits = started.exits
        if s.disk is not None:
            self.notes[s.disk.index]["disk"] = s.disk.outcome(
                self.ledger, exits[0][1].returncode if exits else None
            )
        for i, _f in s.of("fileop"):
            note = self.notes.get(i, {})
            if note.get("armed") is not None:
                note["landed"] = tuple(fileop_landing(note.pop("armed"), attempt=n))
        for sq in s.squeezes:
            self.notes.setdefault(sq.index, {})["memory"] = sq.verdict(
                exits[0][1] if exits else None
            )
        if s.outages:
            ends = [t + ex.duration for _num, ex, t in started.pairs()]
            events = list(self.ledger.events)
            for o in s.outages:
                end = max(ends, default=time.monotonic())
                self.notes.setdefault(o.index, {})["backing"] = o.verdict(events, end)
                self.backing.append(o.note())
        if any(self.runner.cut_by_budget(ex, t) for _num, ex, t in started.pairs()):
            raise BudgetExceeded(f"trial {self.plan.index} was stopped")
        if _group(s) > 1:
            n += _group(s) - 1
            self._account_race(s, started)
        return n

    def _account_race(self, s: _Setup, started: _Started) -> None:
        """``resumers``: what each of the attempts started at once changed on disk, and
        whether they raced (:func:`race_note`: overlapped, one waited, or one was refused)."""
        pairs = started.pairs()
        spans = [(t, t + ex.duration) for _num, ex, t in pairs]
        ended = started.ends.ended if started.ends is not None else {}
        live = {num: (t, ended.get(num, t + ex.duration)) for num, ex, t in pairs}
        writes: list[dict[str, Any]] = []
        locked: set[str] = set()
        locks: list[dict[str, Any]] = []  # each flock call (a syscall trace only)
        by, why_not = "", ""
        for num, rec in started.recorders.items():
            changed, flocked = rec.writes(num)
            writes += changed
            locked |= flocked
            locks += rec.locks
            by = by or rec.how
            why_not = why_not or rec.why_not
        # a file an attempt flocks is a lock, or a ledger kept under its lock: coordination
        writes = sorted((w for w in writes if w["path"] not in locked), key=lambda w: w["t"])
        barrier = started.barrier.note() if started.barrier is not None else {}
        patience = started.barrier.patience if started.barrier is not None else 0.0
        mine = {a.number: a for a in self._attempts_of(started)}
        group = tuple(range(s.n, s.n + _group(s)))
        for i, _f in s.of("resumers"):
            note: dict[str, Any] = {"spans": spans, "barrier": barrier}
            if self.notes.get(i, {}).get("hosts_unavailable"):
                note["hosts_unavailable"] = self.notes[i]["hosts_unavailable"]
            if len(live) == len(group):
                note["race"] = race_note(
                    group, live, list(self.ledger.events), writes, barrier, patience, mine, locks
                )
            self.notes[i] = note
        self.race = {
            "attempts": list(group),
            "live": {num: list(span) for num, span in live.items()},
            "writes": writes,
            "by": by,
            "why_not": "" if by else why_not,
            "locked": sorted(locked),
        }
        t0 = min((span[0] for span in live.values()), default=0.0)
        evidence = {  # times in seconds from the first start
            "attempts": list(group),
            "recorded_by": by or why_not,
            "lock_files": sorted(locked),
            "live": {num: [round(x - t0, 4) for x in span] for num, span in live.items()},
            "barrier": {
                **barrier,
                "arrived": {k: round(v - t0, 4) for k, v in barrier.get("arrived", {}).items()},
                "released": None
                if barrier.get("released") is None
                else round(barrier["released"] - t0, 4),
            },
            "writes": [{**w, "t": round(w["t"] - t0, 4)} for w in writes[:_RACE_WRITES]],
            "writes_left_out": max(0, len(writes) - _RACE_WRITES),
            "locks": [{**c, "t": round(c["t"] - t0, 4)} for c in locks[:_RACE_WRITES]],
        }
        write_file(
            os.path.join(self.tdir, "race.json"),
            json.dumps(evidence, indent=1, default=str),
            durable=False,
        )

    @staticmethod
    def _attempts_of(started: _Started) -> list[Attempt]:
        """Bare :class:`Attempt` records of the attempts just waited for (how each ended)."""
        return [
            Attempt(
                num, [], ex.returncode, ex.signal, ex.timed_out, ex.duration, b"", ex.stderr, ()
            )
            for num, ex, _t in started.pairs()
        ]

    def _record(self, s: _Setup, started: _Started) -> None:
        """Each attempt as it ended: how, why (the fault that ended it), a copy of the state
        folder after a crash, how long a resumed attempt took to its first event."""
        ledger = self.ledger
        for num, _ex in started.exits:
            ledger.end_attempt(num, reaped=True)
        for num, ex, t_spawn in started.pairs():
            killed = [k for k in ledger.killed if k["attempt"] == num]
            why = ""
            if killed:
                k = killed[-1]
                why = (
                    f"told to exit {k['exit']}" if k.get("exit") else "killed"
                ) + f" at event #{k['event']} {k['op']}:{k['name']} ({k['phase']})"
            elif ex.signal is not None:
                why = next(
                    (str(f) for f in s.faults if f.kind not in ("corrupt", *REPLAY_KINDS)), ""
                )
            # its stdout/stderr are in attempt-N.stdout/.stderr already (streamed, capped)
            att = Attempt(
                num,
                s.argv,
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
            self.saw_size(dir_size(self.state))
            if ex.returncode != 0:
                att.state_copy = os.path.join(self.tdir, f"crash-{num}")
                copy_state(self.state, att.state_copy, self.runner.scope)
            first = ledger.first_event.get(num)
            if started.barrier is not None:  # held at the barrier: when it arrived there
                first = started.barrier.arrived.get(num, first)
            if num > 1 and first is not None:
                self.resume_times.append(max(0.0, first - t_spawn))
            self.attempts.append(att)

    def _apply_recovery_cut(self, s: _Setup, n: int) -> None:
        """A power cut during recovery: the attempt was killed at the planned event; replace
        its folders by a crash state its own trace allows at that instant."""
        if s.recovery is None:
            return
        i, rec = s.recovery
        want = kill_at(rec.fault)
        hit = next((k for k in self.ledger.killed if k.get("kill") == want), None)
        where = (
            f"event #{hit['event']} {hit['op']}:{hit['name']}"
            if hit
            else (
                f"it ended ({self.attempts[-1].describe().split(': ', 1)[-1]}) without "
                f"sending {want.op}:{want.name} #{want.nth}, where the cut was planned"
            )
        )
        mine_events = [e for e in self.ledger.events if e["attempt"] == n]
        cut_note, st, text = rec.apply(
            self.roots,
            hit is not None,
            where,
            self.cwd,
            mine_events,
            random.Random(f"{self.plan.seed}:{self.plan.index}:{rec.fault.arg('seed', 0)}"),
        )
        self.notes[i] = {"cut": cut_note}
        if st is not None:
            self.notes[i]["power"] = _power.state_note(st)
            write_file(os.path.join(self.tdir, f"powerloss-{n}.txt"), text, durable=False)
        with contextlib.suppress(OSError):
            os.unlink(rec.trace)
