"""Failures the stand-in services answer with: scripted per route, or planned as a fault.

Shared by the stand-in services (they ask :func:`pick` before handling a request), the
``services:`` section of a scenario (a scripted route may fail) and the ``network`` fault
family (its plans become :class:`NetFault` s). A *call* names a request the way the ledger
records it (:func:`crashpoint.harness._spec._events.call_of`): an HTTP effect ``"POST /hook"``,
an LLM call ``"llm"``, a mail ``"mail"``.

What each failure means for the outside world (:attr:`Failure.applied`):

- ``reset`` and ``status`` (5xx, 429) are answered *before* the service acts: nothing was
  applied, so a retry, keyed or not, is no duplicate;
- ``timeout`` of the ``network`` fault family (``applied=True``): the service *applied* the
  request (the effect happened, the LLM call was billed) and then withholds the reply until
  the client gives up. The agent cannot tell, so this is the failure that catches a retry
  without an ``Idempotency-Key``: the retry is applied again, a duplicate ``exactly_once``
  reports; a retry with the same key is deduplicated. The services mark such a request
  ``reply_lost`` and the ledger applies it (a scripted route's ``timeout`` is, by default, a
  request that never reached the service: ``applied=False``, nothing applied).

**Stream failures** (:data:`STREAM_FAILS`, the ``network`` family with ``call: llm``) hit a
*streamed* model reply (server-sent events) part-way, after ``after`` of its events
(:meth:`Failure.sent`): ``cut`` closes the connection cleanly (no ``[DONE]``, no
``finish_reason``: an HTTP client sees a body that simply ends), ``reset`` with ``after`` sends
an RST, ``stall`` sends nothing for ``pause`` seconds and then closes like a cut (a stall that
resumed would only slow the reply; the one that hurts is ended by a proxy's idle timeout). The
model was asked and answered, so the call is billed the prompt and the completion tokens
*delivered*, and recorded as ``failed`` (the agent never had the whole reply: asking again is
the retry it should make, not a re-billed duplicate). A request that was not streamed, or a
stream with no more than ``after`` events, is served whole: the fault did not fire
(:attr:`NetFault.missed` says why).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from crashpoint._units import parse_duration
from crashpoint.errors import InvalidArgument, UnitError

__all__ = [
    "HALF",
    "HOWS",
    "STREAM_FAILS",
    "Failure",
    "NetFault",
    "pick",
    "planned",
    "stream_fail",
    "stream_failure",
]

#: How a request can fail: the connection is reset (closed without a reply), the reply never
#: comes (the agent's own timeout ends the wait), or an HTTP status (5xx, 429) is answered.
HOWS = ("reset", "timeout", "status")
#: How a streamed reply can fail part-way (``network.fail`` items; see the module docstring).
STREAM_FAILS = ("cut", "stall", "reset_after")
#: ``Failure.after``: half of the stream's events (rounded down), whatever their number.
HALF = -1
MAX_STREAM_AFTER = 10_000
MAX_STALL = 600.0
DEFAULT_STALL = 2.0
_STREAM_TEXT = re.compile(
    r"^(?P<how>cut|reset_after)(?:\s+(?P<n>\d+))?$"
    r"|^stall(?:\s+(?P<pause>[^\s]+))?(?:\s+after\s+(?P<after>\d+))?$"
)


@dataclass(frozen=True)
class Failure:
    """One failed answer. ``status``/``body``/``headers`` for ``how == "status"`` (e.g. 500,
    503, 429 with ``Retry-After``); ``latency`` seconds before it (any ``how``)."""

    how: Literal["reset", "timeout", "status", "cut", "stall"]
    status: int = 0
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    latency: float = 0.0
    #: the service acted on the request, then the reply was lost (only with ``timeout``; see
    #: the module docstring)
    applied: bool = False
    #: a stream failure (``cut``, ``stall``, ``reset``): the events of a streamed reply sent
    #: before it (:data:`HALF`: half of them); None: the request fails before any reply
    after: int | None = None
    #: ``stall``: seconds without an event before the connection is closed
    pause: float = 0.0

    def __post_init__(self) -> None:
        if self.how not in (*HOWS, "cut", "stall"):
            raise InvalidArgument(
                f"a failure is one of {', '.join(HOWS)}, cut, stall, not {self.how!r}"
            )
        if self.how in ("cut", "stall") and self.after is None:
            raise InvalidArgument(f"a {self.how} is a stream failure: give after (events sent)")
        if self.after is not None:
            if self.how not in ("cut", "stall", "reset"):
                raise InvalidArgument(f"only cut, stall and reset fail a stream, not {self.how}")
            if self.after != HALF and not 0 <= self.after <= MAX_STREAM_AFTER:
                raise InvalidArgument(
                    f"after must be 0 to {MAX_STREAM_AFTER} events, not {self.after}"
                )
        if (self.how == "stall") != (self.pause > 0) or self.pause > MAX_STALL:
            raise InvalidArgument(
                f"a stall (only) pauses more than 0 and at most {MAX_STALL:g} s, not "
                f"{self.pause:g} s ({self.how})"
            )
        if self.how == "status" and not 400 <= self.status <= 599:
            raise InvalidArgument(f"a failing status is 400-599, not {self.status}")
        if self.applied and self.how != "timeout":
            raise InvalidArgument(f"only a timeout can be applied before it fails, not {self.how}")
        if self.latency < 0:
            raise InvalidArgument(f"latency must be >= 0, not {self.latency}")

    @property
    def mid_stream(self) -> bool:
        """It fails a streamed reply part-way (only a streamed reply: see the module
        docstring)."""
        return self.after is not None

    def sent(self, events: int) -> int:
        """How many of a stream's ``events`` are sent before the failure."""
        return events // 2 if self.after == HALF else int(self.after or 0)

    def describe(self) -> str:
        """``HTTP 503``, ``reset``, ``cut after 3 events``, ``stall of 5 s after half the
        events, then cut``..."""
        if self.how == "status":
            return f"HTTP {self.status}"
        if not self.mid_stream:
            return self.how
        n = "half the events" if self.after == HALF else f"{self.after} event(s)"
        if self.how == "stall":
            return f"stall of {self.pause:g} s after {n}, then cut"
        return f"{self.how} after {n}"


def stream_fail(v: Any) -> str | None:
    """A ``network.fail`` item as a stream failure's canonical text, or None if it is no
    stream failure (a status, ``reset``, ``timeout``...). Takes ``{cut: 3}``,
    ``{reset_after: 2}``, ``{stall: 5s}``, ``{stall: 5s, after: 3}``, a bare ``cut`` /
    ``reset_after`` / ``stall`` (after half the events; a stall of 2 s), or the canonical
    text itself (``"cut 3"``, ``"stall 5s after 3"``). A stream failure given badly raises
    :class:`InvalidArgument` saying how to write it."""
    how: str
    n: Any = None
    pause: Any = None
    if isinstance(v, Mapping):
        keys = set(map(str, v))
        hows = sorted(keys & set(STREAM_FAILS))
        if not hows:
            return None
        if len(hows) > 1:
            raise InvalidArgument(f"{dict(v)!r}: one stream failure per item, not {hows}")
        how = hows[0]
        extra = keys - {how} - ({"after"} if how == "stall" else set())
        if extra:
            raise InvalidArgument(
                f"{dict(v)!r}: {how} takes no {', '.join(sorted(extra))} (write {{cut: N}}, "
                "{reset_after: N} or {stall: 5s, after: N})"
            )
        if how == "stall":
            pause, n = v[how], v.get("after")
        else:
            n = v[how]
    elif isinstance(v, str):
        m = _STREAM_TEXT.match(v.strip())
        if m is None:
            if v.strip().split(" ")[0] in STREAM_FAILS:
                raise InvalidArgument(
                    f"{v!r}: write cut N, reset_after N or stall 5s after N (N: events sent)"
                )
            return None
        how = m["how"] or "stall"
        n = m["n"] if m["how"] else m["after"]
        pause = m["pause"]
        n = int(n) if n is not None else None
    else:
        return None
    if n is not None and (
        isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_STREAM_AFTER
    ):
        raise InvalidArgument(
            f"{how}: the events sent before it must be a whole number from 0 to "
            f"{MAX_STREAM_AFTER}, got {n!r}"
        )
    text = how if n is None else f"{how} {n}"
    if how == "stall":
        secs = DEFAULT_STALL
        if pause is not None:
            if isinstance(pause, str) and pause.replace(".", "", 1).isdigit():
                pause = float(pause)  # "stall 5" in the text form: seconds
            try:
                secs = parse_duration(pause, what="stall")
            except UnitError as exc:
                raise InvalidArgument(str(exc)) from None
        if not 0 < secs <= MAX_STALL:
            raise InvalidArgument(
                f"stall: the pause must be more than 0 and at most {MAX_STALL:g} s, got {pause!r}"
            )
        text = f"stall {secs:g}s" + ("" if n is None else f" after {n}")
    return text


def stream_failure(text: str) -> Failure:
    """The :class:`Failure` of a stream failure's canonical text (:func:`stream_fail`)."""
    canon = stream_fail(text)
    m = _STREAM_TEXT.match(canon or "")
    if m is None:
        raise InvalidArgument(f"not a stream failure: {text!r}")
    if m["how"]:
        n = m["n"]
        return Failure("cut" if m["how"] == "cut" else "reset", after=HALF if n is None else int(n))
    pause = float(str(m["pause"]).removesuffix("s"))
    return Failure("stall", after=HALF if m["after"] is None else int(m["after"]), pause=pause)


@dataclass
class NetFault:
    """Fail the ``nth`` request (1-based) of ``call`` in attempt ``attempt`` (None: every
    attempt's ``nth``) with ``failure``; ``times`` consecutive requests from there (a retry
    that fails again). :attr:`fired` counts the requests it failed, for fault accounting (a
    fault that never fired must not read as a pass)."""

    call: str
    failure: Failure
    nth: int = 1
    attempt: int | None = 1
    times: int = 1
    fired: int = field(default=0, compare=False)
    #: why the last request it was planned for was not failed (a stream failure on a reply
    #: that was not streamed, or too short to cut), for fault accounting
    missed: str = field(default="", compare=False)

    def fire(self) -> None:
        """Count one request failed (thread-safe)."""
        with _lock:
            self.fired += 1

    def miss(self, why: str) -> None:
        """A request it was planned for was served whole: say why (thread-safe)."""
        with _lock:
            self.missed = why

    def describe(self) -> str:
        what = self.failure.describe()
        at = "every attempt" if self.attempt is None else f"attempt {self.attempt}"
        return f"{what} for {self.call} #{self.nth} in {at}" + (
            f" ({self.times} times)" if self.times != 1 else ""
        )


_lock = threading.Lock()


def planned(faults: Sequence[NetFault], call: str, nth: int, attempt: int) -> NetFault | None:
    """The fault planned for the ``nth`` request of ``call`` in ``attempt``, else None; not
    counted (the caller calls :meth:`NetFault.fire` once the request was failed: a stream
    failure fires only on a stream long enough to cut)."""
    for f in faults:
        if f.call != call or (f.attempt is not None and f.attempt != attempt):
            continue
        if f.nth <= nth < f.nth + f.times:
            return f
    return None


def pick(faults: Sequence[NetFault], call: str, nth: int, attempt: int) -> Failure | None:
    """The failure for the ``nth`` request of ``call`` in ``attempt``, if one is planned (and
    count it as fired), else None. Thread-safe: services answer requests concurrently. A
    stream failure is not picked here (only the LLM stand-in's streams take one:
    :func:`planned`)."""
    f = planned(faults, call, nth, attempt)
    if f is None or f.failure.mid_stream:
        return None
    f.fire()
    return f.failure
