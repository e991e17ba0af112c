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
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from crashpoint.errors import InvalidArgument

__all__ = ["HOWS", "Failure", "NetFault", "pick"]

#: How a request can fail: the connection is reset (closed without a reply), the reply never
#: comes (the agent's own timeout ends the wait), or an HTTP status (5xx, 429) is answered.
HOWS = ("reset", "timeout", "status")


@dataclass(frozen=True)
class Failure:
    """One failed answer. ``status``/``body``/``headers`` for ``how == "status"`` (e.g. 500,
    503, 429 with ``Retry-After``); ``latency`` seconds before it (any ``how``)."""

    how: Literal["reset", "timeout", "status"]
    status: int = 0
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    latency: float = 0.0
    #: the service acted on the request, then the reply was lost (only with ``timeout``; see
    #: the module docstring)
    applied: bool = False

    def __post_init__(self) -> None:
        if self.how not in HOWS:
            raise InvalidArgument(f"a failure is one of {', '.join(HOWS)}, not {self.how!r}")
        if self.how == "status" and not 400 <= self.status <= 599:
            raise InvalidArgument(f"a failing status is 400-599, not {self.status}")
        if self.applied and self.how != "timeout":
            raise InvalidArgument(f"only a timeout can be applied before it fails, not {self.how}")
        if self.latency < 0:
            raise InvalidArgument(f"latency must be >= 0, not {self.latency}")


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

    def describe(self) -> str:
        f = self.failure
        what = f"HTTP {f.status}" if f.how == "status" else f.how
        at = "every attempt" if self.attempt is None else f"attempt {self.attempt}"
        return f"{what} for {self.call} #{self.nth} in {at}" + (
            f" ({self.times} times)" if self.times != 1 else ""
        )


_lock = threading.Lock()


def pick(faults: Sequence[NetFault], call: str, nth: int, attempt: int) -> Failure | None:
    """The failure for the ``nth`` request of ``call`` in ``attempt``, if one is planned (and
    count it as fired), else None. Thread-safe: services answer requests concurrently."""
    with _lock:
        for f in faults:
            if f.call != call or (f.attempt is not None and f.attempt != attempt):
                continue
            if f.nth <= nth < f.nth + f.times:
                f.fired += 1
                return f.failure
    return None
