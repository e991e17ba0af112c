"""The MCP tool-server stand-in: JSON-RPC 2.0 as the Model Context Protocol speaks it, written
from the specification (no ``mcp`` dependency).

Methods: ``initialize`` (the handshake: a protocol version the client asked for if it is one of
:data:`VERSIONS`, else the newest; capabilities ``tools``; a new ``Mcp-Session-Id``), the
``notifications/initialized`` notification, ``ping``, ``tools/list`` (the scenario's tools, see
:mod:`crashpoint.harness._spec._mcp_script`) and ``tools/call``. Anything else is a JSON-RPC
error (``-32601`` method not found, ``-32602`` a bad tool or argument, ``-32600`` a bad
message), never a traceback.

**Streamable HTTP** (the ledger's front serves it at ``{mcp}``, see :mod:`._http`): one message
per POST (a batch is refused); a notification or a response is answered ``202 Accepted``, a
request with its JSON-RPC response as ``application/json`` or, with ``services.mcp.response:
sse``, as one server-sent event. ``initialize`` opens a session: every later request must carry
its ``Mcp-Session-Id`` (missing: 400; unknown or ended: 404, so the client starts again);
``DELETE`` ends it; ``GET`` (a stream of server-initiated messages) is 405: the stand-in sends
none. **stdio**: ``{mcp_stdio}`` runs :mod:`._mcp_stdio`, which relays each line to the same
endpoint, so both transports share this one server and its ledger.

A ``tools/call`` is an effect of the ledger (:meth:`MCPStandIn.tool_event`): kind the tool's
``effect``, payload its arguments less the key argument, key that argument's value when the
tool declares one and the call carries it, and ``mcp_tool`` the tool's name (its network call,
``mcp TOOL``: a boundary to kill at and a call the ``network`` family fails). A read tool
(``effect: false``) is an ``event`` named ``mcp TOOL``.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crashpoint.harness._spec import MCPScript, MCPTool

__all__ = [
    "ENV_MCP",
    "ENV_MCP_STDIO",
    "SESSION_HEADER",
    "VERSIONS",
    "MCPAnswer",
    "MCPStandIn",
    "ToolCall",
]

#: The agent's environment: ``{mcp}`` and ``{mcp_stdio}``.
ENV_MCP = "CRASHPOINT_MCP"
ENV_MCP_STDIO = "CRASHPOINT_MCP_STDIO"

#: The protocol revisions the stand-in's handshake accepts, oldest first.
VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
SESSION_HEADER = "Mcp-Session-Id"
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


@dataclass(frozen=True)
class MCPAnswer:
    """An HTTP answer: ``status``, ``headers``, ``body`` (empty for 202)."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def message(self) -> dict[str, Any] | None:
        """The JSON-RPC message in the body (JSON or one server-sent event), if any."""
        text = self.body.decode()
        if text.startswith("event:"):
            text = next(ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:"))
        return json.loads(text) if text else None


@dataclass(frozen=True)
class ToolCall:
    """A ``tools/call`` request to record in the ledger before it is answered."""

    id: Any
    tool: MCPTool
    arguments: dict[str, Any]
    session: str

    @property
    def call(self) -> str:
        """Its network call, as the ledger names it (``mcp TOOL``)."""
        return f"mcp {self.tool.name}"


class MCPStandIn:
    """The stand-in of one trial: the scenario's ``services.mcp`` and the open sessions.
    Thread-safe (the front serves connections concurrently)."""

    def __init__(self, script: MCPScript | None = None) -> None:
        self.script = script or MCPScript()
        self._sessions: set[str] = set()
        self._lock = threading.Lock()

    # -- the transport ---------------------------------------------------------------------

    def delete(self, sid: str) -> MCPAnswer:
        """``DELETE``: end the session ``sid`` (the request's ``Mcp-Session-Id``)."""
        with self._lock:
            if sid not in self._sessions:
                return self._error(404, None, INVALID_REQUEST, f"no session {sid!r}")
            self._sessions.discard(sid)
        return MCPAnswer(200)

    def receive(self, body: bytes, sid: str) -> MCPAnswer | ToolCall:
        """A POSTed message (``sid``: the request's ``Mcp-Session-Id``, "" without): its
        answer, or the tool call to record first (then :meth:`tool_result`)."""
        try:
            msg = json.loads(body or b"")
        except (ValueError, UnicodeDecodeError):
            return self._error(400, None, PARSE_ERROR, "Parse error: the body is not JSON")
        if isinstance(msg, list):
            return self._error(
                400,
                None,
                INVALID_REQUEST,
                "a batch is not supported (MCP 2025-06-18 removed batching): POST one "
                "message at a time",
            )
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            return self._error(
                400,
                None,
                INVALID_REQUEST,
                'Invalid Request: a JSON-RPC 2.0 object ("jsonrpc": "2.0")',
            )
        method = msg.get("method")
        rid = msg.get("id")
        if method is None or "id" not in msg:  # a response or a notification: accepted
            if method is not None and not isinstance(method, str):
                return self._error(400, None, INVALID_REQUEST, "method must be a string")
            return MCPAnswer(202)
        if not isinstance(method, str):
            return self._error(400, rid, INVALID_REQUEST, "method must be a string")
        params = msg.get("params") or {}
        if not isinstance(params, dict):
            return self._error(200, rid, INVALID_PARAMS, "params must be an object")
        if method == "initialize":
            return self._initialize(rid, params)
        if method not in ("ping", "tools/list", "tools/call"):  # e.g. a newer client's
            # server/discover probe, which falls back to initialize on this answer
            return self._error(200, rid, METHOD_NOT_FOUND, f"Method not found: {method}")
        with self._lock:
            known = sid in self._sessions
        if not sid:
            return self._error(
                400,
                rid,
                INVALID_REQUEST,
                f"Bad Request: no {SESSION_HEADER} header (initialize first)",
            )
        if not known:
            return self._error(404, rid, INVALID_REQUEST, f"Session not found: {sid!r}")
        if method == "ping":
            return self._result(rid, {}, sid)
        if method == "tools/list":
            return self._result(rid, {"tools": [t.to_json() for t in self.script.tools]}, sid)
        return self._tool_call(rid, params, sid)

    # -- the methods -----------------------------------------------------------------------

    def _initialize(self, rid: Any, params: dict[str, Any]) -> MCPAnswer:
        asked = params.get("protocolVersion")
        version = asked if asked in VERSIONS else VERSIONS[-1]
        sid = uuid.uuid4().hex
        with self._lock:
            self._sessions.add(sid)
        return self._result(
            rid,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.script.name, "version": "1.0.0"},
            },
            sid,
        )

    def _tool_call(self, rid: Any, params: dict[str, Any], sid: str) -> MCPAnswer | ToolCall:
        name = params.get("name")
        tool = self.script.tool(name) if isinstance(name, str) else None
        if tool is None:
            known = ", ".join(t.name for t in self.script.tools) or "none (services.mcp.tools)"
            return self._error(200, rid, INVALID_PARAMS, f"Unknown tool: {name!r} (tools: {known})")
        args = params.get("arguments") or {}
        if not isinstance(args, dict):
            return self._error(200, rid, INVALID_PARAMS, "arguments must be an object")
        required = tool.input_schema.get("required") or []
        missing = [r for r in required if isinstance(r, str) and r not in args]
        if missing:
            return self._error(
                200,
                rid,
                INVALID_PARAMS,
                f"Invalid arguments for tool {tool.name}: missing {', '.join(missing)}",
            )
        return ToolCall(rid, tool, args, sid)

    def tool_event(self, call: ToolCall) -> dict[str, Any]:
        """The ledger message of ``call`` (without who sent it)."""
        tool = call.tool
        if tool.effect is None:
            return {"op": "event", "name": call.call, "mcp_tool": tool.name, "via": "mcp"}
        payload = {k: v for k, v in call.arguments.items() if k != tool.key}
        msg: dict[str, Any] = {
            "op": "effect",
            "kind": tool.effect,
            "payload": payload,
            "mcp_tool": tool.name,
            "via": "mcp",
        }
        key = call.arguments.get(tool.key) if tool.key else None
        if key is not None and key != "":
            msg["key"] = key if isinstance(key, str) else json.dumps(key, sort_keys=True)
        return msg

    def tool_result(self, call: ToolCall, ledger_reply: Mapping[str, Any]) -> MCPAnswer:
        """The answer to ``call`` once the ledger recorded it (``ledger_reply``: its reply;
        an error there is a JSON-RPC error)."""
        if not ledger_reply.get("ok"):
            return self._error(
                200,
                call.id,
                INVALID_PARAMS,
                f"the ledger refused the call: {ledger_reply.get('error')}",
            )
        text = call.tool.reply_text(call.arguments)
        result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
        if not isinstance(call.tool.reply, str):
            result["structuredContent"] = dict(call.tool.reply)
        return self._result(call.id, result, call.session)

    # -- the answers -----------------------------------------------------------------------

    def _body(self, obj: dict[str, Any]) -> tuple[bytes, str]:
        data = json.dumps(obj, separators=(",", ":"))
        if self.script.response == "sse":
            return f"event: message\ndata: {data}\n\n".encode(), "text/event-stream"
        return data.encode(), "application/json"

    def _result(self, rid: Any, result: dict[str, Any], sid: str) -> MCPAnswer:
        body, ctype = self._body({"jsonrpc": "2.0", "id": rid, "result": result})
        return MCPAnswer(200, (("Content-Type", ctype), (SESSION_HEADER, sid)), body)

    def _error(self, status: int, rid: Any, code: int, message: str) -> MCPAnswer:
        obj = {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}
        if status != 200:  # a transport error: plain JSON whatever the script's response
            return MCPAnswer(
                status, (("Content-Type", "application/json"),), json.dumps(obj).encode()
            )
        body, ctype = self._body(obj)
        return MCPAnswer(200, (("Content-Type", ctype),), body)
