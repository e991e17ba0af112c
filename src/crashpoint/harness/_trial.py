"""A trial: the attempts of one agent run under one fault plan, until it completes or the
restart limit, judged by the checks. Also the golden (crash-free) run."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import random
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

from crashpoint.errors import AgentStartError, CrashpointError
from crashpoint.faults._disk import TmpfsNamespace, capabilities
from crashpoint.faults._files import corrupt
from crashpoint.faults._process import (
    KEEP_HEAD,
    KEEP_TAIL,
    REAP_VAR,
    AgentProcess,
    Exit,
    new_reap_token,
)
from crashpoint.harness._checks import TrialFacts, run_checks
from crashpoint.harness._ledger import KillAt, Ledger, canonical
from crashpoint.harness._model import (
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

__all__ = ["CANARY_VAR", "GoldenRunFailed", "TrialRunner"]

CANARY_VAR = "OPENAI_API_KEY"
RUN_ID = "run-1"
_INJECT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "faults", "_inject")
_PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV",
             "SYSTEMROOT", "TZ")


class GoldenRunFailed(CrashpointError, RuntimeError):
    """The agent does not complete even without faults: nothing to judge trials against."""


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, _d, files in os.walk(path):
        for n in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, n)).st_size
    return total


def _copy_state(src: str, dst: str) -> None:
    with contextlib.suppress(OSError):
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


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
    launcher: Any = None  # a fork-mode zygote (crashpoint.harness._zygote.Zygote) or None
    keep_head: int = KEEP_HEAD  # bytes of each attempt's stdout/stderr kept from the start
    keep_tail: int = KEEP_TAIL  # and from the end (the rest is cut, and the cut stated)

    def __post_init__(self) -> None:
        # the agent runs in its own working folder: a relative {state_dir} would land there,
        # and the checks would look at an empty folder
        self.folder = os.path.abspath(self.folder)
        self._ledger: Ledger | None = None

    def ledger(self, history_path: str) -> Ledger:
        """The runner's ledger, reset for a new trial (started once, reused: see
        :meth:`Ledger.reset`); closed by :meth:`close` or when the runner is collected."""
        if self._ledger is None:
            self._ledger = Ledger(history_path=history_path, http=True).start()
            weakref.finalize(self, Ledger.close, self._ledger)
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

    # -- environment ----------------------------------------------------------------------------

    def _env(self, ledger: Ledger, attempt: int, canary: str, trial: str,
             extra: dict[str, str]) -> dict[str, str]:
        env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
        env.update(dict(self.agent.env))
        env.update(ledger.env())
        env.update({"CRASHPOINT_ATTEMPT": str(attempt), "CRASHPOINT_TRIAL": trial,
                    "CRASHPOINT_RUN_ID": RUN_ID, CANARY_VAR: canary,
                    "PYTHONDONTWRITEBYTECODE": "1"})
        env.update(extra)
        # one fresh marker per attempt: the reaper finds what the attempt detached by it
        env[REAP_VAR] = new_reap_token()
        return env

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str, rlimit: int | None,
               on_start: Callable[[int], None], output: str | None = None) -> AgentProcess:
        """Start an attempt; ``on_start(pid)`` registers it before it can send an event.
        ``output``: stream its stdout and stderr to ``output + ".stdout"`` / ``".stderr"``.

        With a launcher (fork mode) an entry agent is forked, unless the attempt needs a
        process set-up only a fresh interpreter has: a wrapper such as nsenter (tmpfs), an
        RLIMIT_FSIZE, or the injected sitecustomize of a fileop kill. Then it is spawned.
        """
        out, err = (output + ".stdout", output + ".stderr") if output else (None, None)
        prefix = [*ENTRY_ARGV, self.agent.entry]
        if self.launcher is not None and self.agent.entry and rlimit is None \
                and argv[:len(prefix)] == prefix and "CRASHPOINT_FILEOP_KILL" not in env:
            proc: AgentProcess = self.launcher.spawn(
                self.agent.entry, env=env, cwd=cwd, timeout=self.agent.timeout,
                args=argv[len(prefix):], on_start=on_start, keep_head=self.keep_head,
                keep_tail=self.keep_tail, stdout_path=out, stderr_path=err)
            return proc
        proc = AgentProcess(argv, env, cwd=cwd, timeout=self.agent.timeout, rlimit_fsize=rlimit,
                            stdout_path=out, stderr_path=err, keep_head=self.keep_head,
                            keep_tail=self.keep_tail).start()
        on_start(proc.pid)
        return proc

    # -- golden ---------------------------------------------------------------------------------

    def golden(self) -> Golden:
        """Run the agent once without faults and record what it did."""
        folder = os.path.join(self.folder, "golden")
        shutil.rmtree(folder, ignore_errors=True)
        state, work = os.path.join(folder, "state"), os.path.join(folder, "work")
        os.makedirs(state)
        os.makedirs(work)
        argv = self.agent.argv(state_dir=state, workdir=work, run_id=RUN_ID)
        # the same ledger (HTTP front included) as the trials: an agent that speaks HTTP needs
        # it in the golden run too, or its golden run records no effect
        ledger = self.ledger(os.path.join(folder, "history.jsonl"))
        env = self._env(ledger, 1, canary_for(0, -1), "golden", {})
        t0 = time.monotonic()
        try:
            proc = self._spawn(argv, env, self.agent.cwd or work, None,
                               functools.partial(ledger.begin_attempt, 1))
        except AgentStartError as exc:  # one line, not a traceback
            raise GoldenRunFailed(f"the golden run (no faults) could not start: {exc}") from None
        ex = proc.wait()
        duration = time.monotonic() - t0
        events = [dict(e) for e in ledger.events]
        applied = Counter({k: n for k, n in ledger.applied_counts().items() if n})
        if ex.returncode != 0:
            raise GoldenRunFailed(
                f"the golden run (no faults) did not complete: {ex.describe()}. Command: "
                f"{' '.join(argv)}\nstderr:\n{ex.stderr.decode('utf-8', 'replace')[-2000:]}")
        steps = [str(e.get("step")) for e in events if e["op"] == "step_started"]
        for e in events:
            e.pop("t", None)
            e.pop("pid", None)
        return Golden(steps, events, applied, ex.stdout, duration)

    # -- trial ------------------------------------------------------------------------------------

    def run(self, plan: Plan, golden: Golden) -> TrialResult:
        """Run one trial under ``plan``; keep its folder only if it failed (or keep_passing)."""
        tdir = os.path.join(self.folder, f"trial-{plan.index:04d}")
        shutil.rmtree(tdir, ignore_errors=True)
        state, work = os.path.join(tdir, "state"), os.path.join(tdir, "work")
        os.makedirs(state)
        os.makedirs(work)
        with open(os.path.join(tdir, "plan.json"), "w") as f:
            f.write(dumps(plan.to_json()))
        canary = canary_for(plan.seed, plan.index)
        skipped = self._unsupported(plan)
        t0 = time.monotonic()
        attempts: list[Attempt] = []
        corruptions: list[dict[str, Any]] = []
        max_bytes = [0]
        resume_times: list[float] = []
        ledger = self.ledger(os.path.join(tdir, "history.jsonl"))
        ledger.kills = [KillAt(f.attempt, int(f.arg("index", 0)), str(f.arg("phase",
                                                                          "before")))
                        for f in plan.faults if f.kind == "kill"]
        if not skipped:
            self._attempts(plan, ledger, state, work, tdir, canary, attempts, corruptions,
                           max_bytes, resume_times)
        events = [dict(e) for e in ledger.events]
        applied = Counter({k: n for k, n in ledger.applied_counts().items() if n})
        duplicates = sum(e.duplicates for e in ledger.effects.values())
        max_bytes[0] = max(max_bytes[0], _dir_size(state))
        copies = [a.state_copy for a in attempts if a.state_copy]
        facts = TrialFacts(golden, plan, self.expect, attempts, events, applied, canary,
                           [state, *copies], max_bytes[0], {"ended": dict(ledger.ended)})
        if skipped:
            checks: list[CheckResult] = []
        else:
            checks = run_checks(facts, self.extra_checks)
        result = TrialResult(plan, attempts, events, dict(applied), duplicates, checks,
                             time.monotonic() - t0, tdir, max_bytes[0], corruptions,
                             _reruns(events), skipped, resume_times)
        if result.ok and not self.keep_passing:  # evidence is for failures (and replays)
            shutil.rmtree(tdir, ignore_errors=True)
            result.folder = ""
        else:
            self._write_evidence(result, golden, tdir)
        return result

    def _unsupported(self, plan: Plan) -> str:
        for f in plan.faults:
            if f.kind == "disk_full":
                mech = f.arg("mechanism", "tmpfs")
                caps = capabilities()
                if mech == "tmpfs" and not caps.tmpfs:
                    return f"disk_full via tmpfs skipped: {caps.tmpfs_reason}"
                if mech == "rlimit" and not caps.rlimit:
                    return f"disk_full via RLIMIT_FSIZE skipped: {caps.rlimit_reason}"
            if f.kind == "fileop" and self.agent.command and \
                    "{python}" not in " ".join(self.agent.command):
                return "fileop faults need a Python agent started with {python}"
        return ""

    def _attempts(self, plan: Plan, ledger: Ledger, state: str, work: str, tdir: str,
                  canary: str, attempts: list[Attempt], corruptions: list[dict[str, Any]],
                  max_bytes: list[int], resume_times: list[float]) -> None:
        argv0 = self.agent.argv(state_dir=state, workdir=work, run_id=RUN_ID)
        n = 0
        while n < 1 + self.restarts:
            n += 1
            faults = [f for f in plan.faults if f.attempt == n]
            for f in faults:
                if f.kind == "corrupt":
                    rng = random.Random(f"{plan.seed}:{plan.index}:{f.arg('seed', 0)}")
                    older = next((a.state_copy for a in attempts if a.state_copy), None)
                    pattern = str(f.arg("path", "{state_dir}/**")).format(
                        state_dir=state, workdir=work)
                    c = corrupt(str(f.arg("how")), pattern, rng, older=older, root=state)
                    corruptions.append(c.to_json() if c else {"how": f.arg("how"),
                                                               "path": pattern,
                                                               "detail": "nothing to corrupt"})
            extra: dict[str, str] = {}
            fps = [str(f.arg("spec")) for f in faults if f.kind == "failpoint"]
            if fps:
                extra["CRASHPOINT_FAILPOINTS"] = ";".join(fps)
            fileop = [f for f in faults if f.kind == "fileop"]
            if fileop:
                extra["CRASHPOINT_FILEOP_KILL"] = str(int(fileop[0].arg("n", 1)))
                extra["PYTHONPATH"] = os.pathsep.join(
                    [_INJECT, *filter(None, [os.environ.get("PYTHONPATH", "")])])
            rlimit = None
            ns: TmpfsNamespace | None = None
            argv = list(argv0)
            for f in faults:
                if f.kind == "disk_full":
                    mech = f.arg("mechanism", "tmpfs")
                    cap = int(f.arg("capacity", 65536))
                    if mech == "tmpfs":
                        ns = TmpfsNamespace(state, cap)
                        argv = ns.wrap(argv)
                    elif mech == "rlimit":
                        rlimit = cap
                    else:
                        extra["CRASHPOINT_FAILPOINTS"] = ";".join(
                            filter(None, [extra.get("CRASHPOINT_FAILPOINTS"),
                                          f"journal.write=enospc@{int(f.arg('nth', 3))}"]))
            together = any(f.kind == "resumers" for f in faults)
            try:
                numbers = [n, n + 1] if together else [n]
                procs = []
                for num in numbers:
                    env = self._env(ledger, num, canary, f"{plan.seed}:{plan.index}", extra)
                    p = self._spawn(argv, env, self.agent.cwd or work, rlimit,
                                    functools.partial(ledger.begin_attempt, num),
                                    os.path.join(tdir, f"attempt-{num}"))
                    procs.append((num, p))
                timers = self._timers(faults, procs[0][1])
                sampler = _Sampler(state, max_bytes) if self.expect.max_state_bytes else None
                exits: list[tuple[int, Exit]] = [(num, p.wait()) for num, p in procs]
                for t in timers:
                    t.cancel()
                if sampler:
                    sampler.stop()
            finally:
                if ns is not None:
                    ns.close()
            if together:
                n += 1
            for num, _ex in exits:
                ledger.end_attempt(num, reaped=True)
            for num, ex in exits:
                killed = [k for k in ledger.killed if k["attempt"] == num]
                why = ""
                if killed:
                    k = killed[-1]
                    why = f"killed at event #{k['event']} {k['op']} ({k['phase']})"
                elif ex.signal is not None:
                    why = next((str(f) for f in faults if f.kind != "corrupt"), "")
                # its stdout/stderr are in attempt-N.stdout/.stderr already (streamed, capped)
                att = Attempt(num, argv, ex.returncode, ex.signal, ex.timed_out, ex.duration,
                              ex.stdout, ex.stderr, ex.orphans, why,
                              containment=ex.containment)
                max_bytes[0] = max(max_bytes[0], _dir_size(state))
                if ex.returncode != 0:
                    att.state_copy = os.path.join(tdir, f"crash-{num}")
                    _copy_state(state, att.state_copy)
                first = next((e["t"] for e in ledger.events if e["attempt"] == num), None)
                if num > 1 and first is not None:
                    resume_times.append(max(0.0, first - (time.monotonic() - ex.duration)))
                attempts.append(att)
            # stop when it completed (or fail-stopped as documented) and no fault is pending
            final = attempts[-1]
            pending = any(f.attempt > n for f in plan.faults)
            stop_codes = (0, *self.expect.fail_stop_codes,
                          *(self.expect.refuse_codes if plan.corrupts else ()))
            if final.returncode in stop_codes and not pending:
                break

    def _timers(self, faults: list[Fault], proc: AgentProcess) -> list[threading.Timer]:
        timers = []
        for f in faults:
            if f.kind == "kill_at_time":
                timers.append(threading.Timer(float(f.arg("seconds", 0.1)),
                                              proc.signal, (signal.SIGKILL,)))
            elif f.kind == "signal":
                sig = str(f.arg("sig", "TERM")).upper()
                at = float(f.arg("seconds", 0.1))
                if sig == "TERM":
                    timers.append(threading.Timer(at, proc.signal, (signal.SIGTERM,)))
                    timers.append(threading.Timer(at + float(f.arg("grace", 2.0)),
                                                  proc.signal, (signal.SIGKILL,)))
                elif sig == "STOP":
                    timers.append(threading.Timer(at, proc.signal, (signal.SIGSTOP,)))
                    timers.append(threading.Timer(at + float(f.arg("pause", 0.5)),
                                                  proc.signal, (signal.SIGCONT,)))
        for t in timers:
            t.daemon = True
            t.start()
        return timers

    def _write_evidence(self, result: TrialResult, golden: Golden, tdir: str) -> None:
        summary = result.to_json()
        summary["checks_detail"] = [str(c) for c in result.checks]
        summary["replay"] = f"{sys.executable} -m crashpoint replay {tdir}"
        with open(os.path.join(tdir, "result.json"), "w") as f:
            f.write(dumps(summary))
        with open(os.path.join(tdir, "golden.json"), "w") as f:
            f.write(dumps(golden.to_json()))
        with open(os.path.join(tdir, "runner.json"), "w") as f:
            f.write(dumps({"agent": self.agent.to_json(), "restarts": self.restarts,
                           "expect": self.expect.to_json()}))
        with open(os.path.join(tdir, "REPLAY"), "w") as f:
            f.write(summary["replay"] + "\n")


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


def _reruns(events: list[dict[str, Any]]) -> list[str]:
    done: set[str] = set()
    again: list[str] = []
    for e in events:
        if e["op"] == "step_completed":
            done.add(str(e.get("step")))
        elif e["op"] == "step_started" and e.get("step") in done:
            again.append(str(e.get("step")))
    return again


def golden_from_json(d: dict[str, Any]) -> Golden:
    eff: Counter[tuple[str, str]] = Counter({(k, p): n for k, p, n in d["effects"]})
    return Golden(d["steps"], d["events"], eff, d["output"].encode("utf-8"), d["duration"])


def canonical_effects(events: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    return Counter((str(e.get("kind")), canonical(e.get("payload"))) for e in events
                   if e["op"] == "effect" and e.get("applied"))


def load_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)
