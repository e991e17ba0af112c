"""The LLM stand-in's script (``services.llm`` of a scenario): parsed and validated.

``replies`` (rules ``{match | regex, reply}``), ``function`` (``"module:attr"``, called with a
request view) and ``models`` (what ``GET /models`` lists). A reply is a string, ``{content:
<text>}`` or ``{tool_calls: [{name, arguments}]}``. A bad script raises
:class:`~crashpoint.errors.LLMScriptError` naming the key (relative to ``services.llm``), at
load time; the stand-in (:class:`crashpoint.harness._standins._llm.LLMStandIn`) answers with
the parsed :class:`LLMScript`.
"""

from __future__ import annotations

import difflib
import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from crashpoint.errors import LLMScriptError
from crashpoint.harness._spec._events import canonical

__all__ = [
    "DEFAULT_MODELS",
    "RULE_KEYS",
    "SCRIPT_KEYS",
    "LLMScript",
    "Reply",
    "Rule",
    "parse_llm_script",
    "parse_reply",
]

#: The keys of a scenario's ``services.llm`` mapping.
SCRIPT_KEYS = ("replies", "function", "models")
RULE_KEYS = ("match", "regex", "reply")
#: Models ``GET /models`` lists when the script names none.
DEFAULT_MODELS = ("crashpoint-stand-in",)


@dataclass(frozen=True)
class Reply:
    text: str | None
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, arguments as JSON text)


@dataclass(frozen=True)
class Rule:
    match: str | None
    regex: re.Pattern[str] | None
    reply: Reply

    def fits(self, text: str) -> bool:
        if self.match is not None and self.match not in text:
            return False
        return self.regex is None or self.regex.search(text) is not None


@dataclass(frozen=True)
class LLMScript:
    """A parsed ``services.llm``: the reply rules, the reply function, the models."""

    rules: tuple[Rule, ...] = ()
    function: Callable[[dict[str, Any]], Any] | None = None
    models: tuple[str, ...] = DEFAULT_MODELS


def parse_llm_script(script: dict[str, Any] | None) -> LLMScript:
    """Validate ``script`` (None: the deterministic echo); raise LLMScriptError naming the key."""
    if script is None:
        return LLMScript()
    if not isinstance(script, dict):
        raise LLMScriptError(
            "", f"services.llm must be a mapping ({', '.join(SCRIPT_KEYS)}), got {script!r}"
        )
    for k in script:
        if k not in SCRIPT_KEYS:
            close = difflib.get_close_matches(str(k), SCRIPT_KEYS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise LLMScriptError(str(k), f"unknown key; {hint}allowed: {', '.join(SCRIPT_KEYS)}")
    rules = _parse_rules(script["replies"]) if "replies" in script else ()
    function = _load_function(script["function"]) if "function" in script else None
    models = DEFAULT_MODELS
    if "models" in script:
        m = script["models"]
        if not isinstance(m, list) or not m or not all(isinstance(x, str) and x for x in m):
            raise LLMScriptError("models", f"must be a non-empty list of model names, got {m!r}")
        models = tuple(m)
    return LLMScript(rules, function, models)


def parse_reply(v: Any, key: str) -> Reply:
    if isinstance(v, str):
        return Reply(v)
    if isinstance(v, dict):
        extra = sorted(set(v) - {"content", "tool_calls"})
        if extra or not v:
            raise LLMScriptError(
                key,
                f"a reply is a string, {{content: <text>}} or "
                f"{{tool_calls: [{{name, arguments}}]}}; unknown key(s) "
                f"{', '.join(map(repr, extra)) or 'none given'}",
            )
        content = v.get("content")
        if content is not None and not isinstance(content, str):
            raise LLMScriptError(f"{key}.content", f"must be a string, got {content!r}")
        calls = v.get("tool_calls")
        if calls is None:
            return Reply(content)
        if not isinstance(calls, list) or not calls:
            raise LLMScriptError(
                f"{key}.tool_calls",
                f"must be a non-empty list of {{name, arguments}}, got {calls!r}",
            )
        out = []
        for i, c in enumerate(calls):
            ck = f"{key}.tool_calls[{i}]"
            if (
                not isinstance(c, dict)
                or set(c) - {"name", "arguments"}
                or not isinstance(c.get("name"), str)
                or not c.get("name")
            ):
                raise LLMScriptError(
                    ck,
                    f"a tool call is {{name: <function name>, arguments: "
                    f"<mapping or JSON text>}}, got {c!r}",
                )
            args = c.get("arguments", {})
            if isinstance(args, str):
                try:
                    json.loads(args)
                except ValueError:
                    raise LLMScriptError(f"{ck}.arguments", f"is not JSON: {args[:80]!r}") from None
                text = args
            elif isinstance(args, dict):
                text = canonical(args)
            else:
                raise LLMScriptError(
                    f"{ck}.arguments", f"must be a mapping or JSON text, got {args!r}"
                )
            out.append((c["name"], text))
        return Reply(content, tuple(out))
    raise LLMScriptError(
        key, f"a reply is a string, {{content: <text>}} or {{tool_calls: [...]}}, got {v!r}"
    )


def _parse_rules(v: Any) -> tuple[Rule, ...]:
    if not isinstance(v, list):
        raise LLMScriptError(
            "replies", f"must be a list of {{match|regex, reply}} rules, got {v!r}"
        )
    rules = []
    for i, r in enumerate(v):
        key = f"replies[{i}]"
        if not isinstance(r, dict):
            raise LLMScriptError(
                key, f"a rule is a mapping {{match: <text>, reply: ...}}, got {r!r}"
            )
        for k in r:
            if k not in RULE_KEYS:
                close = difflib.get_close_matches(str(k), RULE_KEYS, n=1)
                hint = f"did you mean '{close[0]}'? " if close else ""
                raise LLMScriptError(
                    f"{key}.{k}", f"unknown key; {hint}allowed: {', '.join(RULE_KEYS)}"
                )
        if "reply" not in r:
            raise LLMScriptError(key, "a rule needs a reply")
        match = r.get("match")
        if match is not None and not isinstance(match, str):
            raise LLMScriptError(
                f"{key}.match",
                f"must be a string (a substring of the last user message), got {match!r}",
            )
        pattern = r.get("regex")
        rx = None
        if pattern is not None:
            if not isinstance(pattern, str):
                raise LLMScriptError(
                    f"{key}.regex", f"must be a regular expression, got {pattern!r}"
                )
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                raise LLMScriptError(
                    f"{key}.regex", f"{pattern!r} is not a valid regular expression: {exc}"
                ) from None
        rules.append(Rule(match, rx, parse_reply(r["reply"], f"{key}.reply")))
    return tuple(rules)


def _load_function(spec: Any) -> Callable[[dict[str, Any]], Any]:
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise LLMScriptError("function", f"must be 'module:function', got {spec!r}")
    mod, attr = spec.split(":")
    try:
        obj: Any = importlib.import_module(mod)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # an import error of any kind is the script's problem
        raise LLMScriptError(
            "function",
            f"cannot load {spec!r}: {type(exc).__name__}: {exc} "
            "(is its folder on the harness's sys.path?)",
        ) from None
    if not callable(obj):
        raise LLMScriptError("function", f"{spec!r} is not callable")
    return obj  # type: ignore[no-any-return]
