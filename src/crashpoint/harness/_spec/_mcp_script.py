"""The ``services.mcp`` section: the tools of the MCP tool-server stand-in.

.. code-block:: yaml

    services:
      mcp:
        name: tickets                  # serverInfo.name (default "crashpoint")
        response: json                 # json (default) or sse: how a POST is answered
        tools:
          create_ticket:
            description: Open a ticket
            input_schema: {type: object, properties: {title: {type: string}}, required: [title]}
            effect: ticket             # the effect's kind (default: the tool's name);
                                       # false: a read, recorded as an event, no effect
            key: request_id            # the argument whose value keys the effect (optional)
            reply: "opened {title}"    # the result's text; {arg} is that argument's value;
                                       # a mapping is sent as JSON text and structuredContent

Each ``tools/call`` is an effect in the ledger: kind ``effect``, payload the arguments (less
the key argument), key the key argument's value when the tool declares one (so
``exactly_once`` judges it by key; else by content). No I/O here: the stand-in is
:mod:`crashpoint.harness._standins._mcp`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crashpoint.errors import ServiceSpecError

__all__ = ["MCP_RESPONSES", "MCPScript", "MCPTool", "parse_mcp_script"]

#: How the streamable-HTTP transport answers a POST with requests in it.
MCP_RESPONSES = ("json", "sse")
#: A tool's name, as the MCP specification allows it.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_KEYS = ("name", "response", "tools")
_TOOL_KEYS = ("description", "input_schema", "effect", "key", "reply")
_ARG = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class MCPTool:
    """One scripted tool: ``effect`` None for a read (an event, no effect)."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    effect: str | None
    key: str | None
    reply: str | Mapping[str, Any]

    def reply_text(self, arguments: Mapping[str, Any]) -> str:
        """The result's text: ``reply`` with ``{arg}`` filled from the arguments (a mapping
        reply: its JSON, keys sorted)."""
        if not isinstance(self.reply, str):
            return json.dumps(self.reply, sort_keys=True)

        def arg(m: re.Match[str]) -> str:
            v = arguments.get(m.group(1), m.group(0))
            return v if isinstance(v, str) else json.dumps(v, sort_keys=True)

        return _ARG.sub(arg, self.reply)

    def to_json(self) -> dict[str, Any]:
        """The tool as ``tools/list`` gives it."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": dict(self.input_schema),
        }


@dataclass(frozen=True)
class MCPScript:
    """A parsed ``services.mcp``."""

    tools: tuple[MCPTool, ...] = ()
    name: str = "crashpoint"
    response: str = "json"

    def tool(self, name: str) -> MCPTool | None:
        return next((t for t in self.tools if t.name == name), None)


def parse_mcp_script(raw: Any) -> MCPScript:
    """Validate a ``services.mcp`` mapping; :class:`ServiceSpecError` names the key."""
    top = ("services", "mcp")
    if raw is True or raw is None:
        return MCPScript()
    if not isinstance(raw, dict):
        raise ServiceSpecError(top, f"must be a mapping {{tools: {{NAME: {{...}}}}}}, got {raw!r}")
    for k in raw:
        if k not in _KEYS:
            raise ServiceSpecError((*top, str(k)), f"unknown key; allowed: {', '.join(_KEYS)}")
    name = raw.get("name", "crashpoint")
    if not isinstance(name, str) or not name:
        raise ServiceSpecError((*top, "name"), f"must be a non-empty string, got {name!r}")
    response = raw.get("response", "json")
    if response not in MCP_RESPONSES:
        raise ServiceSpecError(
            (*top, "response"), f"must be one of {', '.join(MCP_RESPONSES)}, got {response!r}"
        )
    table = raw.get("tools") or {}
    if not isinstance(table, dict):
        raise ServiceSpecError(
            (*top, "tools"), "must map tool names to tools, e.g. {create_ticket: {key: id}}"
        )
    tools = []
    for tname, t in table.items():
        where = (*top, "tools", str(tname))
        if not isinstance(tname, str) or not TOOL_NAME.match(tname):
            raise ServiceSpecError(where, "a tool's name is 1-128 letters, digits, '_', '-' or '.'")
        t = {} if t is None else t
        if not isinstance(t, dict):
            raise ServiceSpecError(where, f"must be a mapping ({', '.join(_TOOL_KEYS)}), got {t!r}")
        for k in t:
            if k not in _TOOL_KEYS:
                raise ServiceSpecError(
                    (*where, str(k)), f"unknown key; allowed: {', '.join(_TOOL_KEYS)}"
                )
        desc = t.get("description", "")
        if not isinstance(desc, str):
            raise ServiceSpecError((*where, "description"), "must be a string")
        schema = t.get("input_schema", {"type": "object"})
        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            raise ServiceSpecError(
                (*where, "input_schema"),
                "must be a JSON Schema of an object, e.g. {type: object, properties: {...}}",
            )
        effect = t.get("effect", tname)
        if effect is False:
            effect = None
        elif not isinstance(effect, str) or not effect:
            raise ServiceSpecError(
                (*where, "effect"), f"must be the effect's kind (a string) or false, got {effect!r}"
            )
        key = t.get("key")
        if key is not None and (not isinstance(key, str) or not key):
            raise ServiceSpecError((*where, "key"), f"must be an argument's name, got {key!r}")
        if key is not None and effect is None:
            raise ServiceSpecError((*where, "key"), "a read (effect: false) takes no key")
        reply = t.get("reply", f"{tname}: done")
        if not isinstance(reply, (str, dict)):
            raise ServiceSpecError((*where, "reply"), "must be a string or a mapping")
        tools.append(MCPTool(tname, desc, {"type": "object", **schema}, effect, key, reply))
    return MCPScript(tuple(tools), name, response)
