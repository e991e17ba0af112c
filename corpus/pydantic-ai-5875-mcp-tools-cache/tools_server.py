"""The fulfilment team's MCP tool server (stdio): one tool, ``ship_order``.

``ship_order`` books the shipment with the warehouse service: a POST to ``<http>/shipments``
with an Idempotency-Key from the order, so a repeated booking of one order is applied once.

    python tools_server.py --http URL
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import urllib.request

from mcp.server.fastmcp import FastMCP

HTTP = ""
server = FastMCP("fulfilment", log_level="WARNING")


@server.tool()
def ship_order(order: str) -> str:
    """Book the shipment of an order with the warehouse."""
    req = urllib.request.Request(  # noqa: S310 (an http URL)
        HTTP + "/shipments", data=json.dumps({"order": order}).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", f"order-{order}:ship")
    with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310
        r.read()
    return f"shipment booked for order {order}"


def _die_with_parent() -> None:
    """The MCP client starts this server in a session of its own, so a kill -9 of the agent's
    process group does not reach it; ask Linux to kill it when the agent dies instead."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the agent died before the request took effect
        os._exit(1)


if __name__ == "__main__":
    _die_with_parent()
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--http", required=True, help="base URL of the warehouse service")
    HTTP = ap.parse_args().http.rstrip("/")
    server.run("stdio")
