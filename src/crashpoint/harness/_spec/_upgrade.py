"""Upgrade crashes and always-replay (Contract 3 ``faults:`` ``upgrade`` and ``always_replay``).

``upgrade: {to: {...}}`` names a second version of the agent (B) by what differs from the
scenario's ``agent`` (A): another ``command`` or ``entry`` (and ``args``), ``env`` variables
(merged over A's), a ``cwd``, a ``timeout``, or the ``python`` of another virtual environment
(what ``{python}`` becomes). A trial kills A at one boundary of the golden run (a kill's plan,
reused: every boundary, or drawn at random) and runs every attempt after the crash under B; the
``replay_divergence`` check then compares B's resumed attempt with the golden run's
continuation. ``always_replay`` is the same without a second version: every resumed attempt of
the agent itself must continue as the crash-free run did, which flushes out nondeterminism.

Pure data and functions: the options' validation, B's :class:`AgentSpec` built from A's, the
faults a trial of either family holds, where a plan's crash lands in the golden run.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from crashpoint._placeholders import fields
from crashpoint._units import parse_duration
from crashpoint.errors import FaultSpecError, PlaceholderError, UnitError
from crashpoint.harness._spec._events import event_name
from crashpoint.harness._spec._model import AGENT_PLACEHOLDERS, AgentSpec, Fault, Golden, Plan

__all__ = [
    "REPLAY_AT",
    "REPLAY_KINDS",
    "UPGRADE_KEYS",
    "check_replay_options",
    "crash_index",
    "describe_to",
    "moved",
    "resumed_attempt",
    "upgraded",
]

#: The fault families whose trials resume a crash and judge ``replay_divergence``.
REPLAY_KINDS = ("upgrade", "always_replay")
#: Where their kill lands: each boundary of the golden run (one trial each), or one drawn.
REPLAY_AT = ("every-boundary", "random")
#: What ``upgrade.to`` may change of the agent (any other key of ``agent`` stays A's).
UPGRADE_KEYS = ("command", "entry", "args", "env", "cwd", "timeout", "python", "rev", "repo")
#: agent.timeout's cap, as the scenario loader's.
_MAX_TIMEOUT = 86_400.0


def _strings(v: Any, what: str, err: Callable[[str], FaultSpecError]) -> list[str]:
    if isinstance(v, str):
        v = shlex.split(v)
    if not isinstance(v, list) or not all(
        isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in v
    ):
        raise err(f"{what} must be a list of strings, got {v!r}")
    out = [str(x) for x in v]
    for part in out:
        if "\0" in part:
            raise err(f"{what} contains a NUL byte: {part!r}")
        try:
            fields(part, AGENT_PLACEHOLDERS)
        except PlaceholderError as exc:
            raise err(f"{what}: {exc}") from None
    return out


def _check_to(v: Any, err: Callable[[str], FaultSpecError]) -> dict[str, Any]:
    """``upgrade.to`` normalised: a mapping of :data:`UPGRADE_KEYS` (lists for ``command`` and
    ``args``, strings for ``env`` values, seconds for ``timeout``)."""
    usage = (
        '; upgrade.to names what version B changes: e.g. {command: ["{python}", '
        '"{scenario_dir}/agent_v2.py", "{state_dir}"]}, {env: {AGENT_VERSION: "2"}} or '
        "{python: /path/to/venv-b/bin/python}"
    )
    if not isinstance(v, Mapping) or not v:
        raise err(f"upgrade.to must be a non-empty mapping, got {v!r}{usage}")
    unknown = sorted(str(k) for k in v if k not in UPGRADE_KEYS)
    if unknown:
        raise err(
            f"upgrade.to: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(UPGRADE_KEYS)}"
        )
    to: dict[str, Any] = {}
    if "command" in v and "entry" in v:
        raise err("upgrade.to: give command or entry, not both (version B is started one way)")
    if "command" in v:
        to["command"] = _strings(v["command"], "upgrade.to.command", err)
        if not to["command"] or not to["command"][0]:
            raise err("upgrade.to.command: the program (the first part) is empty")
        if "args" in v:
            raise err(
                "upgrade.to.args goes with entry (the function's arguments); with command put "
                "the arguments in the command list"
            )
    if "entry" in v:
        entry = v["entry"]
        module, _, func = entry.partition(":") if isinstance(entry, str) else ("", "", "")
        if not all(x.isidentifier() for x in (*module.split("."), *func.split("."))) or not func:
            raise err(f"upgrade.to.entry must be 'module:function', got {entry!r}")
        to["entry"] = entry
    if "args" in v:
        to["args"] = _strings(v["args"], "upgrade.to.args", err)
    if "env" in v:
        env = v["env"]
        if not isinstance(env, Mapping):
            raise err(f"upgrade.to.env must be a mapping of variable names to values, got {env!r}")
        out: dict[str, str] = {}
        for k, x in env.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise err(f"upgrade.to.env: {k!r} is not a variable name")
            if isinstance(x, bool) or not isinstance(x, (str, int, float)) or "\0" in str(x):
                raise err(f"upgrade.to.env: the value of {k} must be a string, got {x!r}")
            out[k] = str(x)
        to["env"] = out
    if "cwd" in v:
        if not isinstance(v["cwd"], str) or not v["cwd"] or "\0" in v["cwd"]:
            raise err(f"upgrade.to.cwd must be a folder, got {v['cwd']!r}")
        to["cwd"] = v["cwd"]
    if "timeout" in v:
        try:
            secs = parse_duration(v["timeout"], what="upgrade.to.timeout")
        except UnitError as exc:
            raise err(str(exc)) from None
        if not 0 < secs <= _MAX_TIMEOUT:
            raise err(
                f"upgrade.to.timeout must be more than 0 and at most 24h, got {v['timeout']!r}"
            )
        to["timeout"] = secs
    if "repo" in v and "rev" not in v:
        raise err("upgrade.to.repo goes with rev (the commit of that repository that is version B)")
    if "rev" in v:
        rev = v["rev"]
        if isinstance(rev, bool) or not isinstance(rev, (str, int)) or not str(rev).strip():
            raise err(
                f"upgrade.to.rev must be a commit, branch or tag of the agent's git repository, "
                f"got {rev!r}"
            )
        rev = str(rev).strip()
        if rev.startswith("-") or "\0" in rev or any(c.isspace() for c in rev):
            raise err(f"upgrade.to.rev {rev!r} is not a revision (a commit, branch or tag)")
        to["rev"] = rev
    if "repo" in v:
        if not isinstance(v["repo"], str) or not v["repo"] or "\0" in v["repo"]:
            raise err(f"upgrade.to.repo must be a folder, got {v['repo']!r}")
        to["repo"] = v["repo"]
    if "python" in v:
        py = v["python"]
        if not isinstance(py, str) or not py or "\0" in py:
            raise err(f"upgrade.to.python must be the path of an interpreter, got {py!r}")
        to["python"] = py
    return to


def check_replay_options(
    kind: str, opts: dict[str, Any], chained: bool, err: Callable[[str, str], FaultSpecError]
) -> None:
    """Validate (and normalise, in place) the options of an ``upgrade`` or ``always_replay``
    family: ``at`` (every-boundary, the default, or random), ``count`` (with random only),
    ``replay`` (false: attempt 1's kill is real, not replayed from the golden run's recorded
    state), and ``upgrade``'s ``to``."""

    def at(option: str) -> Callable[[str], FaultSpecError]:
        return lambda message: err(message, option)

    if chained:
        raise err(
            f"{kind} goes alone, not in a chain (its trials are a kill under one version and "
            "a resume that is compared with the golden run)",
            "",
        )
    where = opts.get("at", "every-boundary")
    if where not in REPLAY_AT:
        raise err(f"{kind}.at must be one of {', '.join(REPLAY_AT)}, got {where!r}", "at")
    opts["at"] = where
    if "count" in opts and where == "every-boundary":
        raise err(
            f"{kind}.count goes with at: random (at: every-boundary, the default, runs one trial "
            "per boundary of the golden run)",
            "count",
        )
    if "replay" in opts and not isinstance(opts["replay"], bool):
        raise err(
            f"{kind}.replay must be true or false, got {opts['replay']!r} (false: attempt 1 is "
            "killed for real, not replayed from the golden run's recorded state)",
            "replay",
        )
    if kind == "upgrade":
        if "to" not in opts:
            raise err(
                'upgrade needs to: what version B changes, e.g. {to: {command: ["{python}", '
                '"{scenario_dir}/agent_v2.py", "{state_dir}"]}}',
                "to",
            )
        opts["to"] = _check_to(opts["to"], at("to"))


def describe_to(to: Mapping[str, Any]) -> str:
    """Version B in a few words, as reports show it (environment values left out: they may be
    secrets)."""
    parts = []
    if to.get("command"):
        parts.append(" ".join(shlex.quote(p) if " " in p else p for p in to["command"]))
    if to.get("entry"):
        parts.append(" ".join(["entry", str(to["entry"]), *to.get("args", ())]))
    elif to.get("args"):
        parts.append(" ".join(["args", *to["args"]]))
    if to.get("python"):
        parts.append(f"python {to['python']}")
    if to.get("rev"):
        rev = str(to["rev"])
        full = len(rev) == 40 and all(c in "0123456789abcdef" for c in rev)
        parts.append(f"rev {rev[:12] if full else rev}")
    if to.get("env"):
        parts.append("env " + ", ".join(sorted(to["env"])))
    if to.get("cwd"):
        parts.append(f"cwd {to['cwd']}")
    if to.get("timeout"):
        parts.append(f"timeout {to['timeout']:g}s")
    return "; ".join(parts) or "the same agent"


def moved(path: str, root: str, checkout: str) -> str:
    """``path`` moved from the repository ``root`` into its ``checkout`` (a path outside the
    repository, or an empty one, unchanged)."""
    if not path or not root or not checkout:
        return path
    if path == root:
        return checkout
    if path.startswith(root.rstrip("/") + "/"):
        return checkout.rstrip("/") + path[len(root.rstrip("/")) :]
    return path


def upgraded(
    agent: AgentSpec, to: Mapping[str, Any], checkout: tuple[str, str] | None = None
) -> AgentSpec:
    """Version B: ``agent`` (A) with what ``to`` changes. A new ``command`` or ``entry`` replaces
    A's way of starting (with ``args`` for an entry); ``env`` is merged over A's; ``cwd``,
    ``timeout`` and ``python`` replace A's. B keeps A's scenario folder and services and is
    never forked from A's warm interpreter (``warm`` off).

    ``checkout`` (``rev``: B is another commit): (the repository's root, the folder its commit
    was exported to). Every path under the root then points into that folder: the scenario
    folder (what ``{scenario_dir}`` becomes), the working folder, and the parts of the command
    (or arguments) and the environment values that are such a path."""
    command, entry, args = agent.command, agent.entry, agent.args
    if to.get("command"):
        command, entry, args = tuple(to["command"]), "", ()
    elif to.get("entry"):
        command, entry, args = (), str(to["entry"]), tuple(to.get("args", ()))
    elif "args" in to:
        args = tuple(to["args"])
    env = dict(agent.env)
    env.update({str(k): str(v) for k, v in (to.get("env") or {}).items()})
    root, into = checkout or ("", "")
    return dataclasses.replace(
        agent,
        command=tuple(moved(p, root, into) for p in command),
        entry=entry,
        args=tuple(moved(p, root, into) for p in args),
        env=tuple(sorted((k, moved(v, root, into)) for k, v in env.items())),
        cwd=moved(str(to.get("cwd") or agent.cwd), root, into),
        scenario_dir=moved(agent.scenario_dir, root, into),
        timeout=float(to.get("timeout") or agent.timeout),
        python=str(to.get("python") or agent.python),
        warm=None,
    )


def resumed_attempt(plan: Plan) -> Fault | None:
    """The ``upgrade`` or ``always_replay`` fault of ``plan`` (its attempt is the first
    resumed one), or None."""
    return next((f for f in plan.faults if f.kind in REPLAY_KINDS), None)


def crash_index(golden: Golden, plan: Plan) -> tuple[int, str] | None:
    """Where the plan's kill of the attempt before the resumed one lands in the golden run:
    (its golden event index, its phase), or None (no such kill, or one the golden run never
    reaches)."""
    marker = resumed_attempt(plan)
    if marker is None:
        return None
    kill = next(
        (f for f in plan.faults if f.kind == "kill" and f.attempt == marker.attempt - 1), None
    )
    if kill is None:
        return None
    if not kill.arg("op"):
        index = int(kill.arg("index", -1))
        ok = 0 <= index < len(golden.events)
        return (index, str(kill.arg("phase", "before"))) if ok else None
    seen = 0
    for j, ev in enumerate(golden.events):
        if ev["op"] == kill.arg("op") and event_name(ev) == kill.arg("name"):
            seen += 1
            if seen == int(kill.arg("nth", 1)):
                return j, str(kill.arg("phase", "before"))
    return None
