"""Scenario files (Contract 3): ``*.scenario.yaml``, loaded safely, validated with line numbers.

A malformed file raises :class:`ScenarioError` naming the file, the line and the key, and how
to fix it. Loading runs no code (``yaml.SafeLoader``; no tags, no eval).
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from crashpoint._units import UnitError, parse_duration, parse_size
from crashpoint.errors import CrashpointError
from crashpoint.harness._campaign import (
    FAMILY_KINDS,
    FaultFamily,
    family_from_spec,
    parse_budget,
)
from crashpoint.harness._model import AgentSpec, Expect

__all__ = ["SUFFIX", "Scenario", "ScenarioError", "load_scenario"]

SUFFIX = ".scenario.yaml"
TOP_KEYS = ("name", "agent", "faults", "restarts", "trials", "seed", "expect", "marks", "mode",
            "description", "budget")
AGENT_KEYS = ("command", "entry", "args", "timeout", "env", "cwd")
EXPECT_KEYS = ("exactly_once", "resumes_from_last_completed", "same_output", "single_writer",
               "no_secret_leak", "no_orphans", "max_state_bytes", "fail_stop_codes",
               "refuse_codes")


class ScenarioError(CrashpointError, ValueError):
    """A scenario file that cannot be run: where (file, line, key), what, and how to fix it."""

    def __init__(self, path: str, line: int | None, key: str, message: str) -> None:
        self.path, self.line, self.key, self.message = path, line, key, message
        super().__init__(path, line, key, message)

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        k = f" (key '{self.key}')" if self.key else ""
        return f"{where}{k}: {self.message}"

    def __reduce__(self) -> tuple[type[ScenarioError], tuple[str, int | None, str, str]]:
        return (type(self), (self.path, self.line, self.key, self.message))


@dataclass(frozen=True)
class Family:
    """One ``faults:`` item with the line it is on."""

    family: FaultFamily
    line: int


@dataclass(frozen=True)
class Scenario:
    path: str
    name: str
    agent: AgentSpec
    families: tuple[Family, ...]
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
            raise ScenarioError(path, node.start_mark.line + 1, where,
                                f"{where or 'the document'} must be a mapping (key: value)")
        self.items: dict[str, tuple[yaml.Node, int]] = {}
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else str(knode)
            if key in self.items:
                raise ScenarioError(path, knode.start_mark.line + 1, self._k(key),
                                    "the key appears twice")
            self.items[key] = (vnode, knode.start_mark.line + 1)

    def _k(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def check_keys(self, allowed: tuple[str, ...]) -> None:
        for key, (_, line) in self.items.items():
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise ScenarioError(self.path, line, self._k(key),
                                    f"unknown key; {hint}allowed: {', '.join(allowed)}")

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


def _int(doc: _Doc, key: str, default: int, lo: int = 0) -> int:
    v = doc.value(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise doc.err(key, f"must be a whole number >= {lo}, got {v!r}")
    return v


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read and validate one scenario file (see ``scenarios/README.md`` for the format)."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ScenarioError(p, None, "", f"cannot read the file: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(p, None, "", f"not UTF-8 text: {exc}") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise ScenarioError(p, mark.line + 1 if mark else None, "",
                            f"not valid YAML: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(p, None, "", f"not valid YAML: {exc}") from exc
    if node is None:
        raise ScenarioError(p, 1, "", "the file is empty; a scenario needs name, agent, faults")
    try:
        _plain(node)  # rejects tags and constructs nothing unsafe
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ScenarioError(p, mark.line + 1 if mark else None, "",
                            f"unsupported YAML: {getattr(exc, 'problem', exc)}") from exc
    doc = _Doc(p, node, "")
    doc.check_keys(TOP_KEYS)
    for required in ("name", "agent", "faults"):
        if required not in doc.items:
            raise ScenarioError(p, 1, required, f"missing required key '{required}'")
    name = doc.value("name")
    if not isinstance(name, str) or not name.strip():
        raise doc.err("name", "must be a non-empty string")
    agent = _agent(_Doc(p, doc.items["agent"][0], "agent"))
    families = tuple(_families(doc))
    expect = _expect(_Doc(p, doc.items["expect"][0], "expect")) if "expect" in doc.items \
        else Expect()
    marks = doc.value("marks", [])
    if not isinstance(marks, list) or not all(isinstance(m, str) and m.isidentifier()
                                              for m in marks):
        raise doc.err("marks", "must be a list of marker names, e.g. [slow]")
    mode = doc.value("mode")
    if mode not in (None, "systematic", "random"):
        raise doc.err("mode", f"must be systematic or random, got {mode!r}")
    seed = doc.value("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise doc.err("seed", f"must be an integer, got {seed!r}")
    budget = None
    if "budget" in doc.items:
        try:
            budget = parse_budget(doc.value("budget"), what="")
        except UnitError as exc:
            raise doc.err("budget", f"{exc}; or none for no limit") from exc
    return Scenario(p, name.strip(), agent, families, _int(doc, "restarts", 3),
                    _int(doc, "trials", 50), seed, expect, tuple(marks), mode, 1, budget=budget,
                    agent_line=doc.line("agent"))


def _agent(doc: _Doc) -> AgentSpec:
    doc.check_keys(AGENT_KEYS)
    command = doc.value("command")
    entry = doc.value("entry", "")
    if (command is None) == (not entry):
        raise doc.err("command", "give exactly one of 'command' (a list of arguments) or "
                                 "'entry' (module:function)")
    if isinstance(command, str):
        command = shlex.split(command)
    if command is not None and (not isinstance(command, list) or not command
                                or not all(isinstance(c, (str, int, float)) for c in command)):
        raise doc.err("command", "must be a non-empty list of strings, e.g. "
                                 '["{python}", "-m", "mypkg.agent", "--state", "{state_dir}"]')
    if entry and (not isinstance(entry, str) or ":" not in entry):
        raise doc.err("entry", f"must be 'module:function', got {entry!r}")
    for part in command or []:
        try:
            str(part).format_map({"python": "", "state_dir": "", "workdir": "", "run_id": ""})
        except (KeyError, ValueError, IndexError) as exc:
            raise doc.err("command", f"unknown placeholder in {part!r}: {exc}; use {{python}}, "
                                     "{state_dir}, {workdir}, {run_id} (double braces for a "
                                     "literal brace)") from exc
    try:
        timeout = parse_duration(doc.value("timeout", "30s"), what="agent.timeout")
    except UnitError as exc:
        raise doc.err("timeout", str(exc)) from exc
    env = doc.value("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) for k in env):
        raise doc.err("env", "must be a mapping of variable names to values")
    args = doc.value("args", [])
    if not isinstance(args, list):
        raise doc.err("args", "must be a list of strings")
    if args and command is not None:
        raise doc.err("args", "goes with 'entry' (the function's arguments); with 'command' put "
                              "the arguments in the command list")
    return AgentSpec(tuple(str(c) for c in (command or ())), str(entry or ""), timeout,
                     tuple(sorted((k, str(v)) for k, v in env.items())),
                     str(doc.value("cwd", "") or ""), tuple(str(a) for a in args))


def _families(doc: _Doc) -> Iterator[Family]:
    node, line = doc.items["faults"]
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        raise ScenarioError(doc.path, line, "faults", "must be a non-empty list of fault "
                                                      f"families ({', '.join(FAMILY_KINDS)})")
    for i, item in enumerate(node.value):
        iline = item.start_mark.line + 1
        try:
            fam = family_from_spec(_plain(item))
        except (ValueError, TypeError) as exc:
            raise ScenarioError(doc.path, iline, f"faults[{i}]", str(exc)) from exc
        yield Family(fam, iline)


def _expect(doc: _Doc) -> Expect:
    doc.check_keys(EXPECT_KEYS)
    kw: dict[str, Any] = {}
    for key in EXPECT_KEYS:
        if key not in doc.items:
            continue
        v = doc.value(key)
        if key == "max_state_bytes":
            try:
                kw[key] = parse_size(v, what="expect.max_state_bytes")
            except UnitError as exc:
                raise doc.err(key, str(exc)) from exc
        elif key in ("fail_stop_codes", "refuse_codes"):
            if not isinstance(v, list) or not all(isinstance(c, int) and 0 < c < 256
                                                  for c in v):
                raise doc.err(key, "must be a list of exit codes 1-255")
            kw[key] = tuple(v)
        else:
            if not isinstance(v, bool):
                raise doc.err(key, f"must be true or false, got {v!r}")
            kw[key] = v
    return Expect(**kw)
