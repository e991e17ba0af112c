"""Replay: re-run exactly one trial from its evidence folder.

A failing trial's folder (see :mod:`crashpoint.harness._report._evidence`) holds its plan, the
golden run it was judged against and the runner's settings, with the ``agent.env`` values that
evidence never holds redacted; :func:`replay` fills them back in (from the scenario file the
folder names, else this process's environment) and runs the same plan against the same golden
run, in a ``replays/<time>`` folder beside the evidence.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from typing import Any

from crashpoint.errors import ReplayError, ScenarioError
from crashpoint.harness._engine._trial import CANARY_VAR, TrialRunner, canary_for
from crashpoint.harness._report import marker, unredact_json
from crashpoint.harness._spec import AgentSpec, Expect, Golden, Plan, TrialResult, load_scenario

__all__ = ["golden_from_json", "load_json", "replay", "replay_inputs"]


def replay(folder: str) -> TrialResult:
    """Re-run exactly the trial whose evidence is in ``folder`` (same plan, same golden)."""
    for name in ("plan.json", "runner.json", "golden.json"):
        if not os.path.isfile(os.path.join(folder, name)):
            raise FileNotFoundError(
                f"{folder} is not a crashpoint trial folder: {name} is missing (a failing "
                "trial's folder holds plan.json, runner.json, golden.json and REPLAY)"
            )
    agent, golden, runner_cfg = replay_inputs(folder)  # agent.env values are redacted there
    raw = load_json(os.path.join(folder, "plan.json"))
    source = str(runner_cfg.get("scenario") or "")
    plan = Plan.from_json(unredact_json(raw, _upgrade_values(raw, source, folder)))
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


def _upgrade_values(plan: Any, source: str, folder: str) -> dict[str, str]:
    """The values of version B's ``to.env`` that plan.json holds redacted (``<redacted:
    NAME_B>``): from the scenario file's ``upgrade`` families, else this process's
    environment (``NAME``); a value found in neither is a :class:`ReplayError`."""
    names = sorted(set(re.findall(r"<redacted:([A-Za-z_]\w*)_B>", json.dumps(plan))))
    if not names:
        return {}
    known: dict[str, str] = {}
    if source and os.path.isfile(source):
        try:
            families = load_scenario(source).families
        except ScenarioError as exc:
            raise ReplayError(f"cannot take version B's env values from {source}: {exc}") from None
        for fam in families:
            for kind, opts in fam.family.chain:
                env = dict(dict(opts).get("to") or {}).get("env") or {} if kind == "upgrade" else {}
                known.update({f"{k}_B": str(v) for k, v in env.items() if k in names})
    known.update(
        {f"{k}_B": os.environ[k] for k in names if f"{k}_B" not in known and k in os.environ}
    )
    missing = [k for k in names if f"{k}_B" not in known]
    if missing:
        raise ReplayError(
            f"{os.path.join(folder, 'plan.json')}: version B's env value(s) of "
            f"{', '.join(missing)} are redacted (evidence never holds them) and the scenario "
            f"file does not set them. Set them in the environment and replay again, e.g. "
            f"{missing[0]}=... crashpoint replay {folder}"
        )
    return known


def replay_inputs(folder: str) -> tuple[AgentSpec, Golden, dict[str, Any]]:
    """The agent, golden run and runner.json of the trial folder ``folder``, with the agent.env
    values that evidence never holds filled back in.

    Each redacted value comes from the scenario file runner.json names (if it still sets
    it), else from this process's environment; a value found in neither is a
    :class:`ReplayError` that says how to give it. golden.json gets its values back too.
    """
    cfg = load_json(os.path.join(folder, "runner.json"))
    agent = dict(cfg["agent"])
    env = {str(k): str(v) for k, v in (agent.get("env") or {}).items()}
    redacted = [k for k, v in env.items() if v == marker(k)]
    source = str(cfg.get("scenario") or "")
    known: dict[str, str] = {}
    if redacted and source and os.path.isfile(source):
        try:
            from_file = dict(load_scenario(source).agent.env)
        except ScenarioError as exc:
            raise ReplayError(
                f"cannot take the redacted agent.env values from {source}: {exc}"
            ) from None
        known.update({k: from_file[k] for k in redacted if k in from_file})
    known.update({k: os.environ[k] for k in redacted if k not in known and k in os.environ})
    missing = [k for k in redacted if k not in known]
    if missing:
        where = (
            f"the scenario file {source} does not set them"
            if source
            else "runner.json names no scenario file to take them from"
        )
        raise ReplayError(
            f"{os.path.join(folder, 'runner.json')}: the agent.env value(s) of "
            f"{', '.join(missing)} are redacted (evidence never holds them) and {where}. Set "
            f"them in the environment and replay again, e.g. {missing[0]}=... crashpoint "
            f"replay {folder}"
        )
    env.update(known)
    agent["env"] = env
    golden = load_json(os.path.join(folder, "golden.json"))
    golden = unredact_json(golden, {**known, CANARY_VAR: canary_for(0, -1)})
    return AgentSpec.from_json(agent), golden_from_json(golden), cfg


def golden_from_json(d: dict[str, Any]) -> Golden:
    eff: Counter[tuple[str, str]] = Counter({(k, p): n for k, p, n in d["effects"]})
    return Golden(
        d["steps"],
        d["events"],
        eff,
        d["output"].encode("utf-8"),
        d["duration"],
        fileops=list(d.get("fileops") or []),
        writes=dict(d.get("writes") or {}),
        recorded_by=str(d.get("recorded_by") or ""),
        span=float(d.get("span") or 0.0),
        plog=dict(d.get("plog") or {}),
        plog_events=[int(x) for x in d.get("plog_events") or []],
        fileop_events=[int(x) for x in d.get("fileop_events") or []],
        fileop_replay=[dict(x) for x in d.get("fileop_replay") or []],
        boundary_replay=[dict(x) for x in d.get("boundary_replay") or []],
    )


def load_json(path: str) -> Any:
    with open(path) as f:
        return json.load(f)
