"""Optional framework adapters (LangGraph, DBOS, the OpenAI Agents SDK, Pydantic AI).

Layer 6: an adapter may import the base (the probe, the errors) and the reference library,
never the harness, the faults or pytest: it runs inside the user's agent, like the probe.

Nothing here is imported by the core: each adapter module imports its framework when it is
itself imported, and says which extra to install when the framework is missing
(``pip install 'crashpoint[langgraph]'``, ``'crashpoint[dbos]'``, ``'crashpoint[openai-agents]'``,
``'crashpoint[pydantic-ai]'``).
"""
