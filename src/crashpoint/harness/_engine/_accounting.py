"""Fault accounting: did each planned fault of a trial take effect, and where did it land?

A trial proves something only if its faults fired. For every fault of the plan this module
turns the trial's evidence (the ledger's kills and events, the attempts' exits, the timers'
deliveries, the failpoints' hit log, the corruption record, the file-operation and disk
traces) into an :class:`Outcome`: ``fired`` with where it landed, or not, with why and how
to make it fire. A trial with a fault that did not fire is *not exercised*: never a PASS.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from collections.abc import Callable
from typing import Any

from crashpoint.harness._spec import (
    Attempt,
    Failure,
    Fault,
    Golden,
    KillAt,
    NetFault,
    Outcome,
    Plan,
    call_of,
    event_name,
    stream_failure,
)

__all__ = ["ACCOUNTANTS", "account", "fold_persistent", "kill_at", "net_fault"]

Evidence = dict[str, Any]


def kill_at(f: Fault) -> KillAt:
    """The ledger's kill for a ``kill`` fault: by identity when the plan gives one."""
    phase = str(f.arg("phase", "before"))
    code = int(f.arg("code", 0)) if f.kind == "exit" else 0
    if f.arg("op"):
        return KillAt(
            f.attempt,
            -1,
            phase,
            str(f.arg("op")),
            str(f.arg("name", "")),
            int(f.arg("nth", 1)),
            code,
        )
    return KillAt(f.attempt, int(f.arg("index", 0)), phase, code=code)


def net_fault(f: Fault) -> NetFault:
    """The stand-in services' failure for a ``network`` fault (placed on the ledger)."""
    fail = f.arg("fail", "timeout")
    if isinstance(fail, int):
        body = (
            b'{"error": {"message": "crashpoint network fault: HTTP %d", "type": '
            b'"server_error"}}' % fail
        )
        headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)
        if fail in (429, 503):
            headers += (("Retry-After", "1"),)
        failure = Failure("status", fail, body, headers)
    elif fail in ("timeout", "reset"):
        failure = Failure("timeout", applied=True) if fail == "timeout" else Failure("reset")
    else:  # a stream failure of the LLM stand-in: "cut 3", "stall 5s after 2", ...
        failure = stream_failure(str(fail))
    return NetFault(
        str(f.arg("call", "")), failure, int(f.arg("nth", 1)), f.attempt, int(f.arg("times", 1))
    )


def _attempt(attempts: list[Attempt], number: int) -> Attempt | None:
    return next((a for a in attempts if a.number == number), None)


def _never_ran(f: Fault, attempts: list[Attempt]) -> str:
    """Why attempt ``f.attempt`` never ran: how the trial ended before it."""
    if not attempts:
        return f"attempt {f.attempt} never ran: the trial ran no attempt"
    last = attempts[-1]
    if last.returncode == 0:
        why = (
            f"attempt {last.number} completed (exit 0) first, and a completed run is not restarted"
        )
    else:
        why = f"the trial stopped after {last.describe()}"
    return f"attempt {f.attempt} never ran: {why}"


def _events_of(events: list[Evidence], attempt: int) -> list[Evidence]:
    return [e for e in events if int(e["attempt"]) == attempt]


def _ended(a: Attempt) -> str:
    if a.timed_out:
        return f"hung until its timeout ({a.duration:.2f}s)"
    if a.signal is not None:
        return f"was killed by signal {a.signal}"
    return f"exited {a.returncode}"


def _kill(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    want = kill_at(f)
    hit = next((k for k in killed if k.get("kill") == want), None)
    a = _attempt(attempts, f.attempt)
    if hit is not None:
        where = (
            f"attempt {hit['attempt']} event #{hit['event']} {hit['op']}:{hit['name']}"
            + (f" #{hit['nth']}" if int(hit.get("nth", 1)) > 1 else "")
            + f" ({hit['phase']})"
        )
        if (
            a is not None
            and a.signal not in (None, signal.SIGKILL)
            and a.returncode != -signal.SIGKILL
        ):
            return Outcome(
                i,
                f.kind,
                False,
                where,
                f"the kill was sent at {where}, but the attempt {_ended(a)} (not by SIGKILL)",
            )
        return Outcome(i, f.kind, True, where)
    if a is None:
        return Outcome(i, f.kind, False, why_not=_never_ran(f, attempts))
    mine = _events_of(events, f.attempt)
    if want.op:
        same = [e for e in mine if e["op"] == want.op and event_name(e) == want.name]
        seen = (
            f"it sent {want.op}:{want.name} {len(same)} time(s)"
            if same
            else f"it never sent {want.op}:{want.name}"
        )
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                f"attempt {f.attempt} {_ended(a)} after {len(mine)} event(s); {seen}, the plan "
                f"kills at occurrence #{want.nth}"
                + ("" if f.attempt == 1 else " (it resumed past that point)")
            ),
        )
    return Outcome(
        i,
        f.kind,
        False,
        why_not=(
            f"attempt {f.attempt} {_ended(a)} after {len(mine)} event(s); the plan kills at "
            f"its event #{want.index}"
        ),
    )


def _exit(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """An ``exit`` fault fired when the ledger told the agent to exit at its event and the
    attempt then ended with that exit code (on its own: not killed, not hung)."""
    code = int(f.arg("code", 1))
    told = _kill(i, f, attempts, events, killed, notes, golden)
    if not told.where:  # never reached its event: why, as for a kill
        return told
    a = _attempt(attempts, f.attempt)
    where = f"{told.where}, exit {code}"
    if a is not None and a.signal is None and not a.timed_out and a.returncode == code:
        return Outcome(i, f.kind, True, where)
    ended = _ended(a) if a is not None else "never ended"
    return Outcome(
        i,
        f.kind,
        False,
        told.where,
        f"the reply at {told.where} told the agent to exit {code}, but the attempt {ended}: "
        "its probe client did not act on the reply's exit (crashpoint.probe does; another "
        'client must exit with the reply\'s "exit" code, see docs/reference/wire-protocol.md)',
    )


def _memory(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """A memory limit fired when the attempt's memory cgroup counted an OOM kill
    (:meth:`crashpoint.harness._engine._memory.Squeeze.verdict`)."""
    noted = _noted(i, f, attempts, notes, "memory")
    if noted is not None:
        return noted
    return Outcome(i, f.kind, False, why_not=f"attempt {f.attempt} had no memory cgroup")


def _timed(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """kill at time, signal (TERM, STOP) and hang: the first signal reached a running
    process (a SIGKILL: and the attempt died of it)."""
    a = _attempt(attempts, f.attempt)
    if a is None:
        return Outcome(i, f.kind, False, why_not=_never_ran(f, attempts))
    sent = notes.get("sent") or []
    anchor = notes.get("anchor", "first event")
    at = float(f.arg("seconds", 0.0))
    first = sent[0] if sent else None
    span = (
        f" (its golden run worked {golden.span:.3f}s after its first event)" if golden.span else ""
    )
    if first is None:
        if anchor != "start" and not _events_of(events, f.attempt):
            return Outcome(
                i,
                f.kind,
                False,
                why_not=(
                    f"attempt {f.attempt} {_ended(a)} without sending an event, and the instant "
                    f"is counted from its first event"
                ),
            )
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                f"attempt {f.attempt} {_ended(a)} before the instant ({at:.3f}s after its "
                f"{anchor}): lower `within` to about how long the agent works{span}"
            ),
        )
    if not first["alive"]:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                f"{first['what']} at {first['at']:.3f}s after the {anchor} found attempt "
                f"{f.attempt} already ended ({_ended(a)}): lower `within` to about how long the "
                f"agent works{span}"
            ),
        )
    where = (
        f"{first['what']} {first['at']:.3f}s after the {anchor} of attempt "
        f"{f.attempt}, after its event #{first['events'] - 1}"
        if first["events"]
        else f"{first['what']} {first['at']:.3f}s after the {anchor} of attempt {f.attempt}, "
        "before its first event"
    )
    if first["what"] == "SIGKILL" and a.signal != signal.SIGKILL:
        return Outcome(i, f.kind, False, where, f"{where}, but the attempt {_ended(a)}")
    return Outcome(i, f.kind, True, where)


def _hits(path: str | None) -> list[list[str]]:
    if not path:
        return []
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [line.split() for line in fh.read(1 << 20).splitlines() if line.strip()]
    except OSError:
        return []


def _failpoint(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    a = _attempt(attempts, f.attempt)
    if a is None:
        return Outcome(i, f.kind, False, why_not=_never_ran(f, attempts))
    if f.kind == "disk_full":
        name, nth = "journal.write", int(f.arg("nth", 3))
    else:
        spec = str(f.arg("spec", ""))
        name, _, rest = spec.partition("=")
        nth = int(rest.partition("@")[2] or 1)
    hits = [h for h in _hits(notes.get("failpoint_log")) if h and h[0] == name]
    if hits:
        h = hits[0]
        return Outcome(
            i,
            f.kind,
            True,
            f"failpoint {name} hit #{h[2]} in attempt "
            f"{f.attempt} ({h[1]}" + (f" on {h[4]})" if len(h) > 4 else ")"),
        )
    return Outcome(
        i,
        f.kind,
        False,
        why_not=(
            f"attempt {f.attempt} {_ended(a)} without reaching failpoint {name} a {_nth(nth)} "
            "time: failpoints exist only inside the reference library (crashpoint.checkpoint); "
            "an agent not built on it never hits them (use kill at every-boundary, fileop or "
            "disk_full with a tmpfs instead)"
        ),
    )


def _nth(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def _corrupt(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    if "corruption" not in notes:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=_never_ran(f, attempts).replace(
                "never ran", "never ran, so nothing was corrupted before it"
            ),
        )
    c = notes["corruption"]
    if not c:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                f"nothing to corrupt: {notes.get('pattern')} matched no file before attempt "
                f"{f.attempt} (the agent had written none there yet): point `path` at the "
                "agent's state files"
            ),
        )
    where = f"{c['how']} {os.path.basename(str(c['path']))}"
    if c["how"] in ("truncate", "bitflip", "zero"):
        where += f" at byte {c['offset']}"
    return Outcome(i, f.kind, True, where + f" before attempt {f.attempt}")


def _resumers(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """Attempts started at once (two, or k) fired only if they raced: the work of two of them
    overlapped, or one waited or was refused
    (:func:`crashpoint.harness._engine._races.race_note`); attempts that merely ran at the
    same time are not exercised."""
    spans = notes.get("spans") or []
    k = f.processes
    if notes.get("hosts_unavailable"):  # hosts: true asked for what this machine cannot do
        return Outcome(
            i,
            f.kind,
            False,
            why_not=f"resumers on hosts of their own: {notes['hosts_unavailable']}",
        )
    if len(spans) < 2:
        return Outcome(i, f.kind, False, why_not=_never_ran(f, attempts))
    # the longest time two of them ran at once: by start, each against the latest end before
    overlap, end = 0.0, None
    for s, e in sorted(spans):
        if end is not None:
            overlap = max(overlap, min(e, end) - s)
        end = e if end is None else max(end, e)
    last = f.attempt + k - 1
    if overlap <= 0:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                f"attempt {f.attempt} ended before attempt {f.attempt + 1} started: they never "
                "ran at the same time"
                if k == 2
                else f"no two of attempts {f.attempt} to {last} ran at the same time"
            ),
        )
    race = notes.get("race")
    if race is None:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                f"attempts {f.attempt} and {f.attempt + 1} ran at the same time for "
                f"{overlap:.3f}s, but what they did was not recorded"
                if k == 2
                else f"attempts {f.attempt} to {last} ran at the same time (two of them for "
                f"{overlap:.3f}s), but what they did was not recorded"
            ),
        )
    where = str(race[1])
    if where and f.arg("hosts"):
        where += " (each in a pid and UTS namespace of its own: hosts crashpoint-resumer-N)"
    return Outcome(i, f.kind, bool(race[0]), where, str(race[2]))


def _noted(i: int, f: Fault, attempts: list[Attempt], notes: Evidence, key: str) -> Outcome | None:
    """The outcome when ``f``'s attempt never ran, or when a fault module noted its verdict
    ``(fired, where, why_not)`` under ``key``; None otherwise."""
    if _attempt(attempts, f.attempt) is None:
        return Outcome(i, f.kind, False, why_not=_never_ran(f, attempts))
    got = notes.get(key)
    return None if got is None else Outcome(i, f.kind, bool(got[0]), str(got[1]), str(got[2]))


def _fileop(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    noted = _noted(i, f, attempts, notes, "landed")  # from crashpoint.faults._fileops
    if noted is not None:
        return noted
    a = _attempt(attempts, f.attempt)
    assert a is not None
    if not f.arg("fileop") and f.arg("n") is None:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                "no file operation was recorded in the golden run to kill at: "
                + (golden.recorded_by or "the agent wrote no file under {state_dir} or {workdir}")
            ),
        )
    if a.signal == signal.SIGKILL:  # a hand-written plan (by number): the best evidence
        return Outcome(
            i, f.kind, True, f"attempt {f.attempt} killed by SIGKILL before a file operation"
        )
    return Outcome(
        i,
        f.kind,
        False,
        why_not=(f"attempt {f.attempt} {_ended(a)}: it never reached the planned file operation"),
    )


def _disk(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    if f.arg("mechanism") == "failpoint":
        return _failpoint(i, f, attempts, events, killed, notes, golden)
    noted = _noted(i, f, attempts, notes, "disk")  # from crashpoint.faults._writes
    if noted is not None:
        return noted
    return Outcome(
        i,
        f.kind,
        False,
        why_not=(
            "no evidence that the agent got ENOSPC/EFBIG (no trace of its writes and no reading "
            "of the disk's use)"
        ),
    )


def _power_loss(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """A power cut fired when its crash state was materialised (it differs from what a kill
    -9 leaves by construction: states that lose nothing are never planned)."""
    got = notes.get("cut")
    if got is None:
        return Outcome(
            i, f.kind, False, why_not=(f"the power cut of attempt {f.attempt} was never applied")
        )
    if not got[0]:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                f"no power cut to apply: {got[2]}"
                + (
                    ""
                    if "strace" not in got[2] and "trace" not in got[2]
                    else " (power loss needs strace to record the agent's file operations)"
                )
            ),
        )
    return Outcome(i, f.kind, True, str(got[1]))


def _net(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """A network fault fired when the stand-in failed at least one request with it (the
    services count it in :attr:`NetFault.fired`); else: which requests the attempt made."""
    a = _attempt(attempts, f.attempt)
    if a is None:
        return Outcome(i, f.kind, False, why_not=_never_ran(f, attempts))
    call = str(f.arg("call", ""))
    if not call:
        return Outcome(
            i,
            f.kind,
            False,
            why_not=(
                "no network call to fail: the golden run made no request to a stand-in service "
                "(HTTP under {http}/$CRASHPOINT_HTTP, the LLM at $OPENAI_BASE_URL or "
                "$ANTHROPIC_BASE_URL, MCP tools at {mcp} or {mcp_stdio}, SMTP); point the "
                "agent's endpoints at them"
            ),
        )
    fired = int(notes.get("net_fired", 0))
    times, nth = int(f.arg("times", 1)), int(f.arg("nth", 1))
    failure = net_fault(f).failure
    if fired:
        fail = f.arg("fail")
        what = failure.describe()
        where = f"{what} for {call} #{nth} in attempt {f.attempt}"
        if fail == "timeout":
            where += " (applied, reply withheld)"
        cuts = [e["partial_reply"] for e in _events_of(events, f.attempt) if "partial_reply" in e]
        if failure.mid_stream and cuts and isinstance(cuts[0], dict):
            where += (
                f" ({cuts[0].get('chunks_sent')} of {cuts[0].get('chunks')} events sent, "
                "no end of stream)"
            )
        if times > 1:
            where += f", {fired} of {times} requests failed"
        return Outcome(i, f.kind, True, where)
    if notes.get("net_missed"):  # a stream failure on a reply it could not cut
        return Outcome(
            i,
            f.kind,
            False,
            why_not=f"attempt {f.attempt} {_ended(a)}; {notes['net_missed']}",
        )
    mine = [e for e in _events_of(events, f.attempt) if call_of(e) == call]
    made = sorted({call_of(e) for e in golden.events if call_of(e)})
    if mine:
        seen = f"it made {len(mine)} {call} request(s), the plan fails #{nth}"
    else:
        seen = f"it never made a {call} request" + (
            f" (the golden run's network calls: {', '.join(made)})"
            if made
            else " (the golden run made no network call)"
        )
    return Outcome(
        i,
        f.kind,
        False,
        why_not=f"attempt {f.attempt} {_ended(a)}; {seen}"
        + ("" if f.attempt == 1 else " (it may have resumed past that call)"),
    )


def _resumed(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """``upgrade`` / ``always_replay``: the attempt after the crash ran (under version B, for
    an upgrade), so there is a resumed run to compare with the golden run."""
    a = _attempt(attempts, f.attempt)
    if a is None:
        return Outcome(i, f.kind, False, why_not=_never_ran(f, attempts))
    sent = len(_events_of(events, f.attempt))
    if f.kind == "upgrade":
        where = f"attempt {f.attempt} resumed under version B ({f.arg('label', '')})"
    else:
        where = f"attempt {f.attempt} resumed from attempt {f.attempt - 1}'s crash"
    return Outcome(i, f.kind, True, f"{where}, {_ended(a)} after {sent} event(s)")


def _backing(
    i: int,
    f: Fault,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: Evidence,
    golden: Golden,
) -> Outcome:
    """A backing-service outage fired when it was in place while the agent was inside a step
    and the agent met it (:meth:`crashpoint.harness._engine._backing.Outage.verdict`)."""
    noted = _noted(i, f, attempts, notes, "backing")
    if noted is not None:
        return noted
    return Outcome(i, f.kind, False, why_not=f"the outage of attempt {f.attempt} never began")


Accountant = Callable[
    [int, Fault, list[Attempt], list[Evidence], list[Evidence], Evidence, Golden], Outcome
]

#: One function per fault kind.
ACCOUNTANTS: dict[str, Accountant] = {
    "kill": _kill,
    "exit": _exit,
    "memory": _memory,
    "kill_at_time": _timed,
    "signal": _timed,
    "failpoint": _failpoint,
    "corrupt": _corrupt,
    "resumers": _resumers,
    "fileop": _fileop,
    "disk_full": _disk,
    "power_loss": _power_loss,
    "network": _net,
    "upgrade": _resumed,
    "always_replay": _resumed,
    "backing": _backing,
}


def account(
    plan: Plan,
    attempts: list[Attempt],
    events: list[Evidence],
    killed: list[Evidence],
    notes: dict[int, Evidence],
    golden: Golden,
) -> list[Outcome]:
    """One :class:`Outcome` per fault of ``plan``, in plan order."""
    out = []
    for i, f in enumerate(plan.faults):
        fn = ACCOUNTANTS.get(f.kind)
        if fn is None:
            out.append(Outcome(i, f.kind, False, why_not=f"no accounting for {f.kind!r}"))
            continue
        out.append(fn(i, f, attempts, events, killed, notes.get(i, {}), golden))
    return out


#: At most this many attempts' landings are named in a persistent fault's outcome.
_LANDINGS_SHOWN = 4


def fold_persistent(
    plan: Plan, ran: Plan, origin: list[int], outcomes: list[Outcome], attempts: list[Attempt]
) -> tuple[list[Outcome], dict[int, str]]:
    """The outcomes of ``ran`` (``plan`` with each persistent fault repeated for every attempt:
    :func:`crashpoint.harness._spec.persist`, ``origin`` mapping each of its faults to the
    planned one it repeats) folded back into one per planned fault. A persistent fault fired
    when it took effect in at least one attempt that ran ("fired in k of n attempts", where it
    landed in each); in none, it did not fire (and the trial is not exercised). Also returns,
    for each attempt a persistent fault hit, where it landed (what ``crash_loop`` judges)."""
    if ran is plan:
        return outcomes, {}
    numbers = {a.number for a in attempts}
    copies: dict[int, list[tuple[Fault, Outcome]]] = {}
    for j, o in enumerate(outcomes):
        copies.setdefault(origin[j], []).append((ran.faults[j], o))
    out: list[Outcome] = []
    hits: dict[int, str] = {}
    for i, f in enumerate(plan.faults):
        mine = copies.get(i, [])
        if not f.arg("every") or not mine:
            first = mine[0][1] if mine else Outcome(i, f.kind, False, why_not="not accounted")
            out.append(dataclasses.replace(first, fault=i))
            continue
        tried = [(c, o) for c, o in mine if c.attempt in numbers]
        fired = [(c, o) for c, o in tried if o.fired]
        for c, o in fired:
            hits.setdefault(c.attempt, o.where)
        n = len(tried)
        if fired:
            shown = "; ".join(o.where for _c, o in fired[:_LANDINGS_SHOWN])
            more = (
                f"; and {len(fired) - _LANDINGS_SHOWN} more" if len(fired) > _LANDINGS_SHOWN else ""
            )
            quiet = [c.attempt for c, o in tried if not o.fired]
            not_in = (
                f" (not in attempt{'s' if len(quiet) > 1 else ''} {', '.join(map(str, quiet))})"
                if quiet
                else ""
            )
            out.append(
                Outcome(
                    i,
                    f.kind,
                    True,
                    f"fired in {len(fired)} of {n} attempt{'s' if n != 1 else ''}{not_in}: "
                    f"{shown}{more}",
                )
            )
            continue
        why = (tried or mine)[0][1].why_not
        out.append(
            Outcome(
                i,
                f.kind,
                False,
                why_not=f"a fault on every attempt that fired in 0 of {n} attempts: {why}",
            )
        )
    return out, hits
