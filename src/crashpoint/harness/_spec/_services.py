"""The ``services:`` section of a scenario: the stand-in services' scripted replies, validated.

``http.routes`` maps ``"METHOD /path"`` (or ``"/path"``, any method) to a reply (``status``,
``body``, ``headers``, ``latency``) or a failure (``fail: {how: reset|timeout|status, ...}``);
``llm`` is the LLM stand-in's script (:mod:`._llm_script`); ``smtp`` starts the mail sink.
A bad section raises :class:`~crashpoint.errors.ServiceSpecError` naming the key, at load time.
Pure data: no I/O (an LLM script's ``function`` is imported to check that it exists).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from crashpoint.errors import LLMScriptError, ServiceSpecError
from crashpoint.harness._spec._llm_script import parse_llm_script
from crashpoint.harness._spec._mcp_script import MCPScript, parse_mcp_script
from crashpoint.harness._spec._network import HOWS, Failure

__all__ = [
    "DEFAULT_ROUTE",
    "ENV_HTTP",
    "ENV_LLM",
    "EVENT_METHODS",
    "METHODS",
    "SMTP_USER",
    "Route",
    "ServicesSpec",
    "parse_services",
]

ENV_HTTP = "CRASHPOINT_HTTP"
ENV_LLM = "OPENAI_BASE_URL"
SMTP_USER = "crashpoint"
#: The methods of the HTTP stand-in; the effects are the ones that change something.
METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE")
#: Methods recorded as an ``event`` (a boundary, not an effect): reading changes nothing.
EVENT_METHODS = ("GET", "HEAD", "OPTIONS")
MAX_LATENCY = 600.0
SERVICE_KEYS = ("http", "llm", "smtp", "mcp")
ROUTE_KEYS = ("status", "body", "headers", "latency", "fail")
FAIL_KEYS = ("how", "status", "body", "headers", "latency")


@dataclass(frozen=True)
class Route:
    """A scripted reply of the HTTP stand-in: ``status``, ``body`` (bytes), ``headers``,
    ``latency`` seconds before it; or ``failure`` instead of a reply."""

    status: int = 200
    body: bytes = b'{"ok": true}'
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)
    latency: float = 0.0
    failure: Failure | None = None


DEFAULT_ROUTE = Route()


@dataclass(frozen=True)
class ServicesSpec:
    """The validated ``services:`` section: HTTP routes by ``"METHOD /path"`` (or ``"/path"``
    for any method), the LLM script (passed to ``LLMStandIn`` as is), whether to start
    the SMTP sink, and the MCP stand-in's tools (``services.mcp``)."""

    routes: Mapping[str, Route] = field(default_factory=dict)
    llm: dict[str, Any] | None = None
    smtp: bool = False
    mcp: MCPScript = field(default_factory=MCPScript)  # the MCP stand-in's tools

    def route(self, method: str, path: str) -> Route:
        return self.routes.get(f"{method} {path}") or self.routes.get(path) or DEFAULT_ROUTE


_Key = tuple[str, ...]


def _body(v: Any, key: _Key) -> tuple[bytes, str]:
    """A scripted body as bytes and its content type: a string as text, else JSON."""
    if v is None:
        return b"", ""
    if isinstance(v, str):
        return v.encode(), "text/plain; charset=utf-8"
    try:
        return json.dumps(v, sort_keys=True).encode(), "application/json"
    except (TypeError, ValueError) as exc:
        raise ServiceSpecError(key, f"the body must be a string or JSON data: {exc}") from None


def _headers(v: Any, key: _Key, ctype: str) -> tuple[tuple[str, str], ...]:
    """Scripted headers (a mapping), with the body's Content-Type unless they set one."""
    if v is None:
        v = {}
    if not isinstance(v, dict) or not all(
        isinstance(k, str)
        and k
        and "\n" not in k
        and ":" not in k
        and isinstance(x, (str, int))
        and "\n" not in str(x)
        for k, x in v.items()
    ):
        raise ServiceSpecError(
            key,
            f"must be a mapping of header names to values, e.g. {{Retry-After: '1'}}, got {v!r}",
        )
    out = tuple((k, str(x)) for k, x in v.items())
    if ctype and not any(h.lower() == "content-type" for h, _ in out):
        out = (("Content-Type", ctype), *out)
    return out


def _latency(v: Any, key: _Key) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_LATENCY:
        raise ServiceSpecError(key, f"must be seconds from 0 to {MAX_LATENCY:g}, got {v!r}")
    return float(v)


def _keys(d: dict[str, Any], allowed: tuple[str, ...], where: _Key) -> None:
    for k in d:
        if k not in allowed:
            raise ServiceSpecError((*where, str(k)), f"unknown key; allowed: {', '.join(allowed)}")


def _failure(v: Any, key: _Key) -> Failure:
    if isinstance(v, str):
        v = {"how": v}
    if isinstance(v, int) and not isinstance(v, bool):
        v = {"how": "status", "status": v}
    if not isinstance(v, dict):
        raise ServiceSpecError(
            key,
            "must be reset, timeout, a status (e.g. 503) or a mapping "
            f"{{how: status, status: 429, headers: ...}}, got {v!r}",
        )
    _keys(v, FAIL_KEYS, key)
    how = v.get("how", "status" if "status" in v else "")
    body, ctype = _body(v.get("body"), (*key, "body"))
    headers = _headers(v.get("headers"), (*key, "headers"), ctype)
    status = v.get("status", 0)
    if isinstance(status, bool) or not isinstance(status, int):
        raise ServiceSpecError((*key, "status"), f"must be a whole number, got {status!r}")
    if how not in HOWS:
        raise ServiceSpecError((*key, "how"), f"must be one of {', '.join(HOWS)}, got {how!r}")
    try:
        return Failure(
            cast(Literal["reset", "timeout", "status"], how),
            status,
            body,
            headers,
            _latency(v.get("latency", 0), (*key, "latency")),
        )
    except ValueError as exc:
        raise ServiceSpecError(key, str(exc)) from None


def _route_name(name: Any, key: _Key) -> str:
    if not isinstance(name, str):
        raise ServiceSpecError(key, f"a route is 'METHOD /path' or '/path', got {name!r}")
    method, _, path = name.partition(" ") if " " in name.strip() else ("", "", name)
    where = (*key, name)
    if method and method not in METHODS:
        raise ServiceSpecError(where, f"unknown method {method!r}; use one of {', '.join(METHODS)}")
    path = path.strip()
    if not path.startswith("/") or "?" in path or " " in path:
        raise ServiceSpecError(
            where,
            "a route is 'METHOD /path' or '/path' (the path starts "
            f"with /, no query), e.g. 'POST /hook', got {name!r}",
        )
    return f"{method} {path}" if method else path


def parse_services(raw: Any) -> ServicesSpec:
    """Validate a ``services:`` mapping; :class:`ServiceSpecError` names the key."""
    if raw is None:
        return ServicesSpec()
    top = ("services",)
    if not isinstance(raw, dict):
        raise ServiceSpecError(top, "must be a mapping with http, llm, smtp and/or mcp")
    _keys(raw, SERVICE_KEYS, top)
    routes: dict[str, Route] = {}
    http = raw.get("http") or {}
    if not isinstance(http, dict):
        raise ServiceSpecError((*top, "http"), "must be a mapping, e.g. {routes: {...}}")
    _keys(http, ("routes",), (*top, "http"))
    table = http.get("routes") or {}
    tkey = (*top, "http", "routes")
    if not isinstance(table, dict):
        raise ServiceSpecError(
            tkey, "must map 'METHOD /path' to a reply, e.g. {'POST /hook': {status: 202}}"
        )
    for name, r in table.items():
        rname = _route_name(name, tkey)
        key = (*tkey, str(name))
        r = {} if r is None else r
        if not isinstance(r, dict):
            raise ServiceSpecError(
                key, f"must be a mapping {{status, body, headers, latency, fail}}, got {r!r}"
            )
        _keys(r, ROUTE_KEYS, key)
        status = r.get("status", 200)
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ServiceSpecError(
                (*key, "status"), f"must be an HTTP status 100-599, got {status!r}"
            )
        body, ctype = (
            _body(r.get("body"), (*key, "body"))
            if "body" in r
            else (DEFAULT_ROUTE.body, "application/json")
        )
        headers = _headers(r.get("headers"), (*key, "headers"), ctype)
        fail = _failure(r["fail"], (*key, "fail")) if r.get("fail") is not None else None
        routes[rname] = Route(
            status, body, headers, _latency(r.get("latency", 0), (*key, "latency")), fail
        )
    llm = raw.get("llm")
    if llm is not None and not isinstance(llm, dict):
        raise ServiceSpecError((*top, "llm"), f"must be a mapping (the LLM script), got {llm!r}")
    if llm is not None:  # the script is checked now, not at the agent's first call
        try:
            parse_llm_script(llm)
        except LLMScriptError as exc:
            parts = tuple(p for p in exc.key.replace("]", "").replace("[", ".").split(".") if p)
            raise ServiceSpecError((*top, "llm", *parts), exc.message) from None
    smtp = raw.get("smtp")
    if smtp not in (None, True, False) and not isinstance(smtp, dict):
        raise ServiceSpecError((*top, "smtp"), f"must be true or a mapping, got {smtp!r}")
    mcp = parse_mcp_script(raw.get("mcp"))
    return ServicesSpec(routes, llm, smtp is not None and smtp is not False, mcp)
