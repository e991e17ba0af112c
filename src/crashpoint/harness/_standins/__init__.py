"""The stand-in services: the outside world an agent talks to during a trial.

Layer 5, a room of the harness: it may import the specification (:mod:`.._spec`), process
control and the base, never the checker, the report or the engine. The :class:`Ledger` lives
in the harness process, outside the agent's fault domain: it answers the probe on a Unix socket
and the stand-ins on one loopback HTTP port (``_http``: the ledger's HTTP front, the HTTP
stand-in, the OpenAI-compatible model endpoint of ``_llm`` and its Anthropic-compatible face
``_anthropic``, the MCP tool server of ``_mcp``, whose stdio face ``_mcp_stdio`` is a relay
the agent's MCP client starts), applies every effect key at most
once, records every event, and kills the agent at an exact event. The SMTP sink (``_smtp``) is
started only when a scenario uses it: it is imported then, not with this face (aiosmtpd costs
more to import than the rest of the harness). ``_postgres`` is a throw-away PostgreSQL server
for tests, campaigns and benchmarks.
"""

from crashpoint.harness._standins._ledger import Ledger
from crashpoint.harness._standins._llm import LLMResult, LLMStandIn, count_tokens, request_view
from crashpoint.harness._standins._mcp import MCPStandIn
from crashpoint.harness._standins._postgres import PostgresServer
from crashpoint.harness._standins._postgres import find_binaries as find_postgres_binaries
from crashpoint.harness._standins._postgres import unavailable as postgres_unavailable

__all__ = [
    "LLMResult",
    "LLMStandIn",
    "Ledger",
    "MCPStandIn",
    "PostgresServer",
    "count_tokens",
    "find_postgres_binaries",
    "postgres_unavailable",
    "request_view",
]
