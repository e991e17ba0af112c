"""The gate's verdict as one exit code a CI can read, and why.

``crashpoint run`` exits with :attr:`GateVerdict.code`; gate.json carries the same
(``verdict``, ``exit_code``, ``reasons``), so a CI that reads the file and one that reads the
exit status see the same thing. The codes, most important first when several apply:

=========  ==============  =====================================================================
code       verdict         when
=========  ==============  =====================================================================
130 / 143  ``interrupted``  a SIGINT / SIGTERM stopped the gate (its report is incomplete)
2          ``bad input``    a scenario file is malformed (file, line and key named) or an option
                            is bad: fix the input, nothing was judged from it
1          ``fail``         a trial failed a check, a golden (fault-free) run failed, or a
                            campaign ran out of its time budget
3          ``not judged``   the gate could not judge: no scenario found, a family none of whose
                            trials was exercised, every trial of a campaign skipped, an agent
                            that reports no boundary, a check the scenario asked for by name
                            that no trial gave anything to judge, no trial at all
0          ``pass``         every trial ran, was exercised where it counts, and passed
=========  ==============  =====================================================================

A failure (1) outranks "could not judge" (3): a definite regression is news even when part of
the gate proved nothing. Bad input (2) outranks both: a malformed file means part of the gate
never ran, so its verdict is not the whole story until the file is fixed.

Pure data, standard library only: both doors (the pytest plugin's gate.json and ``crashpoint
run``'s exit status) call :func:`gate_verdict` with what they gathered.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAIL",
    "EXIT_NOT_JUDGED",
    "EXIT_PASS",
    "GateVerdict",
    "gate_verdict",
]

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_JUDGED = 3


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """The gate's exit code, its word (``pass``, ``fail``, ``bad input``, ``not judged``,
    ``interrupted``), and why it is not a pass: the reasons of the winning kind, one line each,
    then those of the kinds it outranked."""

    code: int
    verdict: str
    reasons: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.code == EXIT_PASS

    def to_json(self) -> dict[str, Any]:
        """gate.json's fields: ``verdict``, ``exit_code``, ``reasons``."""
        return {"verdict": self.verdict, "exit_code": self.code, "reasons": list(self.reasons)}


def _name(s: Mapping[str, Any]) -> str:
    return f"{s.get('scenario', s.get('name', '?'))} [{s.get('family', '')}]"


def _signal_code(name: str) -> int:
    try:
        return 128 + int(signal.Signals[name])
    except KeyError:
        return 128 + int(signal.SIGINT)


def _checks_without_anything_to_judge(campaigns: list[Mapping[str, Any]]) -> list[str]:
    """A check a scenario asked for by name (``required_checks``) that none of the trials of
    any of its campaigns judged (skipped in each, or never run): one line each. A scenario
    with a failure, or one interrupted, is left to that."""
    by_scenario: dict[str, list[Mapping[str, Any]]] = {}
    for s in campaigns:
        by_scenario.setdefault(str(s.get("scenario", s.get("name", "?"))), []).append(s)
    out: list[str] = []
    for scenario, group in by_scenario.items():
        ran = sum(int(s.get("ran", 0) or 0) for s in group)
        if not ran or any(s.get("interrupted_by") or int(s.get("failed", 0) or 0) for s in group):
            continue
        asked = dict.fromkeys(str(c) for s in group for c in s.get("required_checks") or ())
        for check in asked:
            counts = [(s.get("checks") or {}).get(check) or {} for s in group]
            if any(int(c.get("passed", 0)) + int(c.get("failed", 0)) for c in counts):
                continue
            why = next((str(c["why_skipped"]) for c in counts if c.get("why_skipped")), "")
            out.append(
                f"{scenario}: expect.{check} asks for {check}, and none of its {ran} trial(s) "
                "gave it anything to judge" + (f" ({why})" if why else " (it never ran)")
            )
    return out


def gate_verdict(
    campaigns: Iterable[Mapping[str, Any]],
    *,
    bad_input: Iterable[str] = (),
    failed: Iterable[str] = (),
    not_judged: Iterable[str] = (),
    interrupted_by: str = "",
) -> GateVerdict:
    """The verdict of a gate from its campaigns' summaries (as gate.json holds them) and what
    the door saw besides: ``bad_input`` (malformed scenario files, one line each: where and
    why), ``failed`` (items that failed without a campaign, e.g. a golden run that failed),
    ``not_judged`` (what could not be judged, e.g. no scenario found, an agent with no
    boundary), ``interrupted_by`` (``SIGINT`` / ``SIGTERM``)."""
    campaigns = list(campaigns)
    bad = list(dict.fromkeys(bad_input))
    fails = list(dict.fromkeys(failed))
    unjudged = list(dict.fromkeys(not_judged))
    by = interrupted_by or next(
        (str(s["interrupted_by"]) for s in campaigns if s.get("interrupted_by")), ""
    )
    for s in campaigns:
        name = _name(s)
        ran = int(s.get("ran", 0) or 0)
        if s.get("interrupted_by"):
            continue
        if int(s.get("failed", 0) or 0):
            fails.append(f"{name}: {s['failed']} failing trial(s)")
        elif s.get("stopped"):
            fails.append(f"{name}: {s['stopped']}")
        elif not s.get("ok"):
            why = [str(m) for m in s.get("unexercised") or []]
            if why:
                unjudged += [f"{name}: {m}" for m in why]
            else:  # not ok for a reason this function does not know: never a pass
                fails.append(f"{name}: failed")
        elif not ran and int(s.get("skipped", 0) or 0):
            reasons = "; ".join(str(r) for r in s.get("skip_reasons") or []) or "no reason given"
            unjudged.append(f"{name}: every trial was skipped: {reasons}")
    unjudged += _checks_without_anything_to_judge(campaigns)
    judged = sum(int(s.get("ran", 0) or 0) for s in campaigns)
    if not judged and not (bad or fails or unjudged or by):
        unjudged.append(
            "no trial was judged: "
            + ("no campaign ran" if not campaigns else "the campaigns planned no trial")
        )
    if by:
        return GateVerdict(
            _signal_code(by), "interrupted", (f"interrupted by {by}", *bad, *fails, *unjudged)
        )
    if bad:
        return GateVerdict(EXIT_BAD_INPUT, "bad input", (*bad, *fails, *unjudged))
    if fails:
        return GateVerdict(EXIT_FAIL, "fail", (*fails, *unjudged))
    if unjudged:
        return GateVerdict(EXIT_NOT_JUDGED, "not judged", tuple(unjudged))
    return GateVerdict(EXIT_PASS, "pass")
