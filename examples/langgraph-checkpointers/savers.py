"""Checkpointer factories for ``agent.py --saver module:factory``: each takes the agent's state
folder and returns a LangGraph ``BaseCheckpointSaver``. Add your own the same way, in any
importable module (``--saver mypkg.savers:make``)."""

from __future__ import annotations

import os
import sqlite3
from typing import Any


def crashpoint(state_dir: str) -> Any:
    """CrashpointSaver: crashpoint's journal (fsync per put, lock per thread)."""
    from crashpoint.adapters.langgraph_saver import CrashpointSaver

    return CrashpointSaver(os.path.join(state_dir, "checkpoints"))


def sqlite(state_dir: str) -> Any:
    """LangGraph's SqliteSaver on a file in the state folder (Python's sqlite3 defaults)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(os.path.join(state_dir, "checkpoints.sqlite"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.close = conn.close  # type: ignore[attr-defined]  # the agent closes what it opened
    return saver


def memory(state_dir: str) -> Any:
    """InMemorySaver: nothing survives a restart (a control: the cells must fail it)."""
    from langgraph.checkpoint.memory import InMemorySaver

    return InMemorySaver()
