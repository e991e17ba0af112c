"""Optional framework adapters (LangGraph, DBOS).

Nothing here is imported by the core: each adapter module imports its framework when it is
itself imported, and says which extra to install when the framework is missing
(``pip install 'crashpoint[langgraph]'``, ``'crashpoint[dbos]'``).
"""
