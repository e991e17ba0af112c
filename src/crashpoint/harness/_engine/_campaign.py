"""A campaign: a golden run, then N trials drawn from fault families by a seed.

Every trial is reproducible from (seed, index): its plan is a pure function of the golden run,
the families, the seed and the index. Systematic families cover every boundary of the golden
run at least once; random families draw ``count`` trials each (or share ``trials``).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import statistics
import string
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from crashpoint._failpoints import FAILPOINTS
from crashpoint._placeholders import PlaceholderError, fields, fill
from crashpoint._proc._cleanup import received, shielded, signal_name
from crashpoint._units import UnitError, format_duration, parse_duration, parse_size
from crashpoint.errors import CrashpointError
from crashpoint.faults._files import CORRUPTIONS
from crashpoint.harness._checker._checks import TrialFacts
from crashpoint.harness._engine._trial import (
    EVIDENCE_PER_CAMPAIGN,
    EVIDENCE_PER_TRIAL,
    BudgetExceeded,
    TrialRunner,
    load_json,
    replay_inputs,
)
from crashpoint.harness._report._safe import secure_dir, write_file
from crashpoint.harness._spec._model import (
    AgentSpec,
    CheckResult,
    Expect,
    Fault,
    Golden,
    Plan,
    TrialResult,
    dumps,
    event_name,
)

__all__ = [
    "BUDGET_HOW",
    "DEFAULT_BUDGET",
    "FAMILY_KINDS",
    "FAMILY_OPTIONS",
    "Campaign",
    "CampaignInterrupted",
    "CampaignResult",
    "FaultFamily",
    "FaultSpecError",
    "family_from_spec",
    "parse_budget",
    "replay",
]

#: A campaign's time budget (seconds) unless the scenario, an option or the caller says.
DEFAULT_BUDGET = 600.0
BUDGET_HOW = (
    "raise it with `budget:` in the scenario file, --crashpoint-budget (crashpoint "
    "run --budget), CRASHPOINT_BUDGET or the crashpoint_budget ini key; `none` "
    "turns the limit off"
)


def parse_budget(raw: str | float, *, what: str = "budget") -> float:
    """A campaign budget in seconds: a duration (``10m``, ``90s``; more than zero), or
    ``none`` / ``off`` for no limit (``math.inf``). Raises UnitError (which does not mention
    ``none``: callers add how to say "no limit" where they take the value)."""
    if isinstance(raw, str) and raw.strip().lower() in ("none", "off", "unlimited"):
        return math.inf
    where = f"{what}: " if what else ""
    if not isinstance(raw, (str, int, float)):
        raise UnitError(f"{where}expected a duration such as 10m, got {raw!r}")
    v = parse_duration(raw, what=what)
    if v <= 0:
        raise UnitError(f"{where}a budget must be more than 0")
    return v


FAMILY_KINDS = (
    "kill",
    "signal",
    "corrupt",
    "disk_full",
    "resumers",
    "hang",
    "power_loss",
    "network",
)
#: The options each fault family accepts (``count`` everywhere).
FAMILY_OPTIONS: dict[str, tuple[str, ...]] = {
    "kill": ("at", "count", "names", "max", "within"),
    "signal": ("sig", "grace", "pause", "count", "within"),
    "corrupt": ("how", "path", "count", "aim"),
    "disk_full": ("capacity", "mechanism", "nth", "count"),
    "resumers": ("count",),
    "hang": ("count",),
    "power_loss": ("model", "count"),
    "network": ("call", "fail", "nth", "times", "count"),
}
#: power_loss: the persistence models (crashpoint.faults._powercut)
POWER_MODELS = ("posix", "ext4-ordered")
DISK_MECHANISMS = ("auto", "tmpfs", "rlimit", "failpoint")
KILL_AT = ("every-boundary", "random", "time", "failpoint", "fileop", "recovery")
_KILL_FAILPOINTS = (
    "journal.after_write",
    "journal.after_sync",
    "atomic.after_temp",
    "atomic.after_rename",
    "effect.after_call",
    "step.after_complete",
)
#: The placeholders a ``corrupt`` path may start with: the trial's own folders.
CORRUPT_ROOTS = ("state_dir", "workdir")
#: Bounds of the options (a value outside is refused, naming the bound).
MAX_COUNT = 100_000  # trials drawn from one family
MAX_FILEOP = 100_000  # kill: {at: fileop, max: N}
MAX_NTH = 1_000  # disk_full: {nth: N}
MAX_CAPACITY = 1 << 30  # disk_full: {capacity: ...}: 1 GiB (a tmpfs lives in memory)
MAX_SIGNAL_WAIT = 600.0  # signal: {grace, pause}: 10 minutes
MAX_NET_NTH = 10_000  # network: {nth: N}
MAX_NET_TIMES = 100  # network: {times: N}
#: network: how a call can fail (a status: answered with that HTTP status)
NET_FAILS: tuple[str | int, ...] = ("reset", "timeout", 500, 502, 503, 429)
#: network: a call is ``METHOD /path`` (an HTTP stand-in request), ``llm`` or ``mail``
_NET_CALL = re.compile(r"^(?:[A-Z]{1,16} /[^\s]*|llm|mail)$")
#: kill at time / signal: instants are drawn in [0, within) seconds after the attempt's first
#: event (a function of the seed alone, never of a measured duration)
DEFAULT_WITHIN = 1.0
MAX_WITHIN = 3600.0


class FaultSpecError(ValueError):
    """A bad fault family: what, and where within the ``faults:`` item: ``item`` (the index
    within a chain, None for a single fault), ``kind`` and ``option`` (empty when the item as a
    whole is wrong)."""

    def __init__(
        self, message: str, *, item: int | None = None, kind: str = "", option: str = ""
    ) -> None:
        super().__init__(message)
        self.item, self.kind, self.option = item, kind, option


def _whole(
    v: Any, lo: int, hi: int, what: str, *, cap: str = "", err: Callable[[str], FaultSpecError]
) -> int:
    """``v`` as a whole number in ``[lo, hi]``, or a FaultSpecError saying which bound."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise err(f"{what} must be a whole number from {lo} to {hi}, got {v!r}")
    if v < lo:
        why = (
            " (0 runs no trial of this family: give 1 or more, or remove the family)"
            if what.endswith(".count") and v == 0
            else ""
        )
        raise err(f"{what} must be at least {lo}, got {v}{why}")
    if v > hi:
        raise err(f"{what} is {v}, above the cap of {hi}{cap}")
    return v


def _corrupt_path(path: Any, err: Callable[[str], FaultSpecError]) -> str:
    """A ``corrupt`` path that can only reach the trial's own folders: it starts with
    ``{state_dir}`` or ``{workdir}``, then ``/`` and a glob without ``..``."""
    how_to = (
        "; a corruption touches only the trial's own folders: write e.g. "
        '"{state_dir}/**" or "{workdir}/cache/*.json"'
    )
    if not isinstance(path, str) or not path:
        raise err(f"corrupt.path must be a glob string, got {path!r}{how_to}")
    if "\0" in path:
        raise err(f"corrupt.path contains a NUL byte: {path!r}")
    try:
        names = fields(path, CORRUPT_ROOTS)
    except PlaceholderError as exc:
        raise err(f"corrupt.path: {exc}") from None
    first = next(iter(string.Formatter().parse(path)))
    if first[0] != "" or first[1] not in CORRUPT_ROOTS or len(names) != 1:
        raise err(
            f"corrupt.path must start with {{state_dir}} or {{workdir}} and name no "
            f"other placeholder, got {path!r}{how_to}"
        )
    rest = fill(path, dict.fromkeys(CORRUPT_ROOTS, ""))
    if rest and not rest.startswith("/"):
        raise err(
            f"corrupt.path: {path!r} names a sibling of {{{first[1]}}}, not a path "
            f"inside it (a '/' must follow the placeholder){how_to}"
        )
    if os.pardir in rest.split("/"):
        raise err(f"corrupt.path: {path!r} climbs out with '..'{how_to}")
    return path


def _within(v: Any, what: str, err: Callable[[str], FaultSpecError]) -> float:
    try:
        secs = parse_duration(v, what=what)
    except UnitError as exc:
        raise err(str(exc)) from None
    if not 0 < secs <= MAX_WITHIN:
        raise err(f"{what} must be more than 0 and at most {MAX_WITHIN:g}s, got {v!r}")
    return secs


def _check_options(
    kind: str, opts: dict[str, Any], last: bool, err: Callable[[str, str], FaultSpecError]
) -> None:
    """Validate (and normalise, in place) the options of one fault of kind ``kind``."""

    def at(option: str) -> Callable[[str], FaultSpecError]:
        return lambda message: err(message, option)

    def text(option: str, allowed: tuple[str, ...], default: str) -> str:
        v = opts.get(option, default)
        if not isinstance(v, str) or v not in allowed:
            raise err(f"{kind}.{option} must be one of {', '.join(allowed)}, got {v!r}", option)
        return v

    if "count" in opts:
        if not last:
            raise err(
                f"{kind}.count: put count on the last fault of a chain (it is the "
                "number of trials of the whole chain)",
                "count",
            )
        _whole(
            opts["count"],
            1,
            MAX_COUNT,
            f"{kind}.count",
            err=at("count"),
            cap=" trials per family; split the family or raise the cap in crashpoint",
        )
    if kind == "kill":
        mode = text("at", KILL_AT, "random")
        if "names" in opts:
            if mode != "failpoint":
                raise err("kill.names goes with at: failpoint (it narrows the failpoints)", "names")
            names = opts["names"]
            names = [names] if isinstance(names, str) else names
            if not isinstance(names, list) or not names:
                raise err(
                    f"kill.names must be a non-empty list of failpoint names, got "
                    f"{opts['names']!r}; known: {', '.join(FAILPOINTS)}",
                    "names",
                )
            bad = [n for n in names if not isinstance(n, str) or n not in FAILPOINTS]
            if bad:
                raise err(
                    f"kill.names: unknown failpoint(s) {', '.join(map(repr, bad))}; "
                    f"known: {', '.join(FAILPOINTS)}",
                    "names",
                )
            opts["names"] = tuple(names)
        if "within" in opts:
            if mode != "time":
                raise err(
                    "kill.within goes with at: time (the window after the first event "
                    "in which the instant is drawn)",
                    "within",
                )
            opts["within"] = _within(opts["within"], "kill.within", at("within"))
        if "max" in opts:
            if mode != "fileop":
                raise err(
                    "kill.max goes with at: fileop (the highest file operation to kill before)",
                    "max",
                )
            _whole(opts["max"], 1, MAX_FILEOP, "kill.max", err=at("max"))
    elif kind == "signal":
        if "within" in opts:
            opts["within"] = _within(opts["within"], "signal.within", at("within"))
        sig = opts.get("sig", "TERM")
        if not isinstance(sig, str) or sig.upper() not in ("TERM", "STOP"):
            raise err(f"signal.sig must be TERM or STOP, got {sig!r}", "sig")
        sig = sig.upper()
        for option, goes in (("grace", "TERM"), ("pause", "STOP")):
            if option not in opts:
                continue
            if sig != goes:
                raise err(f"signal.{option} goes with sig: {goes}", option)
            try:
                secs = parse_duration(opts[option], what=f"signal.{option}")
            except UnitError as exc:
                raise err(str(exc), option) from None
            if secs > MAX_SIGNAL_WAIT:
                raise err(
                    f"signal.{option} is {secs:g}s, above the cap of {MAX_SIGNAL_WAIT:g}s", option
                )
            opts[option] = secs
    elif kind == "corrupt":
        hows = opts.get("how", list(CORRUPTIONS))
        hows = [hows] if isinstance(hows, str) else hows
        if not isinstance(hows, list) or not hows:
            raise err(
                f"corrupt.how must be a corruption or a non-empty list of them, got "
                f"{opts.get('how')!r}; use {', '.join(CORRUPTIONS)}",
                "how",
            )
        bad = [h for h in hows if not isinstance(h, str) or h not in CORRUPTIONS]
        if bad:
            raise err(f"corrupt: unknown how {bad}; use {', '.join(CORRUPTIONS)}", "how")
        opts["how"] = tuple(hows)
        if "path" in opts:
            _corrupt_path(opts["path"], at("path"))
        if "aim" in opts:
            text("aim", ("written", "anywhere"), "anywhere")
    elif kind == "disk_full":
        text("mechanism", DISK_MECHANISMS, "auto")
        if "capacity" in opts:
            try:
                cap = parse_size(opts["capacity"], what="disk_full.capacity")
            except UnitError as exc:
                raise err(str(exc), "capacity") from None
            if not 0 < cap <= MAX_CAPACITY:
                raise err(
                    f"disk_full.capacity must be more than 0 and at most 1 GiB (the "
                    f"cap), got {opts['capacity']!r}",
                    "capacity",
                )
            opts["capacity"] = cap
        if "nth" in opts:
            _whole(opts["nth"], 1, MAX_NTH, "disk_full.nth", err=at("nth"))
    elif kind == "power_loss":
        opts["model"] = text("model", POWER_MODELS, "posix")
    elif kind == "network":
        _check_network(opts, at)


def _check_network(
    opts: dict[str, Any], at: Callable[[str], Callable[[str], FaultSpecError]]
) -> None:
    """``network`` options: ``call`` (``METHOD /path``, ``llm``, ``mail`` or ``any``),
    ``fail`` (one of :data:`NET_FAILS` or a list), ``nth``, ``times``."""
    call = opts.get("call", "any")
    if not isinstance(call, str) or not (call == "any" or _NET_CALL.match(call)):
        raise at("call")(
            f"network.call must be a request as the ledger names it: 'METHOD /path' (e.g. "
            f'"POST /hook", the path under {{http}}), llm, mail, or any (one drawn from the '
            f"golden run's network calls), got {call!r}"
        )
    opts["call"] = call
    fails = opts.get("fail", "timeout")
    fails = [fails] if isinstance(fails, (str, int)) and not isinstance(fails, bool) else fails
    allowed = ", ".join(map(str, NET_FAILS))
    if not isinstance(fails, list) or not fails:
        raise at("fail")(
            f"network.fail must be one of {allowed} or a non-empty list of them, "
            f"got {opts.get('fail')!r}"
        )
    norm: list[str | int] = []
    for v in fails:
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if isinstance(v, bool) or v not in NET_FAILS:
            raise at("fail")(
                f"network.fail: unknown failure {v!r}; use {allowed} (reset: "
                f"the connection is closed unanswered; timeout: the request is "
                f"applied and no reply comes; a status: answered before "
                f"applying)"
            )
        if v not in norm:
            norm.append(v)
    opts["fail"] = tuple(norm)
    if "nth" in opts:
        _whole(opts["nth"], 1, MAX_NET_NTH, "network.nth", err=at("nth"))
    if "times" in opts:
        _whole(
            opts["times"],
            1,
            MAX_NET_TIMES,
            "network.times",
            err=at("times"),
            cap=" consecutive failures",
        )


@dataclass(frozen=True)
class FaultFamily:
    """One ``faults:`` item of a scenario: a fault kind with its options, or a chain of them
    applied in order within one trial (item j hits attempt j + 1)."""

    chain: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]

    @property
    def name(self) -> str:
        parts = []
        for kind, opts in self.chain:
            o = dict(opts)
            tag = (
                o.get("at")
                or o.get("how")
                or o.get("sig")
                or o.get("mechanism")
                or o.get("model")
                or ""
            )
            if kind == "network":
                tag = f"{o.get('call', 'any')}:{'|'.join(map(str, o.get('fail', ('timeout',))))}"
            if isinstance(tag, (list, tuple)):
                tag = "|".join(map(str, tag))
            parts.append(f"{kind}@{tag}" if tag else kind)
        return "+".join(parts)

    @property
    def systematic(self) -> bool:
        """Sweeps the golden run's points (one trial each) unless the scenario says random:
        kill at every boundary, kill at each file operation (``at: fileop`` without a
        count), a full disk at each write point (``disk_full`` without a capacity or count).
        """
        if len(self.chain) != 1:
            return False
        kind, opts = self.chain[0]
        o = dict(opts)
        if kind == "kill":
            at = o.get("at", "random")
            return at == "every-boundary" or (at == "fileop" and "count" not in o)
        if kind in ("power_loss", "network"):
            return "count" not in o
        return (
            kind == "disk_full"
            and "capacity" not in o
            and "count" not in o
            and o.get("mechanism", "auto") != "failpoint"
        )

    def points(self, golden: Golden) -> int:
        """How many trials a systematic sweep of this family has over ``golden``."""
        kind, opts = self.chain[0]
        o = dict(opts)
        if kind == "kill" and o.get("at") == "fileop":
            return max(1, len(golden.fileops[: int(o.get("max", MAX_FILEOP))]))
        if kind == "power_loss":
            from crashpoint.harness._engine import _power

            return _power.points(golden, str(o.get("model", "posix")))
        if kind == "network":
            calls, fails = _net_points(o, golden)
            return len(calls) * len(fails)
        if kind == "disk_full":
            from crashpoint.faults._disk import capabilities

            mech = o.get("mechanism", "auto")
            if mech == "auto":
                caps = capabilities()
                mech = "tmpfs" if caps.tmpfs else "rlimit"
            return max(1, len(golden.writes.get(mech, [])))
        return len(golden.boundaries())

    @property
    def needs(self) -> frozenset[str]:
        """What the golden run must record for this family: ``fileops``, ``writes``."""
        out = set()
        for kind, opts in self.chain:
            o = dict(opts)
            if kind == "kill" and o.get("at") == "fileop":
                out.add("fileops")
            if (
                kind == "disk_full"
                and "capacity" not in o
                and o.get("mechanism", "auto") != "failpoint"
            ):
                out.add("writes")
            if kind == "power_loss" or (kind == "corrupt" and o.get("aim") == "written"):
                out.add("plog")
        return frozenset(out)

    @property
    def count(self) -> int | None:
        c = dict(self.chain[-1][1]).get("count")
        return int(c) if c is not None else None

    def to_json(self) -> list[dict[str, Any]]:
        return [{kind: dict(opts)} for kind, opts in self.chain]


def family_from_spec(spec: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> FaultFamily:
    """``{"kill": {"at": "random"}}`` or a list of such items (a chain) -> a FaultFamily.

    Every option is validated (type, range, known names); a bad one raises
    :class:`FaultSpecError` (a ValueError) saying which fault and option, and why.
    """
    raw: Any = spec  # checked here: it comes from a YAML file or a marker
    chained = not isinstance(raw, Mapping)
    if chained and (isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence)):
        hint = f" (write '{raw}:' with a colon)" if raw in FAMILY_KINDS else ""
        raise FaultSpecError(
            f"a fault is a mapping with one key (the fault kind), or a list "
            f"of them (a chain), got {raw!r}{hint}"
        )
    items = list(raw) if chained else [raw]
    if not items:
        raise FaultSpecError(
            "an empty chain: a chain lists one or more faults, e.g. "
            "[disk_full: {capacity: 8KiB}, kill: {at: random}]"
        )
    chain = []
    for j, item in enumerate(items):
        where = j if chained else None
        if not isinstance(item, Mapping) or len(item) != 1:
            raise FaultSpecError(
                f"a fault is a mapping with one key (the fault kind), got {item!r}", item=where
            )
        ((kind, opts),) = item.items()
        if kind not in FAMILY_KINDS:
            raise FaultSpecError(
                f"unknown fault kind {kind!r}; use one of {', '.join(FAMILY_KINDS)}", item=where
            )

        def err(
            message: str, option: str = "", _kind: str = str(kind), _where: int | None = where
        ) -> FaultSpecError:
            return FaultSpecError(message, item=_where, kind=_kind, option=option)

        if opts is not None and not isinstance(opts, Mapping):
            raise err(f"{kind}: options must be a mapping, e.g. {{{kind}: {{count: 3}}}}")
        opts = dict(opts or {})
        unknown = sorted(map(str, set(opts) - set(FAMILY_OPTIONS[kind])))
        if unknown:
            raise err(
                f"{kind}: unknown option(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(FAMILY_OPTIONS[kind])}",
                unknown[0],
            )
        _check_options(kind, opts, j == len(items) - 1, err)
        chain.append(
            (
                kind,
                tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in opts.items())),
            )
        )
    return FaultFamily(tuple(chain))


class NoBoundaries(CrashpointError, ValueError):
    """The golden run reported no event and no file operation: nothing to place a fault at,
    nothing to judge a trial by."""


#: How to give a campaign boundaries (the message of :class:`NoBoundaries`).
ADD_PROBE_CALLS = (
    "Add probe calls to the agent: `from crashpoint import probe`, then "
    "probe.step_started(name) / probe.step_completed(name) around each step and "
    "probe.effect(kind, payload, key=...) for each side effect (the reference library "
    "crashpoint.checkpoint calls them for you; other languages speak the wire protocol, or "
    "POST to $CRASHPOINT_LEDGER_HTTP: see docs/reference/wire-protocol.md)"
)


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
    from crashpoint.faults import _powercut

    index = _last_kill_index(golden, [kill])
    upto = golden.plog_events[index] if index < len(golden.plog_events) else 0
    log = _powercut.OpLog.from_json(golden.plog)
    return [[p, o, n] for p, o, n in _powercut.recent_writes(log, upto)]


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
) -> list[Fault]:
    """The faults for one chain item (``boundary``: the index of the systematic point)."""
    bs = golden.boundaries()
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
            if at == "recovery":  # a second crash while recovering from the first
                out.append(_later_kill(attempt + 1, golden, b.index, rng, "recovery"))
            return out
        if at == "time":
            return [Fault.make("kill_at_time", attempt, **_instant(opts, golden, rng))]
        if at == "failpoint":
            names = list(opts.get("names", _KILL_FAILPOINTS))
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
            op = ops[boundary] if boundary is not None else rng.choice(ops)
            return [Fault.make("fileop", attempt, fileop=op, label=_fileop_label(op))]
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
        from crashpoint.faults._disk import capabilities

        mech = opts.get("mechanism", "auto")
        if mech == "auto":
            caps = capabilities()
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
            from crashpoint.faults._writes import WritePoint

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
    if kind == "resumers":
        return [Fault.make("resumers", attempt)]
    if kind == "power_loss":
        from crashpoint.harness._engine import _power

        model = str(opts.get("model", "posix"))
        if attempt == 1:
            return [_power.draw(golden, model, rng, boundary, attempt)]
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


def net_requests(golden: Golden) -> list[tuple[str, int]]:
    """The golden run's requests to the stand-in services, in order: (call, nth), the call as
    the ledger names it (``POST /hook``, ``llm``, ``mail``) and its occurrence from 1."""
    from crashpoint.harness._standins._network import call_of

    seen: Counter[str] = Counter()
    out = []
    for ev in golden.events:
        call = call_of(ev)
        if call:
            seen[call] += 1
            out.append((call, seen[call]))
    return out


def _net_points(o: Mapping[str, Any], golden: Golden) -> tuple[list[str], list[str | int]]:
    """The calls a ``network`` family fails (its own, or each distinct one of the golden run
    for ``any``; [""] when there is none) and its failures."""
    call = str(o.get("call", "any"))
    if call != "any":
        calls = [call]
    else:
        calls = list(dict.fromkeys(c for c, _n in net_requests(golden))) or [""]
    return calls, list(o.get("fail", ("timeout",)))


def _net_draw(
    opts: dict[str, Any], attempt: int, golden: Golden, rng: random.Random, boundary: int | None
) -> Fault:
    """One ``network`` fault: a sweep's point (``boundary``: call x failure), or drawn. A
    drawn ``any`` without ``nth`` picks one request of the golden run (its occurrence too)."""
    calls, fails = _net_points(opts, golden)
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


def _fileop_label(op: dict[str, Any]) -> str:
    from crashpoint.faults._fileops import FileOp

    try:
        return FileOp.from_json(op).label()
    except (ValueError, TypeError, KeyError):  # a hand-written one: its own words
        return str(
            op.get("label") or f"{op.get('op', '?')} {op.get('path', '?')} #{op.get('n', 1)}"
        )


def plan_for(
    family: FaultFamily,
    golden: Golden,
    seed: int,
    index: int,
    *,
    boundary: int | None = None,
    mode: str | None = None,
) -> Plan:
    """The plan of trial ``index``: a pure function of the family, the golden run's events
    and recorded operations (never its timings), the seed and the index."""
    rng = random.Random(f"crashpoint:{seed}:{family.name}:{index}")
    faults: list[Fault] = []
    attempt = 1
    for kind, opts in family.chain:
        drawn = _draw(kind, dict(opts), attempt, golden, rng, boundary, mode, faults)
        faults += drawn
        attempt = max(f.attempt for f in drawn) + 1
    return Plan(tuple(faults), family.name, seed, index)


class CampaignInterrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM (or Ctrl-C) stopped a campaign. Its processes and temporary folders are
    gone; ``result`` holds the trials that ran, marked incomplete (its reports are written)."""

    def __init__(self, result: CampaignResult) -> None:
        super().__init__(f"campaign {result.name!r}: {result.incomplete}")
        self.result = result


@dataclass
class CampaignResult:
    name: str
    golden: Golden
    trials: list[TrialResult]
    duration: float
    seed: int
    report_dir: str
    #: why the campaign stopped before its last trial ("": it ran them all); such a campaign
    #: never passes
    incomplete: str = ""
    interrupted_by: str = ""  # "SIGINT" / "SIGTERM" when a signal stopped it
    not_run: list[Plan] = field(default_factory=list)  # the trials that never ran (or stopped)

    @property
    def ok(self) -> bool:
        """Complete, no failing trial, and every family that ran has an exercised trial (a
        family whose faults never fired proved nothing: it fails, see :meth:`unexercised`)."""
        return not self.incomplete and all(t.ok for t in self.trials) and not self.unexercised()

    @property
    def failures(self) -> list[TrialResult]:
        return [t for t in self.trials if not t.ok]

    def families(self) -> dict[str, dict[str, Any]]:
        """Per family (in plan order): trials planned, run, exercised, passed, failed, not
        exercised, skipped; and why trials were not exercised (the commonest reasons)."""
        out: dict[str, dict[str, Any]] = {}
        examples: dict[str, str] = {}
        for p in [*(t.plan for t in self.trials), *self.not_run]:
            out.setdefault(
                p.family,
                {
                    "planned": 0,
                    "ran": 0,
                    "exercised": 0,
                    "passed": 0,
                    "failed": 0,
                    "not_exercised": 0,
                    "skipped": 0,
                    "not_fired": Counter(),
                },
            )["planned"] += 1
        for t in self.trials:
            d = out[t.plan.family]
            status = t.status
            d["skipped" if status == "skipped" else "ran"] += 1
            d["exercised"] += t.exercised
            d[
                {
                    "passed": "passed",
                    "failed": "failed",
                    "not exercised": "not_exercised",
                    "skipped": "skipped",
                }[status]
            ] += 0 if status == "skipped" else 1
            for o in t.not_fired:  # like reasons grouped; the first one's text shown
                key = _reason(o.why_not)
                d["not_fired"][key] += 1
                examples.setdefault(key, o.why_not)
        for d in out.values():
            d["not_fired"] = [
                f"{examples[key]} ({n} trial{'s' if n > 1 else ''})"
                for key, n in d["not_fired"].most_common(3)
            ]
        return out

    def unexercised(self) -> list[str]:
        """One message per family that ran trials none of which was exercised: why, and how
        to make its faults fire."""
        msgs = []
        for name, d in self.families().items():
            if d["ran"] and not d["exercised"] and not d["failed"]:
                why = "; ".join(d["not_fired"]) or "no fault was planned"
                msgs.append(
                    f"family {name}: none of its {d['ran']} trial(s) was exercised "
                    f"(a fault that does not fire proves nothing): {why}"
                )
        return msgs

    def summary(self) -> dict[str, Any]:
        ran = [t for t in self.trials if not t.skipped]
        by_kind: Counter[str] = Counter()
        for t in ran:
            for f in t.plan.faults:
                by_kind[f.kind] += 1
        checks: dict[str, dict[str, int]] = {}
        for t in ran:
            for c in t.checks:
                d = checks.setdefault(c.name, {"passed": 0, "failed": 0, "skipped": 0})
                d["skipped" if c.skipped else "passed" if c.ok else "failed"] += 1
                if c.ok and c.warning:  # passed, with something to report
                    d["warned"] = d.get("warned", 0) + 1
        refused = {
            t.plan.index
            for t in ran
            for c in t.checks
            if c.name == "corruption_detected" and c.ok and c.message.startswith("refused")
        }
        lost = sum(
            max(0, n - t.applied.get(k, 0))
            for t in ran
            if t.plan.index not in refused
            for k, n in self.golden.effects.items()
        )  # a clear refusal loses nothing
        dup = sum(
            max(0, t.applied.get(k, 0) - n) for t in ran for k, n in self.golden.effects.items()
        )
        resumes = [r for t in ran for r in t.resume_times]
        fams = self.families()
        return {
            "families": {k: dict(v) for k, v in fams.items()},
            "exercised": sum(d["exercised"] for d in fams.values()),
            "not_exercised": sum(d["not_exercised"] for d in fams.values()),
            "unexercised": self.unexercised(),
            "name": self.name,
            "seed": self.seed,
            "ok": self.ok,
            "incomplete": bool(self.incomplete),
            "stopped": self.incomplete,
            "interrupted_by": self.interrupted_by or None,
            "not_run": len(self.not_run),
            "trials": len(self.trials) + len(self.not_run),
            "ran": len(ran),
            "passed": sum(t.status == "passed" for t in ran),
            "failed": len(self.failures),
            "skipped": len(self.trials) - len(ran),
            "skip_reasons": sorted({t.skipped for t in self.trials if t.skipped}),
            "faults_by_kind": dict(sorted(by_kind.items())),
            "checks": checks,
            "duplicate_effects": dup,
            "lost_effects": lost,
            "dedup_hits": sum(t.duplicates for t in ran),
            "median_resume_ms": round(statistics.median(resumes) * 1000, 1) if resumes else None,
            "golden": {
                "steps": self.golden.steps,
                "events": len(self.golden.events),
                "duration_s": round(self.golden.duration, 3),
            },
            "duration_s": round(self.duration, 3),
            "outside_writes": {
                "tmp_bytes": sum(t.tmp_bytes for t in ran),
                "tmp_bytes_max_trial": max((t.tmp_bytes for t in ran), default=0),
                # one line a path (each trial's entry says its size then)
                "system_tmp": sorted({o.rsplit(" (", 1)[0] for t in ran for o in t.outside_writes})[
                    :20
                ],
                "trials_writing_system_tmp": sum(1 for t in ran if t.outside_writes),
            },
            "evidence": {
                "bytes": sum(t.evidence_bytes for t in self.trials),
                "trials_cut": sum(1 for t in self.trials if t.evidence_omitted),
                "omitted": [
                    f"trial {t.plan.index}: {m}" for t in self.trials for m in t.evidence_omitted
                ][:10],
            },
            "ledger_refused": dict(
                sorted(sum((Counter(t.ledger_refused) for t in ran), Counter()).items())
            ),
            "failures": [
                {
                    "index": t.plan.index,
                    "plan": t.plan.describe(),
                    "landed": t.landed(),
                    "root_cause": str(t.root_cause) if t.root_cause else "",
                    "checks": [str(c) for c in t.failed],
                    "folder": t.folder,
                    "replay": f"crashpoint replay {t.folder}",
                }
                for t in self.failures
            ],
            # trials that passed with a warning (e.g. LLM calls re-billed): shown, not failed
            "warned": sum(1 for t in ran if t.ok and t.warnings),
            "warnings": [
                {
                    "index": t.plan.index,
                    "plan": t.plan.describe(),
                    "checks": [str(c) for c in t.warnings],
                    "folder": t.folder,
                }
                for t in ran
                if t.ok and t.warnings
            ][:20],
        }

    def write_reports(self) -> dict[str, str]:
        """summary.json, verdicts.json and junit.xml in the report folder; return their paths.

        The folder is created 0700 without following a link, and refused if another user owns
        it or can write in it; each file is written whole (temp + rename), 0600."""
        secure_dir(self.report_dir)
        paths = {
            "json": os.path.join(self.report_dir, "summary.json"),
            "verdicts": os.path.join(self.report_dir, "verdicts.json"),
            "junit": os.path.join(self.report_dir, "junit.xml"),
        }
        write_file(
            paths["json"],
            dumps({**self.summary(), "trial_results": [t.to_json() for t in self.trials]}),
        )
        write_file(paths["verdicts"], dumps([t.verdict() for t in self.trials]))
        write_file(
            paths["junit"], ET.tostring(self.junit(), encoding="utf-8", xml_declaration=True)
        )
        return paths

    def junit(self) -> ET.Element:
        unexercised = self.unexercised()
        suite = ET.Element(
            "testsuite",
            name=f"crashpoint.{self.name}",
            tests=str(len(self.trials) + len(self.not_run) + len(unexercised)),
            failures=str(len(self.failures) + len(unexercised)),
            skipped=str(
                sum(1 for t in self.trials if t.status in ("skipped", "not exercised"))
                + len(self.not_run)
            ),
            time=f"{self.duration:.3f}",
        )
        props = ET.SubElement(suite, "properties")
        for name, d in self.families().items():
            ET.SubElement(
                props,
                "property",
                name=f"exercised[{name}]",
                value=f"{d['exercised']}/{d['planned']}",
            )
        for msg in unexercised:  # the family's verdict: a failure of its own
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"crashpoint.{self.name}",
                name=f"family {msg.split(':', 1)[0].removeprefix('family ')} exercised",
                time="0.000",
            )
            ET.SubElement(case, "failure", message="no trial was exercised").text = msg
        for t in self.trials:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"crashpoint.{self.name}",
                name=f"trial-{t.plan.index:04d} {t.plan.describe()}",
                time=f"{t.duration:.3f}",
            )
            if t.skipped:
                ET.SubElement(case, "skipped", message=t.skipped)
            elif not t.ok:
                root = t.root_cause
                fail = ET.SubElement(
                    case,
                    "failure",
                    message=root.name if root else "; ".join(c.name for c in t.failed),
                )
                fail.text = (
                    f"landed: {t.landed()}\n"
                    + "\n".join(str(c) for c in t.failed)
                    + f"\nreplay: crashpoint replay {t.folder}"
                )
            elif not t.exercised:
                ET.SubElement(case, "skipped", message=f"not exercised: {t.landed()}")
        for p in self.not_run:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=f"crashpoint.{self.name}",
                name=f"trial-{p.index:04d} {p.describe()}",
                time="0.000",
            )
            ET.SubElement(case, "skipped", message=f"not run: {self.incomplete}")
        return suite


def _reason(why: str) -> str:
    """A not-fired reason without the attempt's own numbers, so like reasons group."""
    return re.sub(r"\d+\.\d+s", "Ns", re.sub(r"after \d+ event\(s\)", "after N event(s)", why))[
        :300
    ]


ProgressFn = Callable[[int, int, int, TrialResult], None]


@dataclass
class Campaign:
    """Run ``families`` against ``agent``; see the module docstring."""

    agent: AgentSpec
    families: list[FaultFamily]
    report_dir: str
    name: str = "campaign"
    trials: int = 50
    seed: int = 0
    restarts: int = 3
    mode: str | None = None  # None (as the families say) | systematic | random
    expect: Expect = field(default_factory=Expect)
    shard: tuple[int, int] | None = None  # (i, n), 1-based
    keep_passing: bool = False
    extra_checks: dict[str, Callable[[TrialFacts], CheckResult]] = field(default_factory=dict)
    launcher: Any = None
    plan_hook: Callable[[FaultFamily, Golden, int, int], Plan | None] | None = None
    #: seconds for the whole campaign (golden run and trials); math.inf: no limit. Past it the
    #: running attempt is stopped, the rest is not run, and the campaign fails
    budget: float = DEFAULT_BUDGET
    evidence_per_trial: int = EVIDENCE_PER_TRIAL  # bytes a kept trial folder may hold
    evidence_per_campaign: int = EVIDENCE_PER_CAMPAIGN  # bytes all kept trial folders may hold
    source: str = ""  # the scenario file (runner.json names it: replay reads agent.env there)
    #: what the golden run must record besides what these families need (``fileops``,
    #: ``writes``): a scenario file's families share one golden run
    record: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.report_dir = os.path.abspath(self.report_dir)

    @property
    def needs(self) -> frozenset[str]:
        """What the golden run must record (see :attr:`FaultFamily.needs`)."""
        return self.record.union(*(f.needs for f in self.families))

    def runner(self) -> TrialRunner:
        return TrialRunner(
            self.agent,
            os.path.join(self.report_dir, "trials"),
            restarts=self.restarts,
            expect=self.expect,
            keep_passing=self.keep_passing,
            extra_checks=self.extra_checks,
            launcher=self.launcher,
            evidence_per_trial=self.evidence_per_trial,
            evidence_per_campaign=self.evidence_per_campaign,
            source=self.source,
        )

    def plans(self, golden: Golden) -> list[Plan]:
        """Every plan of the campaign, in index order (before sharding).

        Raises :class:`NoBoundaries` when the golden run reported no event and no file
        operation: a campaign would then test nothing."""
        if not golden.events and not golden.fileops and not golden.plog.get("ops"):
            raise NoBoundaries(
                f"campaign {self.name!r}: the agent's golden run reported no event (no step, "
                f"no effect) and no file operation was recorded, so there is no boundary to "
                f"crash it at and nothing to judge a trial by. {ADD_PROBE_CALLS}."
            )
        plans: list[Plan] = []
        systematic = [
            f
            for f in self.families
            if self.mode != "random"
            and (
                f.systematic
                or (
                    self.mode == "systematic"
                    and len(f.chain) == 1
                    and (
                        f.chain[0][0] in ("power_loss", "network")
                        or (
                            f.chain[0][0] == "kill"
                            and dict(f.chain[0][1]).get("at", "random") == "random"
                        )
                    )
                )
            )
        ]
        randoms = [f for f in self.families if f not in systematic]
        for fam in systematic:
            sweep = fam.systematic or fam.chain[0][0] in ("power_loss", "network")
            for b in range(fam.points(golden) if sweep else len(golden.boundaries())):
                plans.append(self._plan(fam, golden, len(plans), boundary=b))
        if randoms:
            explicit = sum(f.count or 0 for f in randoms)
            shared = [f for f in randoms if f.count is None]
            left = max(0, self.trials - explicit)
            for j, fam in enumerate(randoms):
                n = (
                    fam.count
                    if fam.count is not None
                    else left // len(shared) + (1 if j < left % len(shared) else 0)
                )
                for _ in range(n):
                    plans.append(self._plan(fam, golden, len(plans)))
        return plans

    def _plan(
        self, fam: FaultFamily, golden: Golden, index: int, boundary: int | None = None
    ) -> Plan:
        if self.plan_hook is not None:
            custom = self.plan_hook(fam, golden, self.seed, index)
            if custom is not None:
                return custom
        return plan_for(fam, golden, self.seed, index, boundary=boundary, mode=self.mode)

    def selected(self, plans: list[Plan]) -> list[Plan]:
        if self.shard is None:
            return plans
        i, n = self.shard
        return [p for p in plans if p.index % n == i - 1]

    def run(
        self,
        progress: ProgressFn | None = None,
        only: Sequence[int] | None = None,
        golden: Golden | None = None,
    ) -> CampaignResult:
        """Run the golden run (unless given) and every selected trial, in index order.

        Within :attr:`budget` (else the campaign stops and fails, see :meth:`_over_budget`).
        Interrupted (SIGINT/SIGTERM, Ctrl-C), it kills what runs, removes its temporary
        folders, writes its reports marked incomplete and raises :class:`CampaignInterrupted`.
        """
        t0 = time.monotonic()
        runner = self.runner()
        if math.isfinite(self.budget):
            runner.deadline = t0 + self.budget
        results: list[TrialResult] = []
        plans: list[Plan] = []
        stopped = ""
        try:
            try:
                needs = self.needs
                if golden is None or (needs and not golden.recorded_by):
                    golden = runner.golden(needs)
                plans = self.selected(self.plans(golden))
                if only is not None:
                    plans = [p for p in plans if p.index in set(only)]
                failures = 0
                for k, plan in enumerate(plans):
                    if runner.deadline is not None and time.monotonic() >= runner.deadline:
                        raise BudgetExceeded("")
                    res = runner.run(plan, golden)
                    failures += 0 if res.ok else 1
                    results.append(res)
                    if progress is not None:
                        progress(k + 1, len(plans), failures, res)
            except BudgetExceeded as exc:
                stopped = self._over_budget(str(exc), len(results), len(plans))
            except KeyboardInterrupt as exc:
                with shielded():
                    sig = received()
                    by = signal_name(sig) if sig is not None else "SIGINT"
                    where = (
                        f"after {len(results)} of {len(plans)} trials"
                        if plans
                        else "during the golden run"
                    )
                    partial = self._result(
                        golden, results, plans, t0, f"interrupted by {by} {where}", by
                    )
                    with contextlib.suppress(Exception):
                        partial.write_reports()
                raise CampaignInterrupted(partial) from exc
        finally:
            with shielded():
                runner.close()
        return self._result(golden, results, plans, t0, stopped, "")

    def _result(
        self,
        golden: Golden | None,
        results: list[TrialResult],
        plans: list[Plan],
        t0: float,
        incomplete: str,
        interrupted_by: str,
    ) -> CampaignResult:
        return CampaignResult(
            self.name,
            golden or Golden([], [], Counter(), b"", 0.0),
            results,
            time.monotonic() - t0,
            self.seed,
            self.report_dir,
            incomplete,
            interrupted_by,
            plans[len(results) :] if incomplete else [],
        )

    def _over_budget(self, detail: str, ran: int, planned: int) -> str:
        what = f"{ran} of {planned} trials ran" if planned else "no trial ran"
        left = planned - ran
        return (
            f"the campaign's time budget of {format_duration(self.budget)} ran out: {what}"
            f"{f' ({detail})' if detail else ''}"
            f"{f', {left} not run' if left else ''}. A campaign stopped by its budget "
            f"fails: {BUDGET_HOW}"
        )


def replay(folder: str) -> TrialResult:
    """Re-run exactly the trial whose evidence is in ``folder`` (same plan, same golden)."""
    for name in ("plan.json", "runner.json", "golden.json"):
        if not os.path.isfile(os.path.join(folder, name)):
            raise FileNotFoundError(
                f"{folder} is not a crashpoint trial folder: {name} is missing (a failing "
                "trial's folder holds plan.json, runner.json, golden.json and REPLAY)"
            )
    plan = Plan.from_json(load_json(os.path.join(folder, "plan.json")))
    agent, golden, runner_cfg = replay_inputs(folder)  # agent.env values are redacted there
    out = os.path.join(folder, "replays", time.strftime("%Y%m%dT%H%M%S"))
    with TrialRunner(
        agent,
        out,
        restarts=int(runner_cfg["restarts"]),
        expect=Expect.from_json(runner_cfg["expect"]),
        keep_passing=True,
        source=str(runner_cfg.get("scenario") or ""),
    ) as runner:
        return runner.run(plan, golden)
