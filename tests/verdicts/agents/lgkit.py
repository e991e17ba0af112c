"""What the LangGraph agents of the matrix share, as a project's own helper module would hold
it: the command line, the checkpointer, how the graph is run (``invoke``, ``stream``,
``ainvoke``, ``astream``), keyed POSTs and the one-writer lock.

Every agent: ``python AGENT.py --state DIR --http URL [--saver sqlite|crashpoint]
[--durability sync|async|exit] [--call invoke|stream|ainvoke|astream] [--bug NAME]``.
The thread id is the run id (``$CRASHPOINT_RUN_ID``), so a restart resumes the same thread.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import sqlite3
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from crashpoint.adapters.langgraph import instrument


def parse(doc: str, bugs: tuple[str, ...]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--state", required=True)
    ap.add_argument("--http", default="")
    ap.add_argument("--saver", choices=("sqlite", "crashpoint"), default="sqlite")
    ap.add_argument("--durability", choices=("sync", "async", "exit"), default="async")
    ap.add_argument("--call", choices=("invoke", "stream", "ainvoke", "astream"), default="invoke")
    ap.add_argument("--bug", choices=bugs, default=None)
    args = ap.parse_args()
    args.http = args.http.rstrip("/")
    args.thread = os.environ.get("CRASHPOINT_RUN_ID") or "thread-1"
    os.makedirs(args.state, exist_ok=True)
    return args


def post(url: str, body: Any, key: str | None) -> Any:
    """POST ``body`` as JSON, with an ``Idempotency-Key`` when given."""
    req = urllib.request.Request(  # noqa: S310 (an http URL from the command line)
        url, data=json.dumps(body, sort_keys=True).encode(), method="POST"
    )
    req.add_header("Content-Type", "application/json")
    if key is not None:
        req.add_header("Idempotency-Key", key)
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310
        return json.loads(r.read() or b"null")


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310
        return json.loads(r.read() or b"null")


@contextlib.contextmanager
def one_writer(state: str, enabled: bool = True) -> Iterator[None]:
    """Hold an exclusive lock on the state folder: a second process on the same thread waits."""
    if not enabled:
        yield
        return
    with open(os.path.join(state, "agent.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _sync_saver(args: argparse.Namespace) -> Any:
    if args.saver == "crashpoint":
        from crashpoint.adapters.langgraph_saver import CrashpointSaver

        return CrashpointSaver(os.path.join(args.state, "checkpoints"))
    conn = sqlite3.connect(os.path.join(args.state, "graph.sqlite"), check_same_thread=False)
    return SqliteSaver(conn)


def _resume_input(snapshot: Any, first: Any, answer: Any) -> Any:
    """What to run the graph with: the first input on a new thread, the human's answer to a
    pending ``interrupt()``, else ``None`` (resume from the last checkpoint; a finished thread
    runs nothing)."""
    if snapshot is None or snapshot.created_at is None:  # no checkpoint yet
        return first
    pending = [i for t in snapshot.tasks for i in t.interrupts]
    if pending:
        return Command(resume=answer(pending[0].value) if answer else None)
    return None


def run(
    builder: Any,
    args: argparse.Namespace,
    first: Any,
    answer: Callable[[Any], Any] | None = None,
    lock: bool = True,
) -> dict[str, Any]:
    """Compile ``builder`` with the chosen saver, resume or start the thread, answer each
    ``interrupt()`` with ``answer(value)``, and return the final state."""
    config: Any = {"configurable": {"thread_id": args.thread}}
    with one_writer(args.state, lock):
        if args.call in ("invoke", "stream"):
            return _run_sync(builder, args, first, answer, config)
        return asyncio.run(_run_async(builder, args, first, answer, config))


def _run_sync(builder: Any, args: Any, first: Any, answer: Any, config: Any) -> dict[str, Any]:
    graph = instrument(builder.compile(checkpointer=_sync_saver(args)))
    todo = _resume_input(graph.get_state(config), first, answer)
    while True:
        if args.call == "invoke":
            graph.invoke(todo, config, durability=args.durability)
        else:
            for _ in graph.stream(todo, config, durability=args.durability):
                pass
        snap = graph.get_state(config)
        pending = [i for t in snap.tasks for i in t.interrupts]
        if not pending:
            return dict(snap.values)
        todo = Command(resume=answer(pending[0].value) if answer else None)


async def _run_async(builder: Any, args: Any, first: Any, answer: Any, config: Any) -> Any:
    async with contextlib.AsyncExitStack() as stack:
        if args.saver == "crashpoint":
            saver = _sync_saver(args)
        else:
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            path = os.path.join(args.state, "graph.sqlite")
            saver = await stack.enter_async_context(AsyncSqliteSaver.from_conn_string(path))
        graph = instrument(builder.compile(checkpointer=saver))
        todo = _resume_input(await graph.aget_state(config), first, answer)
        while True:
            if args.call == "ainvoke":
                await graph.ainvoke(todo, config, durability=args.durability)
            else:
                async for _ in graph.astream(todo, config, durability=args.durability):
                    pass
            snap = await graph.aget_state(config)
            pending = [i for t in snap.tasks for i in t.interrupts]
            if not pending:
                return dict(snap.values)
            todo = Command(resume=answer(pending[0].value) if answer else None)
