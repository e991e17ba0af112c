"""The event vocabulary: what crosses an agent's boundary, as the ledger records it.

Shared by the stand-ins (which record events), the plan generator (which places faults at
them), the checks (which judge them) and the accounting (which says where a fault landed).
Pure data and functions: no I/O.

An event is a dict with ``op`` (one of :data:`OPS`), ``attempt``, ``ai`` (its index within the
attempt), and what the op is about: ``step`` (step_started, step_completed), ``kind`` and
``payload`` (effect; ``key`` when the agent gave one), ``name`` (event, llm_call). A request to
a stand-in service is an event too: an HTTP effect's kind is ``"METHOD /path"``, a mail's
``"mail"``, a model call is an ``llm_call``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CALL_OUTCOMES",
    "ENV_LEDGER_HTTP",
    "HTTP_EVENT_OPS",
    "IN_DOUBT_OPS",
    "OPS",
    "SERVICE_ONLY",
    "KillAt",
    "agent_message",
    "call_of",
    "call_outcome",
    "canonical",
    "event_name",
    "size_text",
]

#: The ledger's HTTP front, for agents that speak HTTP instead of the probe's socket.
ENV_LEDGER_HTTP = "CRASHPOINT_LEDGER_HTTP"
#: The ops that are recorded in the history (``hello`` only opens a connection).
#: ``llm_call``: a call the LLM stand-in answered.
OPS = ("step_started", "step_completed", "effect", "event", "llm_call")
#: The ops with an in-doubt window (applied or billed, then the reply): killed there too.
IN_DOUBT_OPS = ("effect", "llm_call")
#: The ops the HTTP front takes as ``POST /events/<op>`` (effects go to ``/effects/<kind>``).
HTTP_EVENT_OPS = ("step_started", "step_completed", "event")
#: Fields only the stand-in services set (a request they failed; one whose reply they lost; a
#: streamed reply they cut part-way): from the agent (the probe socket, the ledger's HTTP
#: front) they are dropped, or an agent could mark its own duplicate "failed" and have it
#: never count as applied.
SERVICE_ONLY = ("failed", "reply_lost", "partial_reply", "mcp_tool")

#: What a call (an effect, a model call) came to, from the reply the agent got (or not):
#:
#: * ``killed`` - the agent was killed before the service saw it: not applied, not completed;
#: * ``failed`` - the service answered with an error (4xx/5xx), reset or timed out before it
#:   acted: not applied (not billed), not completed; retrying it is what an agent should do;
#: * ``in_doubt`` - the service acted (applied, billed) and the agent never learned it (killed
#:   in the in-doubt window, or the reply was lost): applied, but not completed;
#: * ``acked`` - the service acted (or deduplicated a key it had applied) and the agent got the
#:   reply: the call is done, and completed once the agent has had its first chance to save it.
#:
#: Every check reads this one classification (:func:`call_outcome`).
CALL_OUTCOMES = ("killed", "failed", "in_doubt", "acked")

_METHOD_PATH = re.compile(r"^[A-Z]{1,16} /\S*$")


def event_name(ev: Mapping[str, Any]) -> str:
    """What an event is about: its step, or its effect's kind (or its name, for ``event``)."""
    return str(ev.get("step") or ev.get("kind") or ev.get("name") or "")


def canonical(payload: Any) -> str:
    """The canonical form of an effect payload (how effects are compared with the golden run)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def agent_message(msg: dict[str, Any]) -> dict[str, Any]:
    """``msg`` as the agent may send it: without the fields only a service sets."""
    return {k: v for k, v in msg.items() if k not in SERVICE_ONLY}


def call_outcome(ev: Mapping[str, Any]) -> str:
    """What the call ``ev`` came to: one of :data:`CALL_OUTCOMES`."""
    if ev.get("killed") == "before":
        return "killed"
    if ev.get("killed") == "in_doubt" or ev.get("reply_lost"):
        return "in_doubt"
    if ev.get("failed"):
        return "failed"
    return "acked"


def call_of(ev: Mapping[str, Any]) -> str:
    """The network call a ledger event records (``"POST /hook"``, ``"llm"``, ``"mail"``,
    ``"mcp TOOL"``), or
    "" for an event that is no request to a stand-in (a probe step, a probe effect)."""
    op = ev.get("op")
    if op == "llm_call":
        return "llm"
    if ev.get("mcp_tool") and op in ("effect", "event"):  # a tools/call of the MCP stand-in
        return f"mcp {ev['mcp_tool']}"
    if op == "effect":
        kind = str(ev.get("kind") or "")
        if kind == "mail" or _METHOD_PATH.match(kind):
            return kind
    elif op == "event":  # a GET/HEAD/OPTIONS to the HTTP stand-in
        name = str(ev.get("name") or "")
        if _METHOD_PATH.match(name) and ("method" in ev or "path" in ev):
            return name
    return ""


def size_text(n: int) -> str:
    """A limit in bytes as the ledger's messages say it: ``16 MiB`` or ``4096 bytes``."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n} bytes"


@dataclass(frozen=True, slots=True)
class KillAt:
    """Kill the agent at one event of attempt ``attempt``: by identity, the ``nth`` event
    (from 1) of that attempt whose op is ``op`` and whose step or effect kind is ``name`` —
    what a plan drawn from the golden run uses, so a framework's background thread that sends
    an extra event does not move the kill — or, when ``op`` is empty, by position, the
    ``index``-th event (0-based) of the attempt.

    ``phase``: ``"before"`` — the event is recorded, the agent is killed before it is acted on
    (an effect is not applied); ``"in_doubt"`` — only for effects and LLM calls: applied (or
    billed), then killed before the agent learns it.
    """

    attempt: int
    index: int = -1
    phase: str = "before"
    op: str = ""
    name: str = ""
    nth: int = 1
    #: not 0: instead of a SIGKILL, the reply tells the agent to exit with this code (an
    #: ``exit`` fault; only a probe event's reply can carry it, so no stand-in request matches)
    code: int = 0

    def matches(self, ev: dict[str, Any], nth: int) -> bool:
        """Is ``ev`` (the ``nth`` of its op and name in its attempt) this kill's event?"""
        if self.attempt != ev["attempt"]:
            return False
        if self.code and (ev.get("via") or ev["op"] == "llm_call"):
            return False
        if self.op:
            return self.op == ev["op"] and self.name == event_name(ev) and self.nth == nth
        return bool(self.index == ev["ai"])

    def describe(self) -> str:
        if self.op:
            return f"{self.op}:{self.name}" + (f" #{self.nth}" if self.nth > 1 else "")
        return f"event #{self.index}"
