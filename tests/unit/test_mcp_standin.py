"""The MCP tool-server stand-in: ``services.mcp`` parsed with errors that name the key; the
protocol (JSON-RPC 2.0, sessions, errors) on the stand-in itself; the real ``mcp`` client SDK
over streamable HTTP (JSON and SSE answers) and over stdio (the relay ``{mcp_stdio}`` starts),
each ``tools/call`` an effect in the ledger keyed by the tool's key argument; planned
``network`` faults of call ``mcp TOOL`` (reset: not applied; timeout: applied, the reply
withheld); a process outside the trial refused without the token. The end-to-end tests with an
agent killed at every boundary are tests/crash/test_mcp_agent.py."""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from _lazy import LazyModule, needs
from crashpoint.errors import FaultSpecError, ServiceSpecError
from crashpoint.harness import Ledger, family_from_spec
from crashpoint.harness._spec import Failure, NetFault, call_of, call_outcome, parse_services
from crashpoint.harness._standins._mcp import MCPAnswer, MCPStandIn, ToolCall
from crashpoint.harness._standins._mcp_stdio import relay

TOOLS: dict[str, Any] = {
    "create_ticket": {
        "description": "Open a ticket",
        "input_schema": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "request_id": {"type": "string"}},
            "required": ["title"],
        },
        "effect": "ticket",
        "key": "request_id",
        "reply": "opened: {title}",
    },
    "lookup": {"effect": False, "reply": {"found": True}},
}


def stand_in(**extra: Any) -> MCPStandIn:
    return MCPStandIn(parse_services({"mcp": {"tools": TOOLS, **extra}}).mcp)


# -- services.mcp ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "key", "says"),
    [
        ([1], "services.mcp", "must be a mapping"),
        ({"tool": {}}, "services.mcp.tool", "unknown key; allowed: name, response, tools"),
        ({"response": "xml"}, "services.mcp.response", "must be one of json, sse"),
        ({"tools": {"bad name": {}}}, "services.mcp.tools['bad name']", "1-128 letters"),
        ({"tools": {"t": {"effect": 3}}}, "services.mcp.tools.t.effect", "or false"),
        ({"tools": {"t": {"keys": "id"}}}, "services.mcp.tools.t.keys", "unknown key"),
        (
            {"tools": {"t": {"effect": False, "key": "id"}}},
            "services.mcp.tools.t.key",
            "a read (effect: false) takes no key",
        ),
        (
            {"tools": {"t": {"input_schema": {"type": "array"}}}},
            "services.mcp.tools.t.input_schema",
            "JSON Schema of an object",
        ),
    ],
)
def test_a_bad_mcp_section_names_its_key(raw: Any, key: str, says: str) -> None:
    with pytest.raises(ServiceSpecError) as err:
        parse_services({"mcp": raw})
    assert err.value.key == key
    assert says in err.value.message


def test_a_tool_defaults_and_its_reply_fills_in_arguments() -> None:
    script = parse_services({"mcp": {"tools": {"ping_me": None}}}).mcp
    (tool,) = script.tools
    assert (tool.effect, tool.key, tool.reply) == ("ping_me", None, "ping_me: done")
    assert tool.to_json()["inputSchema"] == {"type": "object"}
    t = stand_in().script.tool("create_ticket")
    assert t is not None
    assert t.reply_text({"title": "disk full"}) == "opened: disk full"
    assert t.reply_text({}) == "opened: {title}"  # an argument not given stays as written


def test_the_network_family_takes_an_mcp_call() -> None:
    family_from_spec({"network": {"call": "mcp create_ticket", "fail": "timeout"}})
    with pytest.raises(FaultSpecError, match="mcp TOOL"):
        family_from_spec({"network": {"call": "mcp bad name", "fail": "timeout"}})


# -- the protocol, on the stand-in -------------------------------------------------------------


def rpc(method: str, params: dict[str, Any] | None = None, rid: Any = 1) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if rid is not None:
        msg["id"] = rid
    return json.dumps(msg).encode()


def session(s: MCPStandIn) -> str:
    a = s.receive(rpc("initialize", {"protocolVersion": "2025-06-18"}), "")
    assert isinstance(a, MCPAnswer)
    result = a.message()
    assert result is not None
    assert result["result"]["protocolVersion"] == "2025-06-18"
    assert result["result"]["capabilities"] == {"tools": {"listChanged": False}}
    return dict(a.headers)["Mcp-Session-Id"]


def error_of(a: MCPAnswer | ToolCall) -> tuple[int, int, str]:
    assert isinstance(a, MCPAnswer)
    m = a.message()
    assert m is not None
    return a.status, m["error"]["code"], m["error"]["message"]


def test_the_protocol_answers_and_refuses_as_the_spec_says() -> None:
    s = stand_in()
    sid = session(s)
    newest = s.receive(rpc("initialize", {"protocolVersion": "1999-01-01"}), "")
    assert isinstance(newest, MCPAnswer)
    assert (newest.message() or {})["result"]["protocolVersion"] == "2025-11-25"
    assert s.receive(rpc("notifications/initialized", rid=None), sid) == MCPAnswer(202)
    listed = s.receive(rpc("tools/list"), sid)
    assert isinstance(listed, MCPAnswer)
    assert [t["name"] for t in (listed.message() or {})["result"]["tools"]] == [
        "create_ticket",
        "lookup",
    ]
    assert error_of(s.receive(rpc("tools/list"), ""))[:2] == (400, -32600)
    assert error_of(s.receive(rpc("tools/list"), "nope"))[:2] == (404, -32600)
    assert error_of(s.receive(b"{", sid))[:2] == (400, -32700)
    assert "batch" in error_of(s.receive(b"[]", sid))[2]
    assert error_of(s.receive(rpc("prompts/list"), sid))[:2] == (200, -32601)
    assert error_of(s.receive(rpc("server/discover"), ""))[:2] == (200, -32601)  # no session
    status, code, msg = error_of(s.receive(rpc("tools/call", {"name": "nope"}), sid))
    assert (status, code) == (200, -32602)
    assert "Unknown tool: 'nope' (tools: create_ticket, lookup)" in msg
    missing = s.receive(rpc("tools/call", {"name": "create_ticket", "arguments": {}}), sid)
    assert "missing title" in error_of(missing)[2]
    assert s.delete(sid) == MCPAnswer(200)
    assert error_of(s.receive(rpc("ping"), sid))[:2] == (404, -32600)  # the session ended


def test_a_tool_call_becomes_a_keyed_effect_a_keyless_one_or_an_event() -> None:
    s = stand_in()
    sid = session(s)
    args = {"title": "disk full", "request_id": "job-1"}
    call = s.receive(rpc("tools/call", {"name": "create_ticket", "arguments": args}), sid)
    assert isinstance(call, ToolCall)
    assert call.call == "mcp create_ticket"
    ev = s.tool_event(call)
    assert ev == {
        "op": "effect",
        "kind": "ticket",
        "payload": {"title": "disk full"},
        "key": "job-1",
        "mcp_tool": "create_ticket",
        "via": "mcp",
    }
    assert call_of(ev) == "mcp create_ticket"
    keyless = s.receive(
        rpc("tools/call", {"name": "create_ticket", "arguments": {"title": "x"}}), sid
    )
    assert isinstance(keyless, ToolCall)
    assert "key" not in s.tool_event(keyless)
    read = s.receive(rpc("tools/call", {"name": "lookup"}), sid)
    assert isinstance(read, ToolCall)
    assert s.tool_event(read) == {
        "op": "event",
        "name": "mcp lookup",
        "mcp_tool": "lookup",
        "via": "mcp",
    }
    done = s.tool_result(call, {"ok": True, "applied": False}).message() or {}
    assert done["result"] == {
        "content": [{"type": "text", "text": "opened: disk full"}],
        "isError": False,
    }


def test_an_sse_answer_is_one_event() -> None:
    s = stand_in(response="sse")
    a = s.receive(rpc("initialize"), "")
    assert isinstance(a, MCPAnswer)
    assert dict(a.headers)["Content-Type"] == "text/event-stream"
    assert a.body.startswith(b"event: message\ndata: {")


# -- the real client, on the ledger's front ----------------------------------------------------

pytestmark = needs("mcp", reason="the mcp client SDK is a test-only dependency")
mcp = LazyModule("mcp")


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    spec = parse_services({"mcp": {"tools": TOOLS}})
    with Ledger(
        history_path=str(tmp_path / "history.jsonl"), http=True, services=spec, idle_timeout=2
    ) as led:
        led.begin_attempt(1, None)
        yield led


async def _use(streams: Any) -> list[str]:
    from mcp import ClientSession

    out = []
    async with ClientSession(streams[0], streams[1]) as s:
        init = await s.initialize()
        out.append(init.server_info.name)
        out += [t.name for t in (await s.list_tools()).tools]
        r = await s.call_tool("create_ticket", {"title": "disk full", "request_id": "job-1"})
        out.append(r.content[0].text)
        r = await s.call_tool("create_ticket", {"title": "disk full", "request_id": "job-1"})
        out.append(r.content[0].text)
        r = await s.call_tool("lookup", {})
        out.append(json.dumps(r.structured_content))
    return out


async def _over_http(url: str) -> list[str]:
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as streams:
        return await _use(streams)


async def _over_stdio(command: str) -> list[str]:
    from mcp.client.stdio import StdioServerParameters, stdio_client

    cmd = shlex.split(command)
    async with stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as streams:
        return await _use(streams)


EXPECTED = ["crashpoint", "create_ticket", "lookup", "opened: disk full", "opened: disk full"]


def _recorded(ledger: Ledger) -> list[tuple[Any, ...]]:
    return [
        (e["op"], e.get("kind") or e.get("name"), e.get("key"), e.get("applied"))
        for e in ledger.events
    ]


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_the_real_client_calls_tools_and_each_call_is_recorded(
    ledger: Ledger, transport: str
) -> None:
    if transport == "http":
        got = asyncio.run(_over_http(ledger.urls()["mcp"]))
    else:
        got = asyncio.run(_over_stdio(ledger.urls()["mcp_stdio"]))
    assert got == [*EXPECTED, '{"found": true}']
    # the second call with the same key was deduplicated: applied once
    assert _recorded(ledger) == [
        ("effect", "ticket", "job-1", True),
        ("effect", "ticket", "job-1", False),
        ("event", "mcp lookup", None, None),
    ]
    assert ledger.env()["CRASHPOINT_MCP"] == ledger.urls()["mcp"]
    assert ledger.token not in ledger.urls()["mcp_stdio"]


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_sse_answers_work_with_the_real_client(tmp_path: Path, transport: str) -> None:
    spec = parse_services({"mcp": {"tools": TOOLS, "response": "sse"}})
    with Ledger(history_path=str(tmp_path / "h.jsonl"), http=True, services=spec) as led:
        led.begin_attempt(1, None)
        if transport == "http":
            got = asyncio.run(_over_http(led.urls()["mcp"]))
        else:  # the relay reads the event and writes its message as a line
            got = asyncio.run(_over_stdio(led.urls()["mcp_stdio"]))
        assert got[:5] == EXPECTED


def post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes, str]:
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=10)
    try:
        conn.request("POST", u.path, body, headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader("Mcp-Session-Id") or ""
    except (ConnectionError, http.client.HTTPException) as exc:
        return 0, b"", type(exc).__name__
    finally:
        conn.close()


def _call(ledger: Ledger, key: str) -> tuple[int, bytes, str]:
    url = ledger.urls()["mcp"]
    _s, _b, sid = post(url, rpc("initialize"))
    args = {"title": "t", "request_id": key}
    return post(
        url,
        rpc("tools/call", {"name": "create_ticket", "arguments": args}),
        {"Mcp-Session-Id": sid},
    )


def test_a_reset_is_not_applied_and_a_timeout_is_applied_with_its_reply_lost(
    ledger: Ledger,
) -> None:
    ledger.net_faults = [
        NetFault("mcp create_ticket", Failure("reset"), nth=1),
        NetFault("mcp create_ticket", Failure("timeout", applied=True), nth=2),
    ]
    status, _body, end = _call(ledger, "k1")
    assert status == 0, end  # the connection reset, no reply
    status, _body, end = _call(ledger, "k2")
    assert status == 0, end  # withheld until the ledger's idle timeout, then reset
    reset, timeout = ledger.events
    assert (reset["failed"], call_outcome(reset), reset["applied"]) == ("reset", "failed", False)
    assert (timeout["failed"], call_outcome(timeout)) == ("timeout", "in_doubt")
    assert timeout["applied"] is True
    assert [f.fired for f in ledger.net_faults] == [1, 1]


def test_get_is_not_allowed_and_an_outsider_needs_the_token(tmp_path: Path) -> None:
    spec = parse_services({"mcp": {"tools": TOOLS}})
    with Ledger(
        history_path=str(tmp_path / "h.jsonl"), http=True, services=spec, bound=True
    ) as led:
        led.begin_attempt(1, None)
        url = led.urls()["mcp"]
        status, body, _ = post(url, rpc("initialize"))  # this test's process: outside the trial
        assert status == 403
        assert b"forbidden" in body
        status, _body, sid = post(url, rpc("initialize"), {"X-Crashpoint-Token": led.token})
        assert status == 200
        assert sid
        u = urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=10)
        conn.request("GET", u.path, headers={"X-Crashpoint-Token": led.token})
        resp = conn.getresponse()
        assert (resp.status, resp.getheader("Allow")) == (405, "POST, DELETE")
        conn.close()


def test_the_relay_turns_a_bare_http_error_into_a_jsonrpc_error(ledger: Ledger) -> None:
    out = io.BytesIO()
    line = rpc("initialize", rid=7) + b"\n"
    bad = ledger.urls()["mcp"].replace("/mcp", "/nowhere")
    assert relay(bad, io.BytesIO(line), out) == 0
    (msg,) = [json.loads(x) for x in out.getvalue().splitlines()]
    assert msg["id"] == 7
    assert msg["error"]["message"].startswith("HTTP 404")


def test_the_relay_exits_when_its_client_closes_stdin_even_while_a_call_is_held(
    ledger: Ledger,
) -> None:
    import subprocess
    import time

    ledger.net_faults = [NetFault("mcp create_ticket", Failure("timeout", applied=True))]
    cmd = shlex.split(ledger.urls()["mcp_stdio"])
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(rpc("initialize") + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["result"]["serverInfo"]["name"] == "crashpoint"
        args = {"name": "create_ticket", "arguments": {"title": "t"}}
        proc.stdin.write(rpc("tools/call", args, rid=2) + b"\n")
        proc.stdin.flush()
        while not ledger.events:  # the call is applied, its reply held
            time.sleep(0.02)
        start = time.monotonic()
        proc.stdin.close()
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - start < 1.5  # not the ledger's idle timeout (2 s here)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_the_sdks_high_level_client_falls_back_to_the_handshake(ledger: Ledger) -> None:
    client_cls = getattr(mcp, "Client", None)
    if client_cls is None:
        pytest.skip("this mcp SDK has no high-level Client (mcp >= 2)")

    async def use() -> str:
        async with client_cls(ledger.urls()["mcp"]) as c:  # probes server/discover first
            r = await c.call_tool("create_ticket", {"title": "x", "request_id": "k"})
            return str(r.content[0].text)

    assert asyncio.run(use()) == "opened: x"
    assert _recorded(ledger) == [("effect", "ticket", "k", True)]


def test_the_relay_exits_1_quietly_when_its_connection_drops_while_stdin_is_open(
    ledger: Ledger,
) -> None:
    """A reset ends the relay as a crashed server ends its pipe: exit 1 with one line on
    stderr, not an interpreter abort (its stdin reader thread still holds stdin's lock)."""
    import subprocess

    ledger.net_faults = [NetFault("mcp create_ticket", Failure("reset"))]
    cmd = shlex.split(ledger.urls()["mcp_stdio"])
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(rpc("initialize") + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["result"]["serverInfo"]["name"] == "crashpoint"
        args = {"name": "create_ticket", "arguments": {"title": "t"}}
        proc.stdin.write(rpc("tools/call", args, rid=2) + b"\n")
        proc.stdin.flush()
        assert proc.wait(timeout=5) == 1  # stdin still open: the relay ends on its own
        assert proc.stdout.read() == b""  # no answer to the call
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert "dropped" in err
        assert "Fatal Python error" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
