"""Longest first: the order in which a session's scenario files run.

pytest-xdist's ``--dist loadfile`` (what ``crashpoint run`` uses on several cores) hands each
worker a whole file at a time, in the collection's order (see :mod:`._schedule`). A long file
handed out last keeps one worker busy while the others wait with nothing to do; handed out
first, the short files fill in around it. So the collection's scenario files are put in the
order of their expected time, longest first (ties: the order pytest collected them in), where
the first of them was collected; other items keep their order around them.

The expected time of a file is what its items took in the previous run whose report folder
holds a ``gate.json`` (all of its items found there), else an estimate from what is known at
collection (:func:`estimate_s`): the trials each item runs (its ``count``; a sweep, whose
number of points only its golden run tells, a guess), how long a trial of its fault kind
tends to take, and the file's golden run (and its PostgreSQL, when the agent uses one).

Imports the standard library only: the items and their scenarios are read by attribute.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["estimate_s", "file_order", "previous_durations", "scenario_order"]

#: seconds one trial takes when nothing below says otherwise (the shipped gate's drawn trials
#: take 1 to 3 s on 2 busy cores: a spawn, a fault, a restart), and a trial of a sweep (0.6 to
#: 1.8 s: a sweep's kill is replayed, only the restart runs)
TRIAL_S = 2.0
SWEEP_TRIAL_S = 1.0
#: trials a sweep is guessed to have (its points are known once its golden run ran): file
#: operations outnumber boundaries (the demo agent: 53 operations, 16 boundaries)
SWEEP_TRIALS = {"fileop": 40}
SWEEP_DEFAULT = 12
#: matching calls a network sweep is guessed to meet (it fails each of them each way)
NETWORK_CALLS = 2
#: the file's golden run (shared by its items), and a PostgreSQL of its own started for it
GOLDEN_S = 2.0
POSTGRES_S = 8.0
#: a trial that restarts the harness's PostgreSQL (``backing: {service: postgres}``)
POSTGRES_TRIAL_S = 10.0


def estimate_s(scenario: Any, family: Any, count: int | None) -> float:
    """Expected seconds of one scenario item: ``family`` (a ScenarioFamily) of ``scenario``
    run ``count`` times (None: a sweep, guessed by its kind)."""
    fam = family.family
    chain: Sequence[tuple[str, Any]] = fam.chain
    opts = [dict(o) for _k, o in chain]
    kinds = [k for k, _o in chain]
    sweep = count is None
    if count is None:
        at = str(opts[-1].get("at", ""))
        count = SWEEP_TRIALS.get(at, SWEEP_DEFAULT) if kinds[-1] == "kill" else SWEEP_DEFAULT
        fails = opts[-1].get("fail")
        if kinds[-1] == "network" and isinstance(fails, (list, tuple)):
            count = NETWORK_CALLS * len(fails)  # each failure at each matching call
    # a sweep's kills are replayed from the golden run's recorded state (the restart only), as
    # power-loss states are; each fault of a chain, and the second kill of ``at: recovery``,
    # costs another attempt
    per = SWEEP_TRIAL_S if sweep else TRIAL_S * len(chain)
    if kinds == ["power_loss"]:  # a crash state is written, then the restart runs
        per = SWEEP_TRIAL_S
    for kind, o in zip(kinds, opts, strict=True):
        if kind == "kill" and o.get("at") == "recovery":
            per *= 2
        if kind == "backing" and o.get("service") == "postgres":
            per = max(per, POSTGRES_TRIAL_S)
        if kind == "hang":  # the attempt runs into its timeout
            per += float(getattr(scenario.agent, "timeout", 0.0) or 0.0)
        if kind == "resumers":  # several processes at once
            per *= max(2, int(o.get("processes", 2))) / 2 * 1.5
        if o.get("every_attempt"):  # the fault hits every restart too
            per *= max(1, int(getattr(scenario, "restarts", 1)))
    return count * per


def file_overhead_s(scenario: Any) -> float:
    """Seconds a file costs besides its items' trials: its golden run, its PostgreSQL."""
    uses = getattr(scenario.agent, "uses", None)
    postgres = bool(uses is not None and uses("postgres"))
    return GOLDEN_S + (POSTGRES_S if postgres else 0.0)


def file_order(
    files: Sequence[str],
    estimate: Mapping[str, float],
    previous: Mapping[str, float] | None = None,
) -> list[str]:
    """``files`` (in collection order) longest first: by ``previous`` seconds where every file
    has one, else by ``estimate``; ties keep the collection order."""
    seconds = previous if previous and all(f in previous for f in files) else estimate
    rank = {f: i for i, f in enumerate(files)}
    return sorted(files, key=lambda f: (-seconds.get(f, 0.0), rank[f]))


def scenario_order(
    items: Sequence[Any], is_scenario: Any, previous: Mapping[str, float]
) -> list[Any]:
    """``items`` with their scenario files' items regrouped longest file first (each file's
    items together, in their own order) where the first of them was; the other items keep
    their order around them. ``is_scenario(item)``: is it a scenario item (it has ``scenario``,
    ``family`` and ``count``); ``previous``: seconds per file from :func:`previous_durations`."""
    groups: dict[str, list[Any]] = {}
    estimate: dict[str, float] = {}
    for item in items:
        if not is_scenario(item):
            continue
        key = _file_key(item)
        if key not in groups:
            groups[key] = []
            estimate[key] = file_overhead_s(item.scenario)
        groups[key].append(item)
        estimate[key] += estimate_s(item.scenario, item.family, item.count)
    if len(groups) < 2:
        return list(items)
    ordered = [i for f in file_order(list(groups), estimate, previous) for i in groups[f]]
    first = next(n for n, i in enumerate(items) if is_scenario(i))
    others = [i for i in items if not is_scenario(i)]
    before = sum(1 for i in items[:first] if not is_scenario(i))
    return others[:before] + ordered + others[before:]


def _file_key(item: Any) -> str:
    return os.path.realpath(str(item.scenario.path))


def previous_durations(folder: str | None) -> dict[str, float]:
    """Seconds per scenario file (its real path) from the ``gate.json`` of a previous run in
    ``folder`` (the sum of its campaigns' ``duration_s``); {} when there is none, it is still
    "running" or unreadable (the estimate is used then)."""
    if not folder:
        return {}
    try:
        with open(os.path.join(folder, "gate.json"), encoding="utf-8") as f:
            gate = json.load(f)
    except (OSError, ValueError):
        return {}
    out: dict[str, float] = {}
    campaigns = gate.get("campaigns") if isinstance(gate, dict) else None
    for c in campaigns if isinstance(campaigns, list) else ():
        if not isinstance(c, dict):
            continue
        path, took = c.get("file"), c.get("duration_s")
        if isinstance(path, str) and isinstance(took, (int, float)) and not isinstance(took, bool):
            key = os.path.realpath(path)
            out[key] = out.get(key, 0.0) + float(took)
    return out
