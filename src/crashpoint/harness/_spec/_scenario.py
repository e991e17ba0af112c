"""Scenario files (Contract 3): ``*.scenario.yaml``, loaded safely, validated with line numbers.

A malformed file raises :class:`ScenarioError` naming the file, the line and the key, and how
to fix it. Loading runs no code (``yaml.SafeLoader``; no tags, no eval).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.machinery
import importlib.util
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from crashpoint._placeholders import fields, fill
from crashpoint._proc import git_commit
from crashpoint._units import format_size, parse_duration, parse_size
from crashpoint.errors import (
    FaultSpecError,
    PlaceholderError,
    ScenarioError,
    ServiceSpecError,
    UnitError,
)
from crashpoint.harness._spec._families import (
    FAMILY_KINDS,
    FaultFamily,
    family_from_spec,
    parse_budget,
)
from crashpoint.harness._spec._model import (
    AGENT_PLACEHOLDERS,
    CHECKS,
    WARM_IMPORTS,
    AgentSpec,
    Expect,
)
from crashpoint.harness._spec._services import parse_services
from crashpoint.harness._spec._upgrade import REPLAY_KINDS, upgraded

__all__ = ["SUFFIX", "Scenario", "ScenarioFamily", "load_scenario"]

SUFFIX = ".scenario.yaml"
TOP_KEYS = (
    "name",
    "agent",
    "faults",
    "restarts",
    "trials",
    "seed",
    "expect",
    "marks",
    "mode",
    "description",
    "budget",
    "services",
)
AGENT_KEYS = ("command", "entry", "args", "timeout", "env", "cwd", "warm")
EXPECT_KEYS = (
    "exactly_once",
    "resumes_from_last_completed",
    "same_output",
    "single_writer",
    "no_secret_leak",
    "no_orphans",
    "max_state_bytes",
    "fail_stop_codes",
    "refuse_codes",
    "refuse_patterns",
    "no_repeated_llm_calls",
    "no_retry_storm",
    "max_retries",
    "crash_loop",
    "replay_divergence",
    "no_silent_failure",
)

#: Bounds of a scenario file and its values (beyond them: a ScenarioError naming the bound).
MAX_FILE_BYTES = 1 << 20  # 1 MiB
MAX_DEPTH = 32  # nesting of mappings and lists (a scenario needs 6)
MAX_NODES = 20_000  # values in the file, aliases expanded
MAX_TIMEOUT = 86_400.0  # agent.timeout: one day
MAX_RESTARTS = 100
MAX_TRIALS = 100_000
MAX_SEED = 2**63 - 1
MAX_STATE_BYTES = 1 << 40  # expect.max_state_bytes: 1 TiB
MAX_RETRIES = 100_000  # expect.max_retries
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The options of ``python`` that take the next argument (then comes the script).
_PY_OPTS_WITH_ARG = ("-W", "-X", "--check-hash-based-pycs")


@dataclass(frozen=True)
class ScenarioFamily:
    """One ``faults:`` item with the line it is on."""

    family: FaultFamily
    line: int


@dataclass(frozen=True)
class Scenario:
    """A loaded, validated ``*.scenario.yaml``: its agent, fault families (each with the line
    it is on), trials, seed, restarts, mode, expectations and budget, and where it came from."""

    path: str
    name: str
    agent: AgentSpec
    families: tuple[ScenarioFamily, ...]
    restarts: int = 3
    trials: int = 50
    seed: int = 0
    expect: Expect = field(default_factory=Expect)
    marks: tuple[str, ...] = ()
    mode: str | None = None
    line: int = 1
    agent_line: int = 1  # the line of the ``agent:`` key (where golden-run failures point)
    budget: float | None = None  # seconds per family's campaign (inf: none); None: the default

    @property
    def slug(self) -> str:
        base = os.path.basename(self.path)
        return base[: -len(SUFFIX)] if base.endswith(SUFFIX) else base


class _Doc:
    """A YAML mapping with the line of each key, for messages that point at the file."""

    def __init__(self, path: str, node: yaml.Node, where: str) -> None:
        self.path, self.node, self.where = path, node, where
        if not isinstance(node, yaml.MappingNode):
            raise ScenarioError(
                path,
                node.start_mark.line + 1,
                where,
                f"{where or 'the document'} must be a mapping (key: value)",
            )
        self.items: dict[str, tuple[yaml.Node, int]] = {}
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else str(knode)
            if key in self.items:
                raise ScenarioError(
                    path, knode.start_mark.line + 1, self._k(key), "the key appears twice"
                )
            self.items[key] = (vnode, knode.start_mark.line + 1)

    def _k(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def check_keys(self, allowed: tuple[str, ...]) -> None:
        for key, (_, line) in self.items.items():
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise ScenarioError(
                    self.path,
                    line,
                    self._k(key),
                    f"unknown key; {hint}allowed: {', '.join(allowed)}",
                )

    def line(self, key: str) -> int:
        return self.items[key][1] if key in self.items else self.node.start_mark.line + 1

    def value(self, key: str, default: Any = None) -> Any:
        if key not in self.items:
            return default
        return _plain(self.items[key][0])

    def err(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(self.path, self.line(key), self._k(key), message)


def _plain(node: yaml.Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _int(doc: _Doc, key: str, default: int, lo: int, hi: int, why: str = "") -> int:
    v = doc.value(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise doc.err(key, f"must be a whole number from {lo} to {hi}, got {v!r}")
    if not lo <= v <= hi:
        raise doc.err(key, f"must be from {lo} to {hi}, got {v}{why}")
    return v


def _read(p: str) -> str:
    """The file's text, at most MAX_FILE_BYTES of it."""
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ScenarioError(p, None, "", f"cannot read the file: {exc.strerror}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise ScenarioError(
            p,
            None,
            "",
            f"the file is larger than {format_size(MAX_FILE_BYTES)}"
            ", the limit for a scenario file; split it",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(p, None, "", f"not UTF-8 text: {exc}") from exc


def _line(ev: yaml.Event) -> int | None:
    return ev.start_mark.line + 1 if ev.start_mark else None


def _check_shape(p: str, text: str) -> None:
    """Refuse a file nested deeper than MAX_DEPTH or with more than MAX_NODES values, before
    anything recursive (composing, constructing) sees it. Stops at the first excess."""
    depth = nodes = 0
    try:
        for ev in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ScenarioError(
                        p,
                        _line(ev),
                        "",
                        f"nested more than {MAX_DEPTH} levels deep (the limit; "
                        "a scenario needs about 6)",
                    )
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                depth -= 1
            if isinstance(ev, yaml.NodeEvent):
                nodes += 1
                if nodes > MAX_NODES:
                    raise ScenarioError(
                        p,
                        _line(ev),
                        "",
                        f"more than {MAX_NODES} values (the limit for a scenario file)",
                    )
    except yaml.YAMLError as exc:
        raise _yaml_error(p, exc) from exc


def _expanded(p: str, node: yaml.Node) -> None:
    """Refuse aliases that expand to more than MAX_NODES values ("billion laughs") or refer
    to themselves: a value is built and printed as a tree."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def size(n: yaml.Node) -> int:
        if id(n) in sizes:
            return sizes[id(n)]
        if id(n) in busy:
            raise ScenarioError(
                p, n.start_mark.line + 1, "", "a YAML alias refers to the value that contains it"
            )
        busy.add(id(n))
        total = 1
        if isinstance(n, yaml.SequenceNode):
            total += sum(size(c) for c in n.value)
        elif isinstance(n, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in n.value)
        busy.discard(id(n))
        if total > MAX_NODES:
            raise ScenarioError(
                p,
                n.start_mark.line + 1,
                "",
                f"YAML aliases expand to more than {MAX_NODES} values (the "
                "limit for a scenario file)",
            )
        sizes[id(n)] = total
        return total

    size(node)


def _yaml_error(path: str, exc: yaml.YAMLError) -> ScenarioError:
    """A parser's complaint as a ScenarioError at its line (where the parser knows it)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        return ScenarioError(
            path, mark.line + 1 if mark else None, "", f"not valid YAML: {exc.problem or exc}"
        )
    return ScenarioError(path, None, "", f"not valid YAML: {exc}")


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate one scenario file (see ``scenarios/README.md`` for the format).

    Structure and values first (every key, type and range), then first contact: the agent's
    program, script or module must exist where the agent will look for it.
    """
    p = os.fspath(path)
    text = _read(p)
    _check_shape(p, text)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise _yaml_error(p, exc) from exc
    if node is None:
        raise ScenarioError(p, 1, "", "the file is empty; a scenario needs name, agent, faults")
    _expanded(p, node)
    try:
        _plain(node)  # rejects tags and constructs nothing unsafe
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ScenarioError(
            p,
            mark.line + 1 if mark else None,
            "",
            f"unsupported YAML: {getattr(exc, 'problem', exc)}",
        ) from exc
    doc = _Doc(p, node, "")
    doc.check_keys(TOP_KEYS)
    for required in ("name", "agent", "faults"):
        if required not in doc.items:
            raise ScenarioError(p, 1, required, f"missing required key '{required}'")
    name = doc.value("name")
    if not isinstance(name, str) or not name.strip():
        raise doc.err("name", "must be a non-empty string")
    scenario_dir = os.path.dirname(os.path.abspath(p))
    agent_doc = _Doc(p, doc.items["agent"][0], "agent")
    agent = _agent(agent_doc, scenario_dir)
    if "services" in doc.items:
        agent = dataclasses.replace(agent, services=_services(doc))
    families = tuple(_upgrades(doc, agent, _families(doc)))
    expect = (
        _expect(_Doc(p, doc.items["expect"][0], "expect")) if "expect" in doc.items else Expect()
    )
    marks = doc.value("marks", [])
    if not isinstance(marks, list) or not all(
        isinstance(m, str) and m.isidentifier() for m in marks
    ):
        raise doc.err("marks", "must be a list of marker names, e.g. [slow]")
    mode = doc.value("mode")
    if mode not in (None, "systematic", "random"):
        raise doc.err("mode", f"must be systematic or random, got {mode!r}")
    seed = _int(doc, "seed", 0, 0, MAX_SEED)
    restarts = _int(doc, "restarts", 3, 0, MAX_RESTARTS)
    within = expect.crash_loop_within
    if within is not None and within > 1 + restarts:
        edoc = _Doc(p, doc.items["expect"][0], "expect")
        raise edoc.err(
            "crash_loop",
            f"crash_loop.within is {within}, but with restarts: {restarts} a trial runs at "
            f"most {1 + restarts} attempts, so attempt {within} never comes and a crash loop "
            f"could not fail; raise restarts to {within - 1} or more, or lower within",
        )
    _resumers_fit(doc, families, restarts)
    _resume_fits(doc, families, restarts)
    _backing_restarts(doc, families, restarts)
    trials = _int(
        doc, "trials", 50, 1, MAX_TRIALS, " (the trials shared by the families without a count)"
    )
    budget = None
    if "budget" in doc.items:
        try:
            budget = parse_budget(doc.value("budget"), what="")
        except UnitError as exc:
            raise doc.err("budget", f"{exc}; or none for no limit") from exc
    _first_contact(agent_doc, agent)
    return Scenario(
        p,
        name.strip(),
        agent,
        families,
        restarts,
        trials,
        seed,
        expect,
        tuple(marks),
        mode,
        1,
        budget=budget,
        agent_line=doc.line("agent"),
    )


def _text(doc: _Doc, key: str, v: Any, what: str) -> str:
    """A scalar of an agent's command, args or env as the string the agent gets."""
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        hint = " (quote it: 'true')" if isinstance(v, bool) else ""
        raise doc.err(key, f"{what} must be a string, got {v!r}{hint}")
    text = str(v)
    if "\0" in text:
        raise doc.err(
            key,
            f"{what} contains a NUL byte: {text!r} (a process argument or "
            "environment variable cannot hold one)",
        )
    return text


def _template(doc: _Doc, key: str, text: str, allowed: tuple[str, ...]) -> list[str]:
    try:
        return fields(text, allowed)
    except PlaceholderError as exc:
        raise doc.err(key, str(exc)) from None


def _agent(doc: _Doc, scenario_dir: str) -> AgentSpec:
    doc.check_keys(AGENT_KEYS)
    command = doc.value("command")
    entry = doc.value("entry", "")
    if (command is None) == (not entry):
        raise doc.err(
            "command",
            "give exactly one of 'command' (a list of arguments) or 'entry' (module:function)",
        )
    if isinstance(command, str):
        command = shlex.split(command)
    if command is not None and (not isinstance(command, list) or not command):
        raise doc.err(
            "command",
            "must be a non-empty list of strings, e.g. "
            '["{python}", "-m", "mypkg.agent", "--state", "{state_dir}"]',
        )
    parts = [_text(doc, "command", c, "each part of the command") for c in command or []]
    if parts and not parts[0]:
        raise doc.err("command", "the program (the first part) is empty")
    for part in parts:
        _template(doc, "command", part, AGENT_PLACEHOLDERS)
    if entry:
        if not isinstance(entry, str) or ":" not in entry:
            raise doc.err("entry", f"must be 'module:function', got {entry!r}")
        module, _, func = entry.partition(":")
        if not all(x.isidentifier() for x in (*module.split("."), *func.split("."))):
            raise doc.err(
                "entry", f"must be 'module:function' with dotted Python names, got {entry!r}"
            )
    try:
        timeout = parse_duration(doc.value("timeout", "30s"), what="agent.timeout")
    except UnitError as exc:
        raise doc.err("timeout", str(exc)) from exc
    if not 0 < timeout <= MAX_TIMEOUT:
        raise doc.err(
            "timeout",
            f"agent.timeout must be more than 0 and at most 24h (the cap),"
            f" got {doc.value('timeout')!r}",
        )
    env_raw = doc.value("env", {})
    if not isinstance(env_raw, dict):
        raise doc.err("env", "must be a mapping of variable names to values")
    env: dict[str, str] = {}
    for k, v in env_raw.items():
        if not isinstance(k, str) or not _ENV_NAME.match(k):
            raise doc.err(
                "env",
                f"{k!r} is not a variable name (letters, digits and _, not starting with a digit)",
            )
        # only the exact text {scenario_dir} is filled: other braces are the value's own
        env[k] = _text(doc, "env", v, f"the value of {k}").replace("{scenario_dir}", scenario_dir)
    args_raw = doc.value("args", [])
    if not isinstance(args_raw, list):
        raise doc.err("args", "must be a list of strings")
    if args_raw and command is not None:
        raise doc.err(
            "args",
            "goes with 'entry' (the function's arguments); with 'command' put "
            "the arguments in the command list",
        )
    args = [_text(doc, "args", a, "each argument") for a in args_raw]
    for a in args:
        _template(doc, "args", a, AGENT_PLACEHOLDERS)
    cwd = _cwd(doc, scenario_dir)
    agent = AgentSpec(
        tuple(parts),
        str(entry or ""),
        timeout,
        tuple(sorted(env.items())),
        cwd,
        tuple(args),
        scenario_dir,
    )
    warm = _warm(doc, agent)
    return agent if warm is None else dataclasses.replace(agent, warm=warm)


_WARM_USAGE = (
    "use true (fork each attempt from a warm interpreter that did the script's "
    "top-level imports), false (spawn: the default), or a list of modules to import "
    "once, e.g. [langgraph.graph, langgraph.checkpoint.sqlite]"
)


def _warm(doc: _Doc, agent: AgentSpec) -> tuple[str, ...] | None:
    """``agent.warm``: fork mode (see :func:`crashpoint.harness._engine._zygote.fork_plan`)."""
    raw = doc.value("warm")
    if raw is None or raw is False:
        return None
    if raw is True:
        return (WARM_IMPORTS,)
    if not isinstance(raw, list):
        raise doc.err("warm", f"got {raw!r}: {_WARM_USAGE}")
    own = _own_module(agent)
    out: list[str] = []
    for m in raw:
        if not isinstance(m, str) or not m or not all(p.isidentifier() for p in m.split(".")):
            raise doc.err(
                "warm",
                f"{m!r} is not a module name (dotted Python names, e.g. "
                f"langgraph.graph): {_WARM_USAGE}",
            )
        if m in out:
            raise doc.err("warm", f"module {m!r} is listed twice")
        if m == own:
            raise doc.err(
                "warm",
                f"{m!r} is the agent's own module: its top-level code would "
                "run once in the warm interpreter instead of in every "
                "attempt. List only what it imports (e.g. the framework)",
            )
        if not _module_found(m, agent, dict(agent.env)):
            raise doc.err(
                "warm",
                f"module {m!r} not found: it must be importable by the "
                f"agent's interpreter ({_where_python(agent)})",
            )
        out.append(m)
    return tuple(out)


def _own_module(agent: AgentSpec) -> str:
    """The module name the agent itself runs as (entry module, -m module, script stem)."""
    if agent.entry:
        return agent.entry.partition(":")[0]
    rest = list(agent.command[1:]) if agent.command[0] == "{python}" else []
    if rest[:1] == ["-m"] and len(rest) > 1:
        return rest[1]
    if rest and not rest[0].startswith("-"):
        return os.path.splitext(os.path.basename(rest[0]))[0]
    return ""


def _cwd(doc: _Doc, scenario_dir: str) -> str:
    """``agent.cwd`` as an existing absolute folder ({scenario_dir} filled, a relative path
    taken from the scenario's folder), or "" (the trial's {workdir})."""
    raw = doc.value("cwd", "")
    if raw in ("", None):
        return ""
    cwd = _text(doc, "cwd", raw, "agent.cwd")
    _template(doc, "cwd", cwd, ("scenario_dir",))
    cwd = os.path.normpath(os.path.join(scenario_dir, fill(cwd, {"scenario_dir": scenario_dir})))
    if not os.path.isdir(cwd):
        raise doc.err(
            "cwd",
            f"the folder {cwd} does not exist (a relative cwd is taken from "
            "the scenario file's folder)",
        )
    return cwd


def _services(doc: _Doc) -> dict[str, Any]:
    """The ``services:`` section, validated; a bad value is a ScenarioError at its line."""
    raw = doc.value("services")
    try:
        parse_services(raw)
    except ServiceSpecError as exc:
        node, line = doc.items["services"]
        for part in exc.parts[1:]:  # walk down to the line of the bad key
            if (
                isinstance(node, yaml.SequenceNode)
                and part.isdigit()
                and int(part) < len(node.value)
            ):
                node = node.value[int(part)]
                line = node.start_mark.line + 1
                continue
            if not isinstance(node, yaml.MappingNode):
                break
            found = next(
                (
                    (k, v)
                    for k, v in node.value
                    if isinstance(k, yaml.ScalarNode) and k.value == part
                ),
                None,
            )
            if found is None:
                break
            line, node = found[0].start_mark.line + 1, found[1]
        raise ScenarioError(doc.path, line, exc.key, exc.message) from None
    return dict(raw) if raw else {}


def _fault_where(item: yaml.Node, i: int, exc: FaultSpecError) -> tuple[int, str]:
    """The line and key of what a FaultSpecError is about, within ``faults[i]``."""
    line, key = item.start_mark.line + 1, f"faults[{i}]"
    node: yaml.Node | None = item
    if exc.item is not None and isinstance(item, yaml.SequenceNode) and exc.item < len(item.value):
        node = item.value[exc.item]
        line, key = node.start_mark.line + 1, f"{key}[{exc.item}]"
    for part in (exc.kind, exc.option):
        if not part:
            break
        key = f"{key}.{part}"
        found = None
        if isinstance(node, yaml.MappingNode):
            found = next(
                (
                    (k, v)
                    for k, v in node.value
                    if isinstance(k, yaml.ScalarNode) and k.value == part
                ),
                None,
            )
        if found is None:
            break
        line, node = found[0].start_mark.line + 1, found[1]
    return line, key


def _families(doc: _Doc) -> Iterator[ScenarioFamily]:
    node, line = doc.items["faults"]
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise ScenarioError(
            doc.path,
            line,
            "faults",
            f"must be a non-empty list of fault families ({', '.join(FAMILY_KINDS)})",
        )
    for i, item in enumerate(node.value):
        iline = item.start_mark.line + 1
        try:
            fam = family_from_spec(_plain(item))
        except FaultSpecError as exc:
            eline, key = _fault_where(item, i, exc)
            raise ScenarioError(doc.path, eline, key, str(exc)) from None
        except (ValueError, TypeError) as exc:
            raise ScenarioError(doc.path, iline, f"faults[{i}]", str(exc)) from exc
        yield ScenarioFamily(fam, iline)


def _upgrades(
    doc: _Doc, agent: AgentSpec, families: Iterator[ScenarioFamily]
) -> Iterator[ScenarioFamily]:
    """Each ``upgrade`` family with its version B resolved as the agent is: ``to.cwd`` taken
    from the scenario's folder, ``{scenario_dir}`` filled in ``to.env`` values, ``to.python``
    an existing interpreter, and B's program, script or module found (first contact), each
    error at the line of its key under ``to``."""
    faults = doc.items["faults"][0]
    for i, sf in enumerate(families):
        kind, opts = sf.family.chain[0]
        if kind != "upgrade":
            yield sf
            continue
        o = dict(opts)
        to = dict(o["to"])
        item = faults.value[i] if isinstance(faults, yaml.SequenceNode) else faults
        node = _find(_find(item, "upgrade"), "to")
        tdoc = _Doc(doc.path, node, f"faults[{i}].upgrade.to") if node is not None else None
        if tdoc is None:  # cannot happen for a file: family_from_spec required it
            yield sf
            continue
        if "cwd" in to:
            to["cwd"] = _cwd(tdoc, agent.scenario_dir)
        if "env" in to:
            to["env"] = {
                k: v.replace("{scenario_dir}", agent.scenario_dir) for k, v in to["env"].items()
            }
        if "python" in to:
            _template(tdoc, "python", to["python"], ("scenario_dir",))
            py = fill(to["python"], {"scenario_dir": agent.scenario_dir})
            py = os.path.join(agent.scenario_dir, py) if os.sep in py else py
            full = py if os.sep in py else shutil.which(py)
            if full is None or not os.path.isfile(full) or not os.access(full, os.X_OK):
                raise tdoc.err(
                    "python",
                    f"{to['python']!r} is not an executable interpreter (give the python of "
                    "version B's virtual environment, e.g. /path/to/venv/bin/python; a relative "
                    "path is taken from the scenario file's folder)",
                )
            to["python"] = os.path.normpath(full)
        if "rev" in to:  # B is another commit: its files are checked out for the campaign
            to.update(_git_rev(tdoc, to, agent.scenario_dir))
        b = upgraded(agent, to)
        if "rev" in to:
            pass  # B's files are in the commit, not here: its own golden run finds them
        elif to.get("python"):
            _python_script(tdoc, b)  # modules: another interpreter's, not looked up here
        else:
            _first_contact(tdoc, b)
        o["to"] = to
        yield ScenarioFamily(
            FaultFamily(((kind, tuple(sorted(o.items()))), *sf.family.chain[1:])), sf.line
        )


def _git_rev(doc: _Doc, to: dict[str, Any], scenario_dir: str) -> dict[str, str]:
    """``to.rev`` resolved to a commit of ``to.repo`` (from the scenario's folder, which is
    the default): {"repo": the repository's root, "rev": the full commit id}; each error
    (no git, no repository, no such commit) at the line of its key."""
    raw = to.get("repo", "")
    repo = scenario_dir
    if raw:
        _template(doc, "repo", raw, ("scenario_dir",))
        repo = os.path.normpath(
            os.path.join(scenario_dir, fill(raw, {"scenario_dir": scenario_dir}))
        )
    try:
        root, sha = git_commit(repo, str(to["rev"]))
    except ValueError as exc:
        key = "rev" if "revision" in str(exc) or "git is not" in str(exc) else "repo"
        raise doc.err(key if raw or key == "rev" else "rev", str(exc)) from None
    return {"repo": root, "rev": sha}


def _find(node: yaml.Node | None, key: str) -> yaml.Node | None:
    """The value of ``key`` in the YAML mapping ``node`` (None if absent)."""
    if not isinstance(node, yaml.MappingNode):
        return None
    return next(
        (v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None
    )


def _python_script(doc: _Doc, agent: AgentSpec) -> None:
    """First contact for a version B run by another interpreter: its script must exist."""
    if not agent.command or agent.command[0] != "{python}":
        return
    rest = [a for a in agent.command[1:] if not a.startswith("-")]
    if not rest or "-m" in agent.command[1:2]:
        return
    script = _known(agent, rest[0])
    if script is not None:
        _existing_file(doc, agent, "the script", script)


def _resume_fits(doc: _Doc, families: tuple[ScenarioFamily, ...], restarts: int) -> None:
    """``upgrade`` and ``always_replay`` resume a crash: a trial needs a restart."""
    fam = next((f for f in families if f.family.chain[0][0] in REPLAY_KINDS), None)
    if fam is None or restarts >= 1:
        return
    raise ScenarioError(
        doc.path,
        doc.line("restarts"),
        "restarts",
        f"{fam.family.chain[0][0]} resumes a crash in the attempt after it, but restarts: 0 "
        "runs one attempt per trial; raise restarts to 1 or more",
    )


def _resumers_fit(doc: _Doc, families: tuple[ScenarioFamily, ...], restarts: int) -> None:
    """``resumers: {processes: k}`` starts k attempts at once, and they count as k of the
    ``1 + restarts`` a trial may run; one more must fit after them (the last of the group may
    be the one refused, and the run then resumes). Checked only where ``processes`` is given
    (a pair, today's default, runs whatever ``restarts`` says)."""
    for fam in families:
        for j, (kind, opts) in enumerate(fam.family.chain):
            k = dict(opts).get("processes")
            if kind != "resumers" or k is None or restarts >= j + int(k):
                continue
            raise ScenarioError(
                doc.path,
                doc.line("restarts") if "restarts" in doc.items else fam.line,
                "restarts",
                f"resumers.processes is {k}, but with restarts: {restarts} a trial runs at "
                f"most {1 + restarts} attempts: the {k} attempts started at once count as {k}"
                + (f" (after {j} before them in the chain)" if j else "")
                + f", and one more must fit after them to finish a run the last of them may "
                f"have been refused; raise restarts to {j + int(k)} or more",
            )


def _backing_restarts(doc: _Doc, families: tuple[ScenarioFamily, ...], restarts: int) -> None:
    """``backing`` with ``then: kill`` (the default) kills the attempt the outage hit at its
    next step report: an attempt must follow it (that it resumes after the step is the test)."""
    for fam in families:
        for j, (kind, opts) in enumerate(fam.family.chain):
            if kind != "backing" or dict(opts).get("then", "kill") != "kill" or restarts > j:
                continue
            raise ScenarioError(
                doc.path,
                doc.line("restarts") if "restarts" in doc.items else fam.line,
                "restarts",
                f"a backing fault kills the agent at its next step report after the outage "
                f"(then: kill), and with restarts: {restarts} no attempt follows to show the "
                f"step was durable; raise restarts to {j + 1} or more, or set then: continue",
            )


def _expect(doc: _Doc) -> Expect:
    doc.check_keys(EXPECT_KEYS)
    kw: dict[str, Any] = {}
    for key in EXPECT_KEYS:
        if key not in doc.items:
            continue
        v = doc.value(key)
        if key == "no_repeated_llm_calls":
            kw[key] = _llm_policy(doc)
        elif key == "crash_loop":
            kw[key], kw["crash_loop_within"] = _crash_loop(doc)
        elif key == "max_state_bytes":
            try:
                kw[key] = parse_size(v, what="expect.max_state_bytes")
            except UnitError as exc:
                raise doc.err(key, str(exc)) from exc
            if not 0 < kw[key] <= MAX_STATE_BYTES:
                raise doc.err(
                    key,
                    f"expect.max_state_bytes must be more than 0 and at most "
                    f"{format_size(MAX_STATE_BYTES)} (the cap), got {v!r}",
                )
        elif key == "refuse_patterns":
            if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
                raise doc.err(
                    key,
                    f"must be a list of regular expressions matched against "
                    f"the agent's stderr, got {v!r}",
                )
            for x in v:
                try:
                    re.compile(x)
                except re.error as exc:
                    raise doc.err(key, f"{x!r} is not a valid regular expression: {exc}") from None
            kw[key] = tuple(v)
        elif key == "max_retries":
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_RETRIES:
                raise doc.err(
                    key,
                    f"expect.max_retries must be a whole number from 0 to "
                    f"{MAX_RETRIES} (requests of one network call an attempt "
                    f"may send beyond the golden run's), got {v!r}",
                )
            kw[key] = v
        elif key in ("fail_stop_codes", "refuse_codes"):
            if not isinstance(v, list) or not all(
                isinstance(c, int) and not isinstance(c, bool) and 0 < c < 256 for c in v
            ):
                raise doc.err(key, f"must be a list of exit codes 1-255, got {v!r}")
            kw[key] = tuple(v)
        else:
            if not isinstance(v, bool):
                raise doc.err(key, f"must be true or false, got {v!r}")
            kw[key] = v
    # the checks asked for by name: one none of the trials could judge is not a pass
    # (``true``, or crash_loop's ``{within: N}``; a policy such as no_repeated_llm_calls:
    # fail says how to judge, not that there must be something to judge)
    kw["required"] = tuple(k for k in CHECKS if kw.get(k) is True)
    return Expect(**kw)


def _crash_loop(doc: _Doc) -> tuple[bool, int | None]:
    """``expect.crash_loop``: true (the default), false (off) or {within: N}."""
    key = "crash_loop"
    node = doc.items[key][0]
    usage = (
        "use true (the default: the agent must stop before the restarts run out), false "
        "(off), or {within: N} (it must have stopped by attempt N)"
    )
    if isinstance(node, yaml.MappingNode):
        sub = _Doc(doc.path, node, doc._k(key))
        sub.check_keys(("within",))
        if "within" not in sub.items:
            raise doc.err(key, f"a mapping needs within: {usage}")
        return True, _int(
            sub,
            "within",
            2,
            2,
            MAX_RESTARTS + 1,
            " (the attempt by which the agent must have stopped; attempt 1 is the one the "
            "persistent fault hits first)",
        )
    v = doc.value(key)
    if isinstance(v, bool):
        return v, None
    raise doc.err(key, f"got {v!r}: {usage}")


def _llm_policy(doc: _Doc) -> str | int:
    """``expect.no_repeated_llm_calls``: fail, warn, false (off) or {max_tokens: N}."""
    key = "no_repeated_llm_calls"
    node = doc.items[key][0]
    usage = (
        "use fail, warn (the default: reported, not a failure), false (off), or "
        "{max_tokens: N} (fail only past N re-billed tokens)"
    )
    if isinstance(node, yaml.MappingNode):
        sub = _Doc(doc.path, node, doc._k(key))
        sub.check_keys(("max_tokens",))
        if "max_tokens" not in sub.items:
            raise doc.err(key, f"a token budget needs max_tokens: {usage}")
        return _int(sub, "max_tokens", 0, 0, 2**63 - 1, " (re-billed tokens allowed)")
    v = doc.value(key)
    if v is False:
        return "off"
    if v in ("fail", "warn"):
        return str(v)
    raise doc.err(key, f"got {v!r}: {usage}")


# -- first contact: is the agent where the scenario says? ------------------------------------


def _first_contact(doc: _Doc, agent: AgentSpec) -> None:
    """One clear line, at collection, for an agent that cannot start: a program not on PATH
    (or not executable), a ``{python}`` script or ``-m`` module, or an ``entry`` module, that
    does not exist where the agent will look. Cheap: no import, no process."""
    env = dict(agent.env)
    if agent.entry:
        module = agent.entry.partition(":")[0]
        if not _module_found(module, agent, env):
            raise doc.err(
                "entry",
                f"module {module!r} not found: it must be importable by "
                f"the agent's interpreter ({_where_python(agent)})",
            )
        return
    filled = _known(agent, agent.command[0])
    if agent.command[0] == "{python}":
        _python_target(doc, agent, env)
    elif filled is not None:
        _program(doc, agent, env, filled)


def _known(agent: AgentSpec, part: str) -> str | None:
    """``part`` with {scenario_dir} filled, or None if it names a per-trial folder."""
    if set(fields(part)) - {"scenario_dir", "python"}:
        return None
    return fill(part, {"scenario_dir": agent.scenario_dir, "python": sys.executable})


def _where_python(agent: AgentSpec) -> str:
    cwd = agent.cwd or "the trial's empty {workdir}"
    return f"installed, in its working folder ({cwd}), or on PYTHONPATH"


def _module_found(module: str, agent: AgentSpec, env: dict[str, str]) -> bool:
    top = module.split(".")[0]
    try:
        if importlib.util.find_spec(top) is not None:  # top level: imports nothing
            return True
    except (ImportError, ValueError):
        return True  # cannot tell: let the agent's own run say
    paths = [agent.cwd] if agent.cwd else []
    paths += [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x]
    return importlib.machinery.PathFinder.find_spec(top, paths) is not None


def _relative_hint(what: str, rel: str, agent: AgentSpec) -> str:
    if agent.cwd:
        return f"{what} {rel!r} not found in the agent's working folder {agent.cwd}"
    beside = os.path.join(agent.scenario_dir, rel)
    hint = (
        f"; it is beside the scenario: write '{{scenario_dir}}/{rel}'"
        if os.path.exists(beside)
        else "; give its path, e.g. '{scenario_dir}/...'"
    )
    return (
        f"{what} {rel!r} is relative, and the agent starts in the trial's empty "
        f"{{workdir}} (no agent.cwd){hint}"
    )


def _missing(what: str, given: str, full: str, agent: AgentSpec) -> str:
    if os.path.isabs(given):
        return f"{what} {full} does not exist ('{{scenario_dir}}' is the scenario file's folder)"
    return f"{what} {given!r} not found in the agent's working folder {agent.cwd}"


def _python_target(doc: _Doc, agent: AgentSpec, env: dict[str, str]) -> None:
    """``{python} [options] script.py ...`` or ``{python} -m module ...``: does it exist?"""
    argv = list(agent.command[1:])
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-m" or (a.startswith("-m") and not a.startswith("--")):
            module = argv[i + 1] if a == "-m" and i + 1 < len(argv) else a[2:]
            if module and "{" not in module and not _module_found(module, agent, env):
                raise doc.err(
                    "command",
                    f"module {module!r} (after -m) not found: it must be "
                    f"importable by {{python}} ({_where_python(agent)})",
                )
            return
        if a == "-c" or a.startswith("-c") or a == "-":
            return
        if a in _PY_OPTS_WITH_ARG:
            i += 2
            continue
        if a.startswith("-"):
            i += 1
            continue
        script = _known(agent, a)
        if script is None:
            return
        _existing_file(doc, agent, "the script", script)
        return


def _existing_file(doc: _Doc, agent: AgentSpec, what: str, path: str) -> str:
    """``path`` (absolute, or relative to the agent's cwd) as an existing file, else the
    ``agent.command`` error that says what is missing and where it was looked for."""
    full = path if os.path.isabs(path) else os.path.join(agent.cwd, path) if agent.cwd else None
    if full is None:
        raise doc.err("command", _relative_hint(what, path, agent))
    if not os.path.isfile(full):
        raise doc.err("command", _missing(what, path, full, agent))
    return full


def _program(doc: _Doc, agent: AgentSpec, env: dict[str, str], program: str) -> None:
    """The first part of a command: a program on PATH, or a path to an executable file."""
    if "/" not in program:
        search = env.get("PATH", os.environ.get("PATH", os.defpath))
        if shutil.which(program, path=search) is None:
            raise doc.err(
                "command",
                f"{program!r} not found on PATH; fix the name, install "
                "it, or give its path (e.g. '{scenario_dir}/my-agent')",
            )
        return
    full = _existing_file(doc, agent, "the program", program)
    if not os.access(full, os.X_OK):
        raise doc.err(
            "command",
            f"the program {full} is not executable (chmod +x it, or run "
            "it through its interpreter, e.g. [sh, ...])",
        )
