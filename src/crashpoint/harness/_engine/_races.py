"""Resumers that really race: released together, their writes recorded, the race judged.

The ``resumers`` family starts two attempts of one run at once (k with ``processes: k``, up to
32). Started at once is not racing:
an agent whose start-up dominates (an interpreter, a framework's imports) may finish its work in
one process before the other has done anything. Three parts make the race real and seen:

- :class:`Barrier`: the ledger holds each attempt at its *first boundary* (its first probe
  event or stand-in request, before it is recorded) until all have arrived, then releases them
  at once. It gives up waiting after its *patience* (counted from the first arrival: at least
  1 s, three times the golden run's start-up, three times the first arrival's own start-up),
  or as soon as the missing attempt has ended: an attempt that blocks on a lock before its
  first boundary never arrives, and the holder goes on alone.
- :class:`WriteRecorder`: what each attempt changed under the trial's folders, with the time of
  each change: a syscall trace (strace ``-ttt``, any language, also SQLite's writes from C), or
  without strace the audit hook injected into a Python agent (opens that replace a file's
  content, renames, removals, truncations, links: not writes into a file opened for update);
  and the files it took an ``flock`` on: lock files, or ledgers kept under their own lock (the
  reference library's ``.store-lock``), whose changes are coordination, not the run's state.
- :func:`race_note`: whether the race happened, for the fault accounting (see its docstring).
  An attempt is *at work* from its first *activity* (an event, or a change to a file) until it
  ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from crashpoint.faults import (
    FILEOP_SYSCALLS,
    fileop_recorder,
    read_trace,
    strace_available,
    strace_output_of,
    strace_wrap,
)
from crashpoint.harness._spec import Attempt, Golden

__all__ = [
    "CONTENT_CALLS",
    "Barrier",
    "EndWatch",
    "Stagger",
    "WriteRecorder",
    "patience_for",
    "race_note",
]

#: Calls that change what a file holds or which file a name is: a *write* to the file (or, for
#: a rename or a link, to both names). Opens count only when they truncate (``O_TRUNC``);
#: fsyncs, mkdir and rmdir change no state another process would overwrite.
CONTENT_CALLS = frozenset(
    {
        "write",
        "pwrite64",
        "writev",
        "pwritev",
        "pwritev2",
        "ftruncate",
        "truncate",
        "fallocate",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "symlink",
        "symlinkat",
        "unlink",
        "unlinkat",
        "creat",
        "mknod",
        "mknodat",
    }
)
_OPENS = frozenset({"open", "openat", "openat2"})
#: The audit hook's operations that change a file (an ``open(w)`` only with ``trunc``).
_AUDIT_WRITES = frozenset({"rename", "unlink", "truncate", "link", "symlink"})
#: Events this close (seconds) to the barrier's release count as arriving with it.
_RELEASE = 0.1
#: Floor and ceiling of the barrier's patience, in seconds.
MIN_PATIENCE, MAX_PATIENCE = 1.0, 15.0


def patience_for(golden: Golden, timeout: float) -> float:
    """How long the barrier waits for the second attempt after the first arrived, and how long
    an attempt must stay silent to have *waited*: three times the golden run's start-up (its
    time before the first event), plus half a second, at least :data:`MIN_PATIENCE`, at most a
    third of the agent's timeout (and :data:`MAX_PATIENCE`)."""
    startup = max(0.0, golden.duration - golden.span)
    return min(max(MIN_PATIENCE, 3 * startup + 0.5), max(MIN_PATIENCE, timeout / 3), MAX_PATIENCE)


class Barrier:
    """Holds each of ``attempts`` at its first boundary until all have arrived, or every one
    missing has ended, or the patience ran out (see the module docstring). ``alive(n)``:
    attempt ``n``'s process still runs; ``spawned``: when each was started
    (``time.monotonic()``), filled in by the engine as it starts them."""

    def __init__(
        self, attempts: tuple[int, ...], patience: float, alive: Callable[[int], bool]
    ) -> None:
        self.expected = frozenset(attempts)
        self.patience = patience
        self.alive = alive
        self.spawned: dict[int, float] = {}
        self.arrived: dict[int, float] = {}
        self.released: float | None = None
        self.how = ""  # together | patience | ended | cancelled
        self._cond = threading.Condition()

    def wait(self, attempt: int) -> None:
        """For the ledger (:attr:`Ledger.hold_first`): block attempt ``attempt`` at its first
        boundary until the barrier opens."""
        if attempt not in self.expected:
            return
        with self._cond:
            now = time.monotonic()
            self.arrived.setdefault(attempt, now)
            if self.released is not None:
                return
            first = min(self.arrived.values())
            started = self.spawned.get(attempt, first)
            # under load an attempt starts slower than in the golden run: give the other as long
            patience = min(max(self.patience, 3 * (first - started)), 3 * self.patience)
            while self.released is None:
                now = time.monotonic()
                missing = self.expected - set(self.arrived)
                if not missing:
                    self._open("together")
                elif now - first >= patience:
                    self._open("patience")
                elif not any(self.alive(b) for b in missing):  # the rest went away
                    self._open("ended")
                else:
                    self._cond.wait(0.01)

    def _open(self, how: str) -> None:
        self.released, self.how = time.monotonic(), how
        self._cond.notify_all()

    def cancel(self) -> None:
        """Open the barrier now (the attempts are being stopped)."""
        with self._cond:
            if self.released is None:
                self._open("cancelled")

    def note(self) -> dict[str, Any]:
        """What the barrier saw, for the accounting."""
        return {
            "arrived": dict(self.arrived),
            "released": self.released,
            "how": self.how,
            "patience": self.patience,
        }


class Stagger(Barrier):
    """Releases ``attempts`` one after the other instead of together (``resumers.stagger``):
    each is first held at its first boundary until all have arrived (as :class:`Barrier`
    does: start-up differs, and an attempt that arrives after another finished cannot race it);
    then the first goes on, and each next one only once the one before it has sent ``at[j]``
    events (reached its boundary ``at[j]``), or has ended, or never reached a boundary (it
    may be blocked on this one's lock), or three times the patience ran out.
    ``count(n)``: how many events attempt ``n`` has sent."""

    def __init__(
        self,
        attempts: tuple[int, ...],
        patience: float,
        alive: Callable[[int], bool],
        at: tuple[int, ...],
        count: Callable[[int], int],
    ) -> None:
        super().__init__(attempts, patience, alive)
        self.order = tuple(sorted(attempts))
        self.at = at
        self.count = count
        self.releases: dict[int, tuple[float, str]] = {}  # attempt -> (when, how)
        self._cancelled = False

    def wait(self, attempt: int) -> None:
        if attempt not in self.expected:
            return
        super().wait(attempt)  # all at their first boundary (or the rest gone, or patience)
        with self._cond:
            j = self.order.index(attempt)
            if j == 0 or self._cancelled:
                self.releases.setdefault(attempt, (time.monotonic(), "first"))
                return
            before, need = self.order[j - 1], self.at[j - 1]
            gate = self.released if self.released is not None else time.monotonic()
            how = "cancelled"
            while not self._cancelled:
                sent = self.count(before)
                if sent >= need:
                    how = f"attempt {before} reached its event #{need}"
                elif before not in self.arrived:  # it never reached a boundary: it may be
                    how = f"attempt {before} never reached a boundary"  # waiting on us
                elif not self.alive(before):
                    how = f"attempt {before} ended after {sent} event(s)"
                elif time.monotonic() - gate >= 3 * self.patience:
                    how = f"patience: attempt {before} had sent {sent} event(s), not {need}"
                else:
                    self._cond.wait(0.005)
                    continue
                break
            self.releases[attempt] = (time.monotonic(), how)

    def cancel(self) -> None:
        with self._cond:
            self._cancelled = True
        super().cancel()

    def note(self) -> dict[str, Any]:
        return {
            **super().note(),
            "how": "staggered",
            "gate": self.how,
            "stagger": list(self.at),
            "releases": {n: [t, how] for n, (t, how) in self.releases.items()},
        }


class EndWatch:
    """When each of several running processes ended (``time.monotonic()``), polled every
    10 ms: the attempts are waited for one after the other, so an attempt's own exit record
    cannot say when the second of two ended. ``alive(pid)``: the process still runs."""

    def __init__(self, pids: Mapping[int, int], alive: Callable[[int], bool]) -> None:
        self.pids, self.alive = dict(pids), alive
        self.ended: dict[int, float] = {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="crashpoint-resumers", daemon=True)
        self._t.start()

    def _loop(self) -> None:
        while len(self.ended) < len(self.pids):
            for num, pid in self.pids.items():
                if num not in self.ended and not self.alive(pid):
                    self.ended[num] = time.monotonic()
            if self._stop.wait(0.01):
                return

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


class WriteRecorder:
    """Records what one attempt changes under the trial's folders (``roots``: placeholder name
    -> folder), with times: strace where it works, else the audit hook of a Python agent
    (``python``), else nothing (:attr:`why_not` says why). Start the attempt with
    :meth:`wrap` and :meth:`environ`; read :meth:`writes` after it ended."""

    def __init__(self, prefix: str, roots: Mapping[str, str], cwd: str, python: bool) -> None:
        self.roots = {k: v for k, v in roots.items() if v}
        self.cwd = cwd
        self.trace = ""
        self.record = ""
        self.env: dict[str, str] = {}
        self.how = ""
        self.why_not = ""
        #: the attempt's ``flock`` calls on files under the roots, with how each ended, filled
        #: by :meth:`writes` (the trace's, or the hook's wrapper of ``fcntl.flock``)
        self.locks: list[dict[str, Any]] = []
        ok, why = strace_available()
        if ok:
            self.trace, self.how = prefix + ".writes.strace", "strace"
        elif python:
            armed = fileop_recorder(prefix + ".writes", use_strace=False, cwd=cwd)
            self.record, self.how = armed.record, "audit hook"
            self.env = {**armed.environ({}), "CRASHPOINT_FILEOP_LOCKS": "1"}
        else:
            self.why_not = (
                f"strace is unavailable ({why}), and the audit hook only sees a Python agent "
                "started with {python}"
            )

    def wrap(self, argv: list[str]) -> list[str]:
        if not self.trace:
            return argv
        if strace_output_of(argv) is not None:  # traced for another fault already
            self.trace, self.how = "", ""
            self.why_not = "the attempt was already traced for another fault"
            return argv
        calls = sorted({c.lstrip("?") for c in (*FILEOP_SYSCALLS, "flock")})
        return strace_wrap(argv, self.trace, syscalls=calls, timestamps=True)

    def environ(self, env: dict[str, str]) -> dict[str, str]:
        if not self.env:
            return env
        out = {**env, **self.env}
        out["PYTHONPATH"] = os.pathsep.join(
            filter(None, [self.env.get("PYTHONPATH", ""), env.get("PYTHONPATH", "")])
        )
        return out

    def _placeholder(self, path: str) -> str | None:
        if not path:
            return None
        for name, root in sorted(self.roots.items(), key=lambda kv: -len(kv[1])):
            for form in {os.path.normpath(root), os.path.realpath(root)}:
                if path == form:
                    return "{" + name + "}"
                if path.startswith(form.rstrip("/") + "/"):
                    return "{" + name + "}" + path[len(form.rstrip("/")) :]
        return None

    def writes(self, attempt: int) -> tuple[list[dict[str, Any]], set[str]]:
        """The attempt's changes to files under the roots, in order: ``{"attempt", "t"
        (time.monotonic() clock), "op", "path" (placeholder form), "pid"}``; and the files
        under the roots it took (or tried to take) an ``flock`` on. The raw recording is
        removed."""
        offset = time.time() - time.monotonic()  # strace -ttt and the hook give wall time
        out: list[dict[str, Any]] = []
        locked: set[str] = set()
        try:
            if self.trace and os.path.exists(self.trace):
                for c in read_trace(self.trace, cwd=self.cwd).calls:
                    if c.name == "flock":
                        ph = self._placeholder(c.path)
                        if ph is not None and "LOCK_UN" not in " ".join(c.args[1:]):
                            locked.add(ph)  # taken, waited for, or refused (EWOULDBLOCK)
                        if ph is not None and c.time and c.result is not None:
                            self.locks.append(_lock_call(attempt, c.time - offset, ph, c))
                        continue
                    if c.result is None or c.result < 0 or c.errno or not c.time:
                        continue
                    if c.name in _OPENS:
                        if "O_TRUNC" not in " ".join(c.args[1:]):
                            continue
                    elif c.name not in CONTENT_CALLS:
                        continue
                    for p in dict.fromkeys(filter(None, (c.path, c.path2))):
                        ph = self._placeholder(p)
                        if ph is not None:
                            out.append(
                                {
                                    "attempt": attempt,
                                    "t": c.time - offset,
                                    "op": "open(O_TRUNC)" if c.name in _OPENS else c.name,
                                    "path": ph,
                                    "pid": c.pid,
                                }
                            )
            elif self.record:
                out = self._audit(attempt, offset, locked)
        finally:
            for f in (self.trace, self.record):
                with contextlib.suppress(OSError):
                    if f:
                        os.unlink(f)
        return out, locked

    def _audit(self, attempt: int, offset: float, locked: set[str]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        try:
            with open(self.record, encoding="utf-8", errors="surrogateescape") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return out
        for line in lines:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                d = json.loads(line) if line.strip() else None
                if not isinstance(d, dict):
                    continue
                op = str(d["op"])
                if op == "flock_done":
                    ph = self._placeholder(str(d["path"]))
                    if ph is not None and d["mode"] in ("ex", "sh", "un"):
                        self.locks.append(
                            {
                                "attempt": attempt,
                                "t": float(d["t"]) - offset,
                                "path": ph,
                                "pid": d.get("pid"),
                                "mode": d["mode"],
                                "ok": bool(d["ok"]),
                                "errno": str(d.get("errno") or ""),
                            }
                        )
                    continue
                if op == "flock":
                    ph = self._placeholder(str(d["path"]))
                    if ph is not None:
                        locked.add(ph)
                    continue
                if not (op in _AUDIT_WRITES or (op == "open(w)" and d.get("trunc"))):
                    continue
                for p in dict.fromkeys(filter(None, (str(d["path"]), str(d.get("path2") or "")))):
                    ph = self._placeholder(p)
                    if ph is not None:
                        out.append(
                            {
                                "attempt": attempt,
                                "t": float(d["t"]) - offset,
                                "op": op,
                                "path": ph,
                                "pid": d.get("pid"),
                            }
                        )
        return out


def _lock_call(attempt: int, t: float, path: str, c: Any) -> dict[str, Any]:
    """One ``flock`` call of a trace: ``{"attempt", "t", "path", "pid", "mode" (ex, sh or un),
    "ok", "errno"}``."""
    how = " ".join(c.args[1:])
    mode = "un" if "LOCK_UN" in how else "ex" if "LOCK_EX" in how else "sh"
    return {
        "attempt": attempt,
        "t": t,
        "path": path,
        "pid": c.pid,
        "mode": mode,
        "ok": c.result == 0,
        "errno": c.errno,
    }


#: A non-blocking ``flock`` refused because another holds the lock.
_LOCK_BUSY = frozenset({"EWOULDBLOCK", "EAGAIN"})


def _held_since(
    x: int, path: str, t: float, mode: str, locks: list[dict[str, Any]]
) -> float | None:
    """When attempt ``x`` took the lock on ``path`` that it still held at ``t``, in a mode
    that conflicts with ``mode`` (one of the two exclusive); None if it held none then."""
    since: float | None = None
    held = ""
    for c in sorted((c for c in locks if c["attempt"] == x and c["path"] == path), key=_t):
        if c["t"] > t:
            break
        if c["mode"] == "un":
            since, held = None, ""
        elif c["ok"] and since is None:
            since, held = float(c["t"]), str(c["mode"])
    if since is None or "ex" not in (held, mode):
        return None
    return since


def _t(c: Mapping[str, Any]) -> float:
    return float(c["t"])


def _lock_refusal(
    x: int,
    y: int,
    acts: Mapping[int, list[float]],
    live: Mapping[int, tuple[float, float]],
    locks: list[dict[str, Any]],
    attempts: Mapping[int, Attempt],
) -> str:
    """``where`` when attempt ``y`` was turned away by a lock attempt ``x`` held (else ""):
    its trace shows a non-blocking ``flock`` refused (EWOULDBLOCK) on a file ``x`` had taken
    and not released, while ``x`` was live; after it ``y`` never took that lock, did nothing
    more (no event, no change to a file), and ended by itself (not killed, not timed out)."""
    ay = attempts.get(y)
    if ay is None or ay.timed_out or ay.signal is not None:
        return ""
    mine = sorted((c for c in locks if c["attempt"] == y), key=_t)
    for r in reversed(mine):
        if r["ok"] or r["mode"] == "un" or r["errno"] not in _LOCK_BUSY:
            continue
        t, path = float(r["t"]), str(r["path"])
        if t > live[x][1] or any(u > t for u in acts[y]):
            continue  # the holder was gone, or this one went on working
        if any(c["ok"] and c["mode"] != "un" and c["path"] == path and c["t"] > t for c in mine):
            continue  # let in later: it waited (the other rules judge that)
        since = _held_since(x, path, t, str(r["mode"]), locks)
        if since is None:
            continue
        return (
            f"attempt {y} was refused by the lock attempt {x} held: its flock on {path} failed "
            f"({r['errno']}) {t - since:.3f}s after attempt {x} took it, and then it {_ended(ay)}"
        )
    return ""


def _acts_of(
    group: tuple[int, ...], events: list[dict[str, Any]], writes: list[dict[str, Any]]
) -> dict[int, list[float]]:
    """When each attempt of ``group`` did something (its events and its writes), in one pass."""
    acts: dict[int, list[float]] = {n: [] for n in group}
    for e in events:
        ts = acts.get(int(e["attempt"]))
        if ts is not None and e.get("t") is not None:
            ts.append(float(e["t"]))
    for w in writes:
        ts = acts.get(int(w["attempt"]))
        if ts is not None:
            ts.append(float(w["t"]))
    for ts in acts.values():
        ts.sort()
    return acts


def _what(num: int, t: float, events: list[dict[str, Any]], writes: list[dict[str, Any]]) -> str:
    for e in events:
        if int(e["attempt"]) == num and e.get("t") == t:
            what = e.get("step") or e.get("key") or e.get("kind") or e.get("name") or ""
            return f"event #{e['i']} ({e['op']} {what})".replace(" )", ")")
    for w in writes:
        if int(w["attempt"]) == num and w["t"] == t:
            return f"{w['op']} {w['path']}"
    return "its work"


def _ended(a: Attempt | None) -> str:
    if a is None:
        return "ended"
    if a.timed_out:
        return "hung until its timeout"
    if a.signal is not None:
        return f"was killed by signal {a.signal}"
    tail = a.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
    return f"exited {a.returncode}" + (f" ({tail[0][:120]!r})" if tail and a.returncode else "")


def race_note(
    group: tuple[int, ...],
    live: Mapping[int, tuple[float, float]],
    events: list[dict[str, Any]],
    writes: list[dict[str, Any]],
    barrier: Mapping[str, Any],
    patience: float,
    attempts: Mapping[int, Attempt],
    locks: list[dict[str, Any]] | None = None,
) -> tuple[bool, str, str]:
    """Did the resumers race? ``(fired, where, why_not)`` for the accounting. ``group``: the
    attempts started at once (two, or k with ``processes``).

    An attempt's *activity* is its events and its writes (see :class:`WriteRecorder`). The
    race happened, and the fault *fired*, when one of these holds (checked in this order):

    - **refused by a lock**: a syscall trace shows that one attempt's non-blocking ``flock``
      was refused (EWOULDBLOCK) on a file the other had taken and still held, and that it then
      ended by itself without doing anything more (``locks``: the recorders' ``flock`` calls;
      the times of its end and of the other's work do not matter: an interpreter's slow exit
      under load once made a refusal read as "ran at the same time");
    - **refused**: one attempt ended while the other was live and still at work (before the
      other's last activity), having done nothing, or only its first boundary and then exited
      non-zero: it was turned away;
    - **waited**: one attempt was live throughout the other's work and silent in it (no
      activity after the other's first and up to its last), and either it had reached the
      barrier and been released with the other (so its silence was not start-up), or, never
      having reached a boundary before the other's work, its silence from its start lasted at
      least ``patience`` (longer than its start-up explains): it waited, on a lock or a lease;
    - **overlapped**: an activity of one attempt lies strictly between the first and the last
      activity of the other (their work interleaved).

    With k attempts the rule is judged for each two of them: the fault fired when at least
    one pair raced, and ``where`` says how many of the k took part and how (each pair is
    looked at once: k is at most 32).

    Otherwise the two merely ran at the same time (one finished before the other started to
    work): not exercised, and ``why_not`` says what each did. ``live``: attempt -> (spawned,
    ended), ``time.monotonic()``; ``barrier``: :meth:`Barrier.note` (empty without one);
    ``attempts``: how each ended (its exit code and stderr word a refusal)."""
    acts = _acts_of(group, events, writes)
    locks = list(locks or ())
    if len(group) == 2:
        return _pair(
            group[0], group[1], acts, live, events, writes, barrier, patience, attempts, locks
        )[:3]
    roles: dict[int, set[str]] = {n: set() for n in group}
    first: tuple[bool, str, str] | None = None
    why_first = ""
    for j, a in enumerate(group):
        for b in group[j + 1 :]:
            fired, where, why, role = _pair(
                a, b, acts, live, events, writes, barrier, patience, attempts, locks
            )
            if fired:
                first = first or (fired, where, why)
                for n, r in role.items():
                    roles[n].add(r)
            elif not why_first and (acts[a] or acts[b]):
                why_first = why
    k = len(group)
    raced = [n for n in group if roles[n]]
    if first is None:
        if not any(acts.values()):
            return (
                False,
                "",
                f"none of the {k} attempts {group[0]} to {group[-1]} sent an event or changed "
                "a file under {state_dir} or {workdir}: nothing shows that they raced (send a "
                "probe event or reach a stand-in before the work, or pass the agent its state "
                "folder)",
            )
        return False, "", f"no two of the {k} attempts raced: {why_first}"
    kinds = []
    for r in ("overlapped", "waited", "refused"):
        who = [n for n in group if r in roles[n]]
        if who:
            kinds.append(f"{r}: {_numbers(who)}")
    return (
        True,
        f"{len(raced)} of {k} attempts raced ({'; '.join(kinds)}); first: {first[1]}",
        "",
    )


def _numbers(nums: list[int]) -> str:
    """``1, 2, 3`` as ``attempts 1-3``, ``1, 4`` as ``attempts 1, 4``."""
    runs: list[str] = []
    for n in nums:
        if runs and n == int(runs[-1].rsplit("-", 1)[-1]) + 1:
            runs[-1] = f"{runs[-1].split('-')[0]}-{n}"
        else:
            runs.append(str(n))
    return ("attempt " if len(nums) == 1 else "attempts ") + ", ".join(runs)


def _pair(
    a: int,
    b: int,
    acts: Mapping[int, list[float]],
    live: Mapping[int, tuple[float, float]],
    events: list[dict[str, Any]],
    writes: list[dict[str, Any]],
    barrier: Mapping[str, Any],
    patience: float,
    attempts: Mapping[int, Attempt],
    locks: list[dict[str, Any]],
) -> tuple[bool, str, str, dict[int, str]]:
    """:func:`race_note` for two attempts, and how each took part when they raced
    (``overlapped``, ``waited``, ``refused``)."""
    pair = (a, b)
    together = barrier.get("how") == "together"
    held = "; released together at their first boundaries" if together else ""
    for x, y in ((a, b), (b, a)):  # refused by a lock the other held
        where = _lock_refusal(x, y, acts, live, locks, attempts)
        if where:
            return True, where + held, "", {y: "refused", x: "worked"}
    if not acts[a] and not acts[b]:
        return (
            False,
            "",
            f"neither attempt {a} nor {b} sent an event or changed a file under {{state_dir}} "
            "or {workdir}: nothing shows that they raced (send a probe event or reach a "
            "stand-in before the work, or pass the agent its state folder)",
            {},
        )
    for x, y in ((a, b), (b, a)):  # refused
        ay = attempts.get(y)
        if not acts[x] or live[y][1] >= acts[x][-1] or live[y][1] < live[x][0]:
            continue  # (ended before the other started: they never ran at once)
        if not acts[y] or (len(acts[y]) == 1 and ay is not None and ay.returncode != 0):
            return (
                True,
                f"attempt {y} was refused: it {_ended(ay)} "
                + ("without doing anything" if not acts[y] else "after its first boundary")
                + f" while attempt {x} was at work{held}",
                "",
                {y: "refused", x: "worked"},
            )
    for x, y in ((a, b), (b, a)):  # waited
        if len(acts[x]) < 2 or live[y][0] > acts[x][0] or live[y][1] < acts[x][-1]:
            continue
        x_first, x_last = acts[x][0], acts[x][-1]
        early = x_first + (_RELEASE if together else 0.0)  # released at the same instant
        if any(early < t <= x_last for t in acts[y]):
            continue
        after = [t for t in acts[y] if t > x_last]
        before = [t for t in acts[y] if t <= early]
        until = after[0] if after else live[y][1]
        silent = until - (before[-1] if before else live[y][0])
        if (together and before) or (not before and silent >= patience):
            then = (
                f"it went on {after[0] - x_last:.3f}s after attempt {x}'s last activity"
                if after
                else f"then it {_ended(attempts.get(y))} without doing more"
            )
            return (
                True,
                f"attempt {y} waited: live and silent for {silent:.3f}s while attempt {x} "
                f"worked{held}; {then}",
                "",
                {y: "waited", x: "worked"},
            )
    for x, y in ((a, b), (b, a)):  # overlapped
        if len(acts[x]) >= 2:
            inside = [t for t in acts[y] if acts[x][0] < t < acts[x][-1]]
            if inside:
                ov = min(acts[x][-1], acts[y][-1]) - max(acts[x][0], acts[y][0])
                return (
                    True,
                    f"attempts {a} and {b} worked at the same time for {max(ov, 0.0):.3f}s: "
                    f"attempt {y}'s {_what(y, inside[0], events, writes)} came while attempt "
                    f"{x} was at work{held}",
                    "",
                    {x: "overlapped", y: "overlapped"},
                )
    w = min((n for n in pair if acts[n]), key=lambda n: acts[n][0])
    o = b if w == a else a
    w_first, w_last = acts[w][0], acts[w][-1]
    o_first = acts[o][0] if acts[o] else None
    silent = (o_first if o_first is not None else live[o][1]) - live[o][0]
    ran = min(live[a][1], live[b][1]) - max(live[a][0], live[b][0])
    how = {
        "patience": f"the barrier held attempt {w} for {barrier.get('patience', 0):.1f}s and "
        f"attempt {o} never reached a boundary",
        "ended": f"attempt {o} ended before it reached a boundary",
        "": "no attempt reached a boundary (an event or a stand-in request) to hold it at",
    }.get(str(barrier.get("how", "")), "")
    o_did = (
        f"attempt {o} started to work {o_first - w_last:+.3f}s after attempt {w}'s last activity"
        if o_first is not None
        else f"attempt {o} did nothing and {_ended(attempts.get(o))}"
    )
    return (
        False,
        "",
        f"attempts {a} and {b} ran at the same time for {max(ran, 0.0):.3f}s but their work "
        f"never overlapped: attempt {w} worked {w_last - w_first:.3f}s, {o_did}, after "
        f"{silent:.3f}s of silence (a wait would be {patience:.1f}s)"
        + (f"; {how}" if how else "")
        + ": send a probe event or make a stand-in request before the agent's work, so the "
        "barrier can release both attempts together",
        {},
    )
