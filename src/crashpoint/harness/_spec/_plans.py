"""The plan generator: the faults of each trial, a pure function of its inputs.

:func:`plan_for` draws the plan of trial ``index`` of a family from the golden run's events
and recorded operations (never its timings), the seed and the index: the same inputs give the
same plan on any machine, in any order, in any shard or worker. A systematic family's trial
``index`` takes the sweep point ``boundary``; a random one draws it with a generator seeded by
``(seed, family, index)``. File-operation kills drawn at random (``kill: {at: fileop, count:
N}``) are drawn without replacement: trial ``draw`` of the family takes place ``draw`` of one
shuffle of the recorded operations (seeded by ``(seed, family)``), so N trials hit N distinct
operations (the campaign runs each operation once when N is more than there are).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from crashpoint.errors import NoBoundaries
from crashpoint.faults import (
    CORRUPTIONS,
    FileOp,
    OpLog,
    WritePoint,
    disk_capabilities,
    recent_writes,
)
from crashpoint.harness._spec import _power
from crashpoint.harness._spec._events import event_name
from crashpoint.harness._spec._families import (
    ADD_PROBE_CALLS,
    DEFAULT_WITHIN,
    KILL_FAILPOINTS,
    MAX_FILEOP,
    FaultFamily,
    exit_points,
    memory_points,
    net_points,
    net_requests,
    step_points,
)
from crashpoint.harness._spec._model import Fault, Golden, Plan
from crashpoint.harness._spec._upgrade import REPLAY_KINDS, describe_to

__all__ = ["persist", "plan_for"]

#: Picks the index of one of the recorded file operations for a trial (a draw without
#: replacement).
Pick = Callable[[list[dict[str, Any]]], int]


def _kill_at(attempt: int, golden: Golden, index: int, phase: str, start: int = 0) -> Fault:
    """A kill of ``attempt`` at golden event ``index`` by identity: its op, its name, and its
    occurrence counted from golden event ``start`` (where the attempt is expected to begin)."""
    ev = golden.events[index]
    name = event_name(ev)
    nth = sum(
        1 for e in golden.events[start : index + 1] if e["op"] == ev["op"] and event_name(e) == name
    )
    return Fault.make(
        "kill",
        attempt,
        op=str(ev["op"]),
        name=name,
        nth=max(1, nth),
        phase=phase,
        label=f"{ev['op']}:{name}",
    )


def _resume_point(golden: Golden, index: int) -> int:
    """Where the attempt after a kill at golden event ``index`` is expected to begin: just
    after the last step reported completed before it."""
    for j in range(index - 1, -1, -1):
        if golden.events[j]["op"] == "step_completed":
            return j + 1
    return 0


def _later_kill(
    attempt: int, golden: Golden, first: int, rng: random.Random, label: str, *, after: bool = False
) -> Fault:
    """A kill of the attempt that follows a kill at golden event ``first``: at an event drawn
    from ``first`` on (``after``: from the next one, if there is one), counted from where that
    attempt is expected to resume."""
    lo = min(first + 1, len(golden.events) - 1) if after else first
    j = lo + rng.randrange(max(1, len(golden.events) - lo))
    f = _kill_at(attempt, golden, j, "before", _resume_point(golden, first))
    return Fault.make("kill", attempt, **{**dict(f.args), "label": label})


def _instant(opts: dict[str, Any], golden: Golden, rng: random.Random) -> dict[str, Any]:
    """An instant in [0, within) seconds after the attempt's first event (after its start
    when the golden run reported no event): the seed alone decides it."""
    within = float(opts.get("within", DEFAULT_WITHIN))
    out: dict[str, Any] = {"seconds": round(rng.uniform(0.0, within), 4)}
    if not golden.events:
        out["anchor"] = "start"
    return out


def _aim(golden: Golden, kill: Fault) -> list[list[Any]]:
    """The golden run's newest writes before ``kill``'s event: [path, offset, length] with
    the path's placeholder, newest last; [] without a trace (the corruption says so)."""
    if not golden.plog:
        return []
    index = _last_kill_index(golden, [kill])
    upto = golden.plog_events[index] if index < len(golden.plog_events) else 0
    log = OpLog.from_json(golden.plog)
    return [[p, o, n] for p, o, n in recent_writes(log, upto)]


def _last_kill_index(golden: Golden, prior: Sequence[Fault]) -> int:
    """The golden event of the last kill planned before (0 if none is named)."""
    for f in reversed(prior):
        if f.kind == "kill" and f.arg("op"):
            seen = 0
            for j, ev in enumerate(golden.events):
                if ev["op"] == f.arg("op") and event_name(ev) == f.arg("name"):
                    seen += 1
                    if seen == int(f.arg("nth", 1)):
                        return j
    return 0


def _draw(
    kind: str,
    opts: dict[str, Any],
    attempt: int,
    golden: Golden,
    rng: random.Random,
    boundary: int | None,
    mode: str | None,
    prior: Sequence[Fault] = (),
    pick: Pick | None = None,
) -> list[Fault]:
    """The faults for one chain item (``boundary``: the index of the systematic point;
    ``pick``: the trial's place in a draw without replacement, for file-operation kills)."""
    # (only kills and corruptions draw boundaries: a sweep of thousands of power-loss states
    # does not list them for each of its trials)
    bs = golden.boundaries() if kind in ("kill", "corrupt") else []
    if not bs and (
        kind == "corrupt"
        or (kind == "kill" and opts.get("at", "random") in ("every-boundary", "random", "recovery"))
    ):
        raise NoBoundaries(
            f"{kind} faults at event boundaries need an agent that reports events through the "
            f"probe; its golden run reported none. {ADD_PROBE_CALLS}. Or use kill at time, "
            "failpoint or fileop for a silent agent."
        )
    if kind == "kill":
        at = opts.get("at", "random")
        if mode == "random" and at == "every-boundary":
            at = "random"
        if at in ("every-boundary", "random", "recovery"):
            b = bs[boundary] if boundary is not None else rng.choice(bs)
            out = [_kill_at(attempt, golden, b.index, b.phase)]
            rp = golden.boundary_replay[b.index] if b.index < len(golden.boundary_replay) else {}
            if attempt == 1 and opts.get("replay", True) and "upto" in rp:
                out[0] = Fault.make("kill", 1, **dict(out[0].args), replay={"upto": rp["upto"]})
            if at == "recovery":  # a second crash while recovering from the first
                out.append(_later_kill(attempt + 1, golden, b.index, rng, "recovery"))
            return out
        if at == "time":
            return [Fault.make("kill_at_time", attempt, **_instant(opts, golden, rng))]
        if at == "failpoint":
            names = list(opts.get("names", KILL_FAILPOINTS))
            return [
                Fault.make(
                    "failpoint", attempt, spec=f"{rng.choice(names)}=kill@{rng.randint(1, 3)}"
                )
            ]
        if at == "fileop":
            ops = golden.fileops[: int(opts.get("max", MAX_FILEOP))]
            if not ops:  # nothing recorded (yet): the trial says so, never passes
                return [
                    Fault.make(
                        "fileop",
                        attempt,
                        fileop={},
                        label="no file operation recorded in the golden run",
                    )
                ]
            if boundary is not None:
                op = ops[boundary]
            elif pick is not None:  # distinct operations across the family's trials
                op = ops[pick(ops)]
            else:
                op = rng.choice(ops)
            extra: dict[str, Any] = {}
            idx = next(i for i, o in enumerate(ops) if o is op)
            rp = golden.fileop_replay[idx] if idx < len(golden.fileop_replay) else {}
            if attempt == 1 and opts.get("replay", True) and "upto" in rp:
                extra["replay"] = {"upto": int(rp["upto"]), "events": int(rp["events"])}
            return [Fault.make("fileop", attempt, fileop=op, label=_fileop_label(op), **extra)]
    if kind == "exit" and opts.get("at") == "failpoint":  # the library exits there itself
        names = list(opts.get("names", KILL_FAILPOINTS))
        code = int(opts.get("code", 1))
        spec = f"{rng.choice(names)}=exit({code})@{rng.randint(1, 3)}"
        return [Fault.make("failpoint", attempt, spec=spec)]
    if kind == "exit":  # a kill's point, at a probe event; the reply carries the code
        xs = exit_points(golden)
        if not xs:
            raise NoBoundaries(
                "exit faults need an agent that reports steps or effects through the probe "
                "(the probe's reply carries the exit code); its golden run reported none. "
                f"{ADD_PROBE_CALLS}."
            )
        b = xs[boundary] if boundary is not None else rng.choice(xs)
        k = _kill_at(attempt, golden, b.index, b.phase)
        return [Fault.make("exit", attempt, **dict(k.args), code=int(opts.get("code", 1)))]
    if kind == "memory":
        limit = int(opts["limit"])
        if opts.get("at", "start") == "start":
            return [Fault.make("memory", attempt, limit=limit, label="from its start")]
        ms = memory_points(golden)
        if not ms:
            raise NoBoundaries(
                "memory faults at a boundary need an agent that reports events (probe events "
                f"or stand-in requests); its golden run reported none. {ADD_PROBE_CALLS}. Or "
                "use memory: {at: start} (the limit from the attempt's start)."
            )
        b = ms[boundary] if boundary is not None else rng.choice(ms)
        k = _kill_at(attempt, golden, b.index, b.phase)
        return [Fault.make("memory", attempt, **dict(k.args), limit=limit)]
    if kind == "signal":
        sig = str(opts.get("sig", "TERM")).upper()
        when = _instant(opts, golden, rng)
        if sig == "TERM":
            return [
                Fault.make(
                    "signal", attempt, sig="TERM", **when, grace=float(opts.get("grace", 2.0))
                )
            ]
        return [
            Fault.make("signal", attempt, sig="STOP", **when, pause=float(opts.get("pause", 0.3)))
        ]
    if kind == "corrupt":
        hows = opts.get("how", CORRUPTIONS)
        how = rng.choice(list(hows))
        path = str(opts.get("path", "{state_dir}/**"))
        b1 = rng.choice(bs)
        out = [_kill_at(attempt, golden, b1.index, b1.phase)]
        nxt = attempt + 1
        if how == "stale-copy":  # needs an older copy: crash twice, roll back to the first
            out.append(_later_kill(nxt, golden, b1.index, rng, "second crash", after=True))
            nxt += 1
        aimed: dict[str, Any] = {}
        if opts.get("aim") == "written":  # the newest writes before the (last) kill
            aimed["aim"] = _aim(golden, out[-1])
        out.append(
            Fault.make("corrupt", nxt, how=how, path=path, seed=rng.randrange(1 << 30), **aimed)
        )
        return out
    if kind == "disk_full":
        mech = opts.get("mechanism", "auto")
        if mech == "auto":
            caps = disk_capabilities()
            mech = "tmpfs" if caps.tmpfs else "rlimit" if caps.rlimit else "failpoint"
        if "capacity" not in opts and mech in ("tmpfs", "rlimit"):  # the write-point mode
            points = golden.writes.get(mech, [])
            if not points:
                return [
                    Fault.make(
                        "disk_full",
                        attempt,
                        mechanism=mech,
                        point={},
                        label="no write point recorded in the golden run",
                    )
                ]
            pt = points[boundary] if boundary is not None else rng.choice(points)
            return [
                Fault.make(
                    "disk_full",
                    attempt,
                    mechanism=mech,
                    point=pt,
                    label=WritePoint.from_json(pt).label(),
                )
            ]
        cap = int(opts.get("capacity", 65536))
        if mech == "failpoint":
            nth = int(opts.get("nth", rng.randint(2, 6)))
            return [Fault.make("disk_full", attempt, capacity=cap, mechanism=mech, nth=nth)]
        return [Fault.make("disk_full", attempt, capacity=cap, mechanism=mech)]
    if kind == "resumers":  # k attempts at once; 2 (today's pair) leaves the plan as it was
        group = int(opts.get("processes", 2))
        given: dict[str, Any] = {"processes": group} if group != 2 else {}
        if opts.get("stagger"):  # released one after the other, at the previous one's event N
            given["stagger"] = ",".join(str(int(x)) for x in opts["stagger"])
        if opts.get("hosts"):  # each as on a host of its own (a pid and UTS namespace)
            given["hosts"] = True
        return [Fault.make("resumers", attempt, **given)]
    if kind == "power_loss":
        model = str(opts.get("model", "posix"))
        if attempt == 1:
            return [_power.draw(golden, model, rng, boundary, attempt, pick)]
        # during recovery (after another fault): cut the attempt at a golden event drawn
        # past the previous kill, in the state its own trace says it may leave
        first = _last_kill_index(golden, prior)
        k = _later_kill(attempt, golden, first, rng, "power cut", after=True)
        return [
            Fault.make(
                "power_loss",
                attempt,
                model=model,
                seed=rng.randrange(1 << 30),
                **{a: v for a, v in k.args if a in ("op", "name", "nth", "phase")},
                label=f"power cut at {k.arg('op')}:{k.arg('name')}",
            )
        ]
    if kind == "network":
        return [_net_draw(opts, attempt, golden, rng, boundary)]
    if kind in REPLAY_KINDS:  # a kill's plan, then the resumed attempt (under version B)
        kill = _draw(
            "kill",
            {"at": opts.get("at", "every-boundary"), "replay": opts.get("replay", True)},
            attempt,
            golden,
            rng,
            boundary,
            mode,
        )
        if kind == "always_replay":
            return [*kill, Fault.make("always_replay", attempt + 1)]
        to = dict(opts["to"])
        return [*kill, Fault.make("upgrade", attempt + 1, to=to, label=describe_to(to))]
    if kind == "backing":
        return [_backing_draw(opts, attempt, golden, rng, boundary, prior)]
    if kind == "hang":
        return [
            Fault.make(
                "signal",
                attempt,
                sig="STOP",
                seconds=0.0,
                pause=1e6,
                **({"anchor": "start"} if not golden.events else {}),
            )
        ]
    raise ValueError(f"cannot draw faults of kind {kind!r}")


def _net_draw(
    opts: dict[str, Any], attempt: int, golden: Golden, rng: random.Random, boundary: int | None
) -> Fault:
    """One ``network`` fault: a sweep's point (``boundary``: call x failure), or drawn. A
    drawn ``any`` without ``nth`` picks one request of the golden run (its occurrence too)."""
    calls, fails = net_points(opts, golden)
    nth = int(opts.get("nth", 1))
    if boundary is not None:
        call, fail = calls[boundary // len(fails)], fails[boundary % len(fails)]
    else:
        fail = rng.choice(fails)
        reqs = net_requests(golden)
        if opts.get("call", "any") == "any" and "nth" not in opts and reqs:
            call, nth = rng.choice(reqs)
        else:
            call = rng.choice(calls)
    times = int(opts.get("times", 1))
    if not call:
        return Fault.make(
            "network",
            attempt,
            call="",
            fail=fail,
            nth=nth,
            times=times,
            label="no network call in the golden run",
        )
    return Fault.make("network", attempt, call=call, fail=fail, nth=nth, times=times)


#: The options a ``backing`` fault carries into its plan as they are.
_BACKING_ARGS = ("service", "do", "for", "path", "lock", "how", "shutdown", "then")


def _backing_draw(
    opts: dict[str, Any],
    attempt: int,
    golden: Golden,
    rng: random.Random,
    boundary: int | None,
    prior: Sequence[Fault],
) -> Fault:
    """One ``backing`` fault: at a step of the golden run (a sweep's point, or drawn; after
    a kill earlier in the chain, among the steps from where the attempt resumes, its
    occurrence counted from there), or at an instant after the attempt's first event."""
    args = {k: opts[k] for k in _BACKING_ARGS if k in opts}
    if opts.get("at") == "time":
        return Fault.make("backing", attempt, **args, **_instant(opts, golden, rng))
    start = _resume_point(golden, _last_kill_index(golden, prior)) if prior else 0
    points = [j for j in step_points(golden) if j >= start] or step_points(golden)
    if not points:
        raise NoBoundaries(
            "backing faults begin at a step of the golden run, and it reported no event. "
            f"{ADD_PROBE_CALLS}. Or use at: time."
        )
    j = points[boundary] if boundary is not None else rng.choice(points)
    k = _kill_at(attempt, golden, j, "before", start)
    where = {a: v for a, v in k.args if a in ("op", "name", "nth", "label")}
    return Fault.make("backing", attempt, **args, **where)


def _fileop_label(op: dict[str, Any]) -> str:
    try:
        return FileOp.from_json(op).label()
    except (ValueError, TypeError, KeyError):  # a hand-written one: its own words
        return str(
            op.get("label") or f"{op.get('op', '?')} {op.get('path', '?')} #{op.get('n', 1)}"
        )


#: The last orders :func:`_fileop_order` gave, per list (by identity: the golden run's file
#: operations, or the power-loss states planned for it, which are never changed in place).
_ORDERS: dict[tuple[int, int, int, str], tuple[list[dict[str, Any]], list[int]]] = {}


def _fileop_order(ops: list[dict[str, Any]], seed: int, family: str) -> list[int]:
    """The order in which a family's drawn trials take the recorded file operations ``ops``:
    one shuffle of their indices seeded by the seed and the family (never by the trial), so
    successive draws are distinct until every operation was taken once. Operations a kill
    lands on reliably come first: one that other threads or processes also made on the file
    (``shared``: strace counts calls per thread, so the kill may land on another thread's)
    is drawn once the others are used up, so a small ``count`` is not spent on kills that
    end up not exercised (a database's write-ahead log written from a pool of threads)."""
    key = (id(ops), len(ops), seed, family)
    hit = _ORDERS.get(key)
    if hit is not None and hit[0] is ops:  # the same list: one shuffle for all its draws
        return hit[1]
    order = list(range(len(ops)))
    random.Random(f"crashpoint:{seed}:{family}:fileop-order").shuffle(order)
    # stable: shuffled within each group (a power cut's crash states: those that lose
    # nothing the agent had reported done come last too, see _power.QUIET)
    order.sort(key=lambda i: bool(ops[i].get("shared") or ops[i].get(_power.QUIET)))
    if len(_ORDERS) > 8:
        _ORDERS.clear()
    _ORDERS[key] = (ops, order)
    return order


def plan_for(
    family: FaultFamily,
    golden: Golden,
    seed: int,
    index: int,
    *,
    boundary: int | None = None,
    mode: str | None = None,
    draw: int | None = None,
) -> Plan:
    """The plan of trial ``index``: a pure function of the family, the golden run's events
    and recorded operations (never its timings), the seed and the index.

    ``draw``: the trial's place among the family's drawn (not swept) trials, 0 first. Given,
    a file-operation kill takes operation ``draw`` of :func:`_fileop_order` (distinct ones
    for ``draw`` 0 to n - 1, then round again); without it, one drawn by the trial's seed."""
    rng = random.Random(f"crashpoint:{seed}:{family.name}:{index}")

    pick: Pick | None = None
    if draw is not None:
        pick = lambda ops, k=draw: _fileop_order(ops, seed, family.name)[k % len(ops)]  # noqa: E731

    faults: list[Fault] = []
    attempt = 1
    for kind, opts in family.chain:
        o = dict(opts)
        if o.get("every_attempt"):  # persistent: a real kill in every attempt, none replayed
            o["replay"] = False
        drawn = _draw(
            kind,
            o,
            attempt,
            golden,
            rng,
            boundary,
            mode,
            faults,
            pick,
        )
        if o.get("every_attempt"):
            drawn = [Fault.make(f.kind, f.attempt, **dict(f.args), every=True) for f in drawn]
        faults += drawn
        # the next item hits the attempt after these (after every one of a resumers group)
        attempt = max(f.attempt + f.processes - 1 for f in drawn) + 1
    return Plan(tuple(faults), family.name, seed, index)


def _golden_index(golden: Golden, f: Fault) -> int | None:
    """The golden event a kill of attempt 1 names by identity (op, name, nth), or None."""
    seen = 0
    for j, ev in enumerate(golden.events):
        if ev["op"] == f.arg("op") and event_name(ev) == f.arg("name"):
            seen += 1
            if seen == int(f.arg("nth", 1)):
                return j
    return None


def _again(f: Fault, attempt: int, golden: Golden) -> Fault:
    """Persistent fault ``f`` planned once more, for ``attempt``: the same fault at the same
    point. A kill at an event of attempt 1 lands on the same event, its occurrence counted
    from where a resumed attempt begins (after the last step completed before it), as a kill
    after a restart is (:func:`_later_kill`)."""
    args = dict(f.args)
    if f.kind in ("kill", "exit", "memory", "backing") and f.arg("op") and f.attempt == 1:
        j = _golden_index(golden, f)
        if j is not None:
            k = _kill_at(
                attempt, golden, j, str(f.arg("phase", "before")), _resume_point(golden, j)
            )
            args["nth"] = k.arg("nth")
    args.pop("replay", None)
    return Fault.make(f.kind, attempt, **args)


def persist(plan: Plan, golden: Golden, restarts: int) -> tuple[Plan, list[int]]:
    """The plan as a trial runs it: each persistent fault (``every``: a family's
    ``every_attempt: true``) repeated for every attempt after its own, up to the last one the
    restarts allow (``1 + restarts``). Also, for each fault of the result, the index of the
    planned fault it repeats (the accounting reports each planned fault once: "fired in k of
    n attempts"). A plan without a persistent fault comes back as it is."""
    faults: list[Fault] = []
    origin: list[int] = []
    for i, f in enumerate(plan.faults):
        faults.append(f)
        origin.append(i)
        if f.arg("every"):
            for a in range(f.attempt + 1, restarts + 2):
                faults.append(_again(f, a, golden))
                origin.append(i)
    if len(faults) == len(plan.faults):
        return plan, origin
    return Plan(tuple(faults), plan.family, plan.seed, plan.index), origin
