"""Fault families (Contract 3 ``faults:``): each item of a scenario's list, validated.

A family is one fault kind with its options (``{kill: {at: every-boundary}}``), or a chain of
them applied in order within one trial (``[disk_full: {capacity: 8KiB}, kill: {at: random}]``).
:func:`family_from_spec` checks every option (type, range, known names) and raises
:class:`~crashpoint.errors.FaultSpecError` saying which fault and option, and why; a
:class:`FaultFamily` then knows whether it sweeps the golden run's points (systematic) or draws
trials at random, how many points a sweep has, and what the golden run must record for it.
The plans themselves are drawn in :mod:`._plans`.
"""

from __future__ import annotations

import math
import os
import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crashpoint._failpoints import FAILPOINTS
from crashpoint._placeholders import fields, fill
from crashpoint._units import parse_duration, parse_size
from crashpoint.errors import FaultSpecError, InvalidArgument, PlaceholderError, UnitError
from crashpoint.faults import CORRUPTIONS, POWER_MODELS, disk_capabilities
from crashpoint.harness._spec import _power
from crashpoint.harness._spec._events import call_of, size_text
from crashpoint.harness._spec._model import Boundary, Golden
from crashpoint.harness._spec._network import stream_fail
from crashpoint.harness._spec._upgrade import REPLAY_KINDS, check_replay_options

__all__ = [
    "ADD_PROBE_CALLS",
    "BACKING_AT",
    "BACKING_DO",
    "BUDGET_HOW",
    "CORRUPT_ROOTS",
    "DEFAULT_BUDGET",
    "DEFAULT_WITHIN",
    "DISK_MECHANISMS",
    "EXIT_AT",
    "FAMILY_KINDS",
    "FAMILY_OPTIONS",
    "KILL_AT",
    "KILL_FAILPOINTS",
    "MAX_FILEOP",
    "NET_FAILS",
    "PERSISTENT_KINDS",
    "FaultFamily",
    "exit_points",
    "family_from_spec",
    "memory_points",
    "net_points",
    "net_requests",
    "parse_budget",
    "step_points",
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
    "upgrade",
    "always_replay",
    "backing",
    "exit",
    "memory",
)
#: The options each fault family accepts (``count`` everywhere).
FAMILY_OPTIONS: dict[str, tuple[str, ...]] = {
    "kill": ("at", "count", "names", "max", "within", "replay"),
    "signal": ("sig", "grace", "pause", "count", "within"),
    "corrupt": ("how", "path", "count", "aim"),
    "disk_full": ("capacity", "mechanism", "nth", "count"),
    "resumers": ("processes", "stagger", "hosts", "count"),
    "hang": ("count",),
    "power_loss": ("model", "count"),
    "network": ("call", "fail", "nth", "times", "count"),
    "upgrade": ("to", "at", "count", "replay"),
    "always_replay": ("at", "count", "replay"),
    "backing": (
        "service",
        "do",
        "at",
        "within",
        "for",
        "path",
        "lock",
        "how",
        "shutdown",
        "then",
        "count",
    ),
    "exit": ("code", "at", "names", "count"),
    "memory": ("limit", "at", "count"),
}
#: memory: where the attempt's memory limit is set: from its start, or squeezed at a
#: boundary of the golden run (before the agent is answered there), each in turn or one drawn
MEMORY_AT = ("start", "random", "every-boundary")
#: memory: the smallest and largest limit (bytes)
MIN_MEMORY, MAX_MEMORY = 1 << 20, 1 << 40
#: exit: where the agent exits (a probe event of the golden run, each in turn or one drawn at
#: random: the probe's reply carries the code; or one of the reference library's failpoints,
#: armed to ``exit(CODE)``); the code is 1 unless ``code`` says
EXIT_AT = ("random", "every-boundary", "failpoint")
#: backing: what each service's outage can be (the first is the default)
BACKING_DO: dict[str, tuple[str, ...]] = {
    "sqlite": ("lock",),
    "postgres": ("restart", "partition"),
}
#: backing: where the outage begins: a step drawn at random, each step of the golden run in
#: turn, or an instant after the attempt's first event
BACKING_AT = ("random", "every-step", "time")
#: backing: how long an outage lasts at most (``for``)
MAX_OUTAGE = 600.0
DISK_MECHANISMS = ("auto", "tmpfs", "rlimit", "failpoint")
#: The kinds that take ``every_attempt: true`` (a persistent fault: it hits every attempt of
#: the trial, not only the first; see :func:`crashpoint.harness._spec._plans.persist`). A
#: corruption, a full disk, a power cut or two resumers change what the next attempt starts
#: from, so repeating them is not "the same fault again"; ``kill: {at: recovery}`` already
#: kills twice.
PERSISTENT_KINDS = ("kill", "signal", "hang", "network", "exit", "memory", "backing")
KILL_AT = ("every-boundary", "random", "time", "failpoint", "fileop", "recovery")
KILL_FAILPOINTS = (
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
#: The kills a trial may replay from the golden run's recorded state (``kill.replay``).
REPLAYED_KILLS = ("fileop", "every-boundary", "random", "recovery")
MAX_NTH = 1_000  # disk_full: {nth: N}
MAX_CAPACITY = 1 << 30  # disk_full: {capacity: ...}: 1 GiB (a tmpfs lives in memory)
MAX_SIGNAL_WAIT = 600.0  # signal: {grace, pause}: 10 minutes
MAX_NET_NTH = 10_000  # network: {nth: N}
MAX_NET_TIMES = 100  # network: {times: N}
#: resumers: {processes: k}: how many attempts of one run start at once (2: the default)
MIN_RESUMERS, MAX_RESUMERS = 2, 32
#: resumers: {stagger: N}: the highest event number a resumer may be held for
MAX_STAGGER = 100_000
#: network: how a call can fail (a status: answered with that HTTP status)
NET_FAILS: tuple[str | int, ...] = ("reset", "timeout", 500, 502, 503, 429)
#: network: a call is ``METHOD /path`` (an HTTP stand-in request), ``llm`` or ``mail``
_NET_CALL = re.compile(r"^(?:[A-Z]{1,16} /[^\s]*|llm|mail|mcp [A-Za-z0-9_.-]{1,128})$")
#: kill at time / signal: instants are drawn in [0, within) seconds after the attempt's first
#: event (a function of the seed alone, never of a measured duration)
DEFAULT_WITHIN = 1.0
MAX_WITHIN = 3600.0


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


def _corrupt_path(
    path: Any, err: Callable[[str], FaultSpecError], what: str = "corrupt.path"
) -> str:
    """A ``corrupt`` path (or another fault's, named ``what``) that can only reach the trial's
    own folders: it starts with ``{state_dir}`` or ``{workdir}``, then ``/`` and a glob
    without ``..``."""
    how_to = (
        f"; a {what.partition('.')[0]} fault touches only the trial's own folders: write e.g. "
        '"{state_dir}/**" or "{workdir}/cache/*.json"'
    )
    if not isinstance(path, str) or not path:
        raise err(f"{what} must be a glob string, got {path!r}{how_to}")
    if "\0" in path:
        raise err(f"{what} contains a NUL byte: {path!r}")
    try:
        names = fields(path, CORRUPT_ROOTS)
    except PlaceholderError as exc:
        raise err(f"{what}: {exc}") from None
    first = next(iter(string.Formatter().parse(path)))
    if first[0] != "" or first[1] not in CORRUPT_ROOTS or len(names) != 1:
        raise err(
            f"{what} must start with {{state_dir}} or {{workdir}} and name no "
            f"other placeholder, got {path!r}{how_to}"
        )
    rest = fill(path, dict.fromkeys(CORRUPT_ROOTS, ""))
    if rest and not rest.startswith("/"):
        raise err(
            f"{what}: {path!r} names a sibling of {{{first[1]}}}, not a path "
            f"inside it (a '/' must follow the placeholder){how_to}"
        )
    if os.pardir in rest.split("/"):
        raise err(f"{what}: {path!r} climbs out with '..'{how_to}")
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
    kind: str,
    opts: dict[str, Any],
    last: bool,
    err: Callable[[str, str], FaultSpecError],
    chained: bool = False,
) -> None:
    """Validate (and normalise, in place) the options of one fault of kind ``kind``."""

    def at(option: str) -> Callable[[str], FaultSpecError]:
        return lambda message: err(message, option)

    def text(option: str, allowed: tuple[str, ...], default: str) -> str:
        v = opts.get(option, default)
        if not isinstance(v, str) or v not in allowed:
            raise err(f"{kind}.{option} must be one of {', '.join(allowed)}, got {v!r}", option)
        return v

    if kind in REPLAY_KINDS:
        check_replay_options(kind, opts, not last or chained, err)
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
        if "replay" in opts:
            if mode not in REPLAYED_KILLS:
                raise err(
                    f"kill.replay goes with at: {', '.join(REPLAYED_KILLS)} (a kill "
                    "replayed from the golden run's recorded state), not at: " + mode,
                    "replay",
                )
            if not isinstance(opts["replay"], bool):
                raise err(
                    f"kill.replay must be true or false, got {opts['replay']!r} (false: "
                    "re-run every kill for real)",
                    "replay",
                )
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
    elif kind == "backing":
        _check_backing(opts, at)
    elif kind == "exit":
        mode = text("at", EXIT_AT, "random")
        opts["code"] = _whole(opts.get("code", 1), 1, 255, "exit.code", err=at("code"))
        if "names" in opts:
            if mode != "failpoint":
                raise err("exit.names goes with at: failpoint (it narrows the failpoints)", "names")
            names = opts["names"]
            names = [names] if isinstance(names, str) else names
            bad = [n for n in names if not isinstance(n, str) or n not in FAILPOINTS]
            if not isinstance(names, list) or not names or bad:
                raise err(
                    f"exit.names must be a non-empty list of failpoint names, got "
                    f"{opts['names']!r}; known: {', '.join(FAILPOINTS)}",
                    "names",
                )
            opts["names"] = tuple(names)
    elif kind == "memory":
        text("at", MEMORY_AT, "start")
        if "limit" not in opts:
            raise err(
                "memory.limit is required: the attempt's memory limit, e.g. {memory: {limit: "
                "64MiB}} (the kernel OOM-kills the agent when it allocates past it)",
                "limit",
            )
        try:
            lim = parse_size(opts["limit"], what="memory.limit")
        except UnitError as exc:
            raise err(str(exc), "limit") from None
        if not MIN_MEMORY <= lim <= MAX_MEMORY:
            raise err(f"memory.limit must be from 1MiB to 1TiB, got {opts['limit']!r}", "limit")
        opts["limit"] = lim
    elif kind == "resumers":
        if "processes" in opts:
            _whole(
                opts["processes"],
                MIN_RESUMERS,
                MAX_RESUMERS,
                "resumers.processes",
                err=at("processes"),
                cap=" attempts started at once",
            )
        if "hosts" in opts and not isinstance(opts["hosts"], bool):
            raise err(
                f"resumers.hosts must be true or false, got {opts['hosts']!r} (true: each "
                "resumer in a pid and UTS namespace of its own, as on a host of its own)",
                "hosts",
            )
        if "stagger" in opts:
            opts["stagger"] = _stagger(
                opts["stagger"], int(opts.get("processes", MIN_RESUMERS)), at("stagger")
            )


def _stagger(v: Any, k: int, err: Callable[[str], FaultSpecError]) -> tuple[int, ...]:
    """``resumers.stagger``: the boundary (its event number, from 1) the previous resumer must
    reach before the next one is released, one number for all or a list of ``k - 1``."""
    how = (
        "resumers.stagger is the event (from 1) the previous resumer must reach before the next "
        "is released: a whole number (e.g. stagger: 3), or a list of one per resumer after the "
        f"first ({k - 1} for processes: {k})"
    )
    vs = v if isinstance(v, list) else [v] * (k - 1)
    if len(vs) != k - 1:
        raise err(f"{how}; got {len(vs)} number(s)")
    for x in vs:
        if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_STAGGER:
            raise err(f"{how}, each from 1 to {MAX_STAGGER}; got {v!r}")
    return tuple(vs)


def _check_backing(
    opts: dict[str, Any], at: Callable[[str], Callable[[str], FaultSpecError]]
) -> None:
    """``backing`` options: ``service`` (sqlite|postgres, required), ``do`` (what its outage
    is), ``at``/``within`` (where it begins), ``for`` (how long), and each outage's own:
    ``path``/``lock`` (sqlite), ``how`` (partition), ``shutdown`` (restart); ``then``."""
    service = opts.get("service")
    if service not in BACKING_DO:
        raise at("service")(
            f"backing.service must be sqlite (a second connection holds the write lock of the "
            f"agent's database) or postgres (the harness's PostgreSQL, which the agent gets "
            f"as {{postgres}}), got {service!r}"
        )
    does = BACKING_DO[service]
    do = opts.setdefault("do", does[0])
    if do not in does:
        raise at("do")(f"backing.do for service {service} must be {' or '.join(does)}, got {do!r}")
    own = {"path": "sqlite", "lock": "sqlite", "how": "partition", "shutdown": "restart"}
    for option, goes in own.items():
        if option in opts and goes not in (service, do):
            raise at(option)(
                f"backing.{option} goes with "
                + ("service: sqlite" if goes == "sqlite" else f"service: postgres, do: {goes}")
            )
    choices = {
        "at": BACKING_AT,
        "lock": ("immediate", "exclusive"),
        "how": ("reset", "blackhole"),
        "shutdown": ("immediate", "fast"),
        "then": ("kill", "continue"),
    }
    for option, allowed in choices.items():
        if option in opts and opts[option] not in allowed:
            raise at(option)(
                f"backing.{option} must be one of {', '.join(allowed)}, got {opts[option]!r}"
            )
    if "within" in opts:
        if opts.get("at") != "time":
            raise at("within")(
                "backing.within goes with at: time (the window after the first event in which "
                "the instant is drawn)"
            )
        opts["within"] = _within(opts["within"], "backing.within", at("within"))
    if "for" in opts:
        try:
            secs = parse_duration(opts["for"], what="backing.for")
        except UnitError as exc:
            raise at("for")(str(exc)) from None
        if not 0 < secs <= MAX_OUTAGE:
            raise at("for")(
                f"backing.for (how long the outage lasts) must be more than 0 and at most "
                f"{MAX_OUTAGE:g}s, got {opts['for']!r}"
            )
        opts["for"] = secs
    if "path" in opts:
        _corrupt_path(opts["path"], at("path"), "backing.path")


def _check_network(
    opts: dict[str, Any], at: Callable[[str], Callable[[str], FaultSpecError]]
) -> None:
    """``network`` options: ``call`` (``METHOD /path``, ``llm``, ``mail`` or ``any``),
    ``fail`` (one of :data:`NET_FAILS` or a list), ``nth``, ``times``."""
    given = "call" in opts
    call = opts.get("call", "any")
    if not isinstance(call, str) or not (call == "any" or _NET_CALL.match(call)):
        raise at("call")(
            f"network.call must be a request as the ledger names it: 'METHOD /path' (e.g. "
            f'"POST /hook", the path under {{http}}), llm, mail, "mcp TOOL" (a tools/call of '
            f"the MCP stand-in), or any (one drawn from the golden run's network calls), "
            f"got {call!r}"
        )
    opts["call"] = call
    fails = opts.get("fail", "timeout")
    one = isinstance(fails, (str, int, Mapping)) and not isinstance(fails, bool)
    fails = [fails] if one else fails
    allowed = ", ".join(map(str, NET_FAILS))
    if not isinstance(fails, list) or not fails:
        raise at("fail")(
            f"network.fail must be one of {allowed} or a non-empty list of them, "
            f"got {opts.get('fail')!r}"
        )
    norm: list[str | int] = []
    streams = False
    for v in fails:
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        try:  # a stream failure of the LLM stand-in: {cut: 3}, {stall: 5s}, {reset_after: 2}
            sv = stream_fail(v)
        except InvalidArgument as exc:
            raise at("fail")(f"network.fail: {exc}") from None
        if sv is not None:
            v, streams = sv, True
        elif isinstance(v, bool) or v not in NET_FAILS:
            raise at("fail")(
                f"network.fail: unknown failure {v!r}; use {allowed} (reset: "
                f"the connection is closed unanswered; timeout: the request is "
                f"applied and no reply comes; a status: answered before "
                f"applying), or a stream failure of the LLM stand-in's streamed replies: "
                f"{{cut: N}}, {{reset_after: N}}, {{stall: 5s, after: N}} (N: events sent)"
            )
        if v not in norm:
            norm.append(v)
    opts["fail"] = tuple(norm)
    if streams and not given:
        opts["call"] = "llm"
    if streams and opts["call"] != "llm":
        raise at("call")(
            f"network.fail: a stream failure (cut, stall, reset_after) cuts a streamed reply "
            f"of the LLM stand-in: give call: llm (or leave call out), not {opts['call']!r}"
        )
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
            if kind == "resumers" and o.get("processes", MIN_RESUMERS) != MIN_RESUMERS:
                tag = f"processes={o['processes']}"
            if kind == "resumers" and o.get("stagger"):
                stag = "stagger=" + ",".join(map(str, dict.fromkeys(o["stagger"])))
                tag = f"{tag}:{stag}" if tag else stag
            if kind == "resumers" and o.get("hosts"):
                tag = f"{tag}:hosts" if tag else "hosts"
            if kind == "backing":
                tag = f"{o.get('service')}:{o.get('do')}" + (
                    f"@{o['at']}" if o.get("at", "random") != "random" else ""
                )
            if kind == "exit":
                tag = f"{o.get('at', 'random')}:{o.get('code', 1)}"
            if kind == "memory":
                tag = f"{o.get('at', 'start')}:{size_text(int(o['limit'])).replace(' ', '')}"
            if isinstance(tag, (list, tuple)):
                tag = "|".join(map(str, tag))
            name = f"{kind}@{tag}" if tag else kind
            parts.append(f"{name}@every_attempt" if o.get("every_attempt") else name)
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
        if kind in REPLAY_KINDS:
            return bool(o.get("at", "every-boundary") == "every-boundary")
        if kind == "backing":
            return o.get("at") == "every-step"
        if kind in ("exit", "memory"):
            return o.get("at") == "every-boundary"
        return (
            kind == "disk_full"
            and "capacity" not in o
            and "count" not in o
            and o.get("mechanism", "auto") != "failpoint"
        )

    def prepare(self, golden: Golden, deadline: float | None = None) -> str:
        """Plan, within ``deadline`` (a ``time.monotonic()`` time), what this family's
        trials are drawn from when that is costly: the crash states of a power_loss family
        (planned once per golden run). Returns why planning stopped early, or ""."""
        kind, opts = self.chain[0]
        if kind != "power_loss":
            return ""
        model = str(dict(opts).get("model", "posix"))
        _power.states(golden, model, deadline)
        return _power.stopped(golden, model)

    def points(self, golden: Golden) -> int:
        """How many trials a systematic sweep of this family has over ``golden``."""
        kind, opts = self.chain[0]
        o = dict(opts)
        if kind == "kill" and o.get("at") == "fileop":
            return max(1, len(golden.fileops[: int(o.get("max", MAX_FILEOP))]))
        if kind == "power_loss":
            return _power.points(golden, str(o.get("model", "posix")))
        if kind == "network":
            calls, fails = net_points(o, golden)
            return len(calls) * len(fails)
        if kind == "backing":
            return len(step_points(golden))
        if kind == "exit":
            return len(exit_points(golden))
        if kind == "memory":
            return len(memory_points(golden))
        if kind == "disk_full":
            mech = o.get("mechanism", "auto")
            if mech == "auto":
                caps = disk_capabilities()
                mech = "tmpfs" if caps.tmpfs else "rlimit"
            return max(1, len(golden.writes.get(mech, [])))
        return len(golden.boundaries())

    @property
    def needs(self) -> frozenset[str]:
        """What the golden run must record for this family: ``fileops`` (and
        ``killreplay``: what replays a kill before each, unless ``replay: false``),
        ``writes``, ``plog``."""
        out = set()
        for kind, opts in self.chain:
            o = dict(opts)
            if kind == "kill" and o.get("at") == "fileop":
                out.add("fileops")
            if kind in REPLAY_KINDS and o.get("replay", True):
                out.add("killreplay")  # attempt 1's kill (under version A) is a kill's
            if (
                kind == "kill"
                and o.get("at", "random") in REPLAYED_KILLS
                and o.get("replay", True)
                and not o.get("every_attempt")  # a persistent kill is real in every attempt
            ):
                out.add("killreplay")
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
        every = _every_attempt(kind, opts, j == len(items) - 1, err)
        unknown = sorted(map(str, set(opts) - set(FAMILY_OPTIONS[kind])))
        if unknown:
            raise err(
                f"{kind}: unknown option(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(FAMILY_OPTIONS[kind])}"
                + (", every_attempt" if kind in PERSISTENT_KINDS else ""),
                unknown[0],
            )
        _check_options(kind, opts, j == len(items) - 1, err, chained)
        if every:
            opts["every_attempt"] = True
        chain.append(
            (
                kind,
                tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in opts.items())),
            )
        )
    return FaultFamily(tuple(chain))


def _every_attempt(
    kind: str, opts: dict[str, Any], last: bool, err: Callable[[str, str], FaultSpecError]
) -> bool:
    """Take ``every_attempt`` out of ``opts`` (any persistent kind takes it): True when set."""
    if "every_attempt" not in opts:
        return False
    v = opts.pop("every_attempt")
    if not isinstance(v, bool):
        raise err(f"{kind}.every_attempt must be true or false, got {v!r}", "every_attempt")
    if not v:
        return False
    if kind not in PERSISTENT_KINDS:
        raise err(
            f"{kind}.every_attempt: only {', '.join(PERSISTENT_KINDS)} can hit every attempt "
            f"(a {kind} changes what the next attempt starts from, so it is not the same "
            "fault again); make the persistent fault a kill, signal, hang, network, exit, "
            "memory or backing fault",
            "every_attempt",
        )
    if kind == "kill" and opts.get("at") == "recovery":
        raise err(
            "kill.every_attempt does not go with at: recovery (which already kills two "
            "attempts); use at: every-boundary or random with every_attempt: true",
            "every_attempt",
        )
    if not last:
        raise err(
            f"{kind}.every_attempt: put the persistent fault last in a chain (it hits its "
            "attempt and every one after it)",
            "every_attempt",
        )
    return True


#: How to give a campaign boundaries (the message of :class:`NoBoundaries`).
ADD_PROBE_CALLS = (
    "Add probe calls to the agent: `from crashpoint import probe`, then "
    "probe.step_started(name) / probe.step_completed(name) around each step and "
    "probe.effect(kind, payload, key=...) for each side effect (the reference library "
    "crashpoint.checkpoint calls them for you; other languages speak the wire protocol, or "
    "POST to $CRASHPOINT_LEDGER_HTTP: see docs/reference/wire-protocol.md)"
)


def step_points(golden: Golden) -> list[int]:
    """Where a ``backing`` outage can begin: the golden run's ``step_started`` events (their
    indices), or every event of an agent that names no step."""
    steps = [i for i, e in enumerate(golden.events) if e["op"] == "step_started"]
    return steps or list(range(len(golden.events)))


#: The events an ``exit`` fault can land on: what an agent sends through the probe (its reply
#: can carry the exit code), not a stand-in service's request (an HTTP reply cannot).
EXIT_OPS = ("step_started", "step_completed", "effect")


def exit_points(golden: Golden) -> list[Boundary]:
    """Where an ``exit`` fault can land: the golden run's boundaries at probe events (steps,
    effects sent through the probe's socket; not HTTP, SMTP or model requests)."""
    return [
        b
        for b in golden.boundaries()
        if golden.events[b.index]["op"] in EXIT_OPS and not golden.events[b.index].get("via")
    ]


def memory_points(golden: Golden) -> list[Boundary]:
    """Where a ``memory`` fault can squeeze the limit: before each event of the golden run
    (the agent is answered once the limit is in place)."""
    return [b for b in golden.boundaries() if b.phase == "before"]


def net_requests(golden: Golden) -> list[tuple[str, int]]:
    """The golden run's requests to the stand-in services, in order: (call, nth), the call as
    the ledger names it (``POST /hook``, ``llm``, ``mail``) and its occurrence from 1."""
    seen: Counter[str] = Counter()
    out = []
    for ev in golden.events:
        call = call_of(ev)
        if call:
            seen[call] += 1
            out.append((call, seen[call]))
    return out


def net_points(o: Mapping[str, Any], golden: Golden) -> tuple[list[str], list[str | int]]:
    """The calls a ``network`` family fails (its own, or each distinct one of the golden run
    for ``any``; [""] when there is none) and its failures."""
    call = str(o.get("call", "any"))
    if call != "any":
        calls = [call]
    else:
        calls = list(dict.fromkeys(c for c, _n in net_requests(golden))) or [""]
    return calls, list(o.get("fail", ("timeout",)))
