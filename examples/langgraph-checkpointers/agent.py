"""A small LangGraph agent on any checkpointer, for the checkpointer conformance cells.

The graph is plan -> search -> send_email -> report. Each node says when it starts (probe),
``send_email`` performs an effect with a key derived from the thread and the node, and a node is
reported *completed* only once the checkpointer's ``put`` holding its update has returned
(durable, if the checkpointer is honest), never when its update is streamed. On a restart the
agent resumes the thread from its last checkpoint.

``--saver module:factory`` picks the checkpointer: ``factory(state_dir)`` returns a LangGraph
``BaseCheckpointSaver`` (see ``savers.py``: ``crashpoint``, ``sqlite``, ``memory``). Default: the
environment variable ``CRASHPOINT_LG_SAVER``, else ``savers:crashpoint``.

Exit codes: 0 done (the final state as one JSON line on stdout); 65 the checkpoint is corrupt;
73 another process holds the thread; 74 the disk is full. Each with one line on stderr.

    python agent.py --state DIR [--saver module:factory] [--thread T]
"""

from __future__ import annotations

import argparse
import errno
import importlib
import itertools
import json
import os
import sqlite3
import sys
from typing import Any, TypedDict

HERE = os.path.dirname(os.path.abspath(__file__))


class State(TypedDict, total=False):
    topic: str
    plan: list[str]
    hits: list[str]
    sent: bool
    report: str
    done: list[str]


def build(thread: str) -> Any:
    from langgraph.graph import END, START, StateGraph

    from crashpoint import probe

    def node(name: str, fn: Any) -> Any:
        def run(s: State) -> dict[str, Any]:
            probe.step_started(name)
            out: dict[str, Any] = fn(s)
            out["done"] = [*s.get("done", []), name]
            return out

        return run

    def plan(s: State) -> dict[str, Any]:
        return {"plan": sorted(set(s["topic"].lower().split()))}

    def search(s: State) -> dict[str, Any]:
        return {"hits": [f"doc-{w}" for w in s["plan"]][:3]}

    def send_email(s: State) -> dict[str, Any]:
        payload = {"to": "team@example.com", "subject": s["topic"], "hits": s["hits"]}
        probe.effect("send_email", payload, key=f"{thread}:send_email")
        return {"sent": True}

    def report(s: State) -> dict[str, Any]:
        return {"report": f"{s['topic']}: {len(s['hits'])} sources, mailed={s['sent']}"}

    g = StateGraph(State)
    names = [("plan", plan), ("search", search), ("send_email", send_email), ("report", report)]
    for name, fn in names:
        g.add_node(name, node(name, fn))
    g.add_edge(START, "plan")
    for (a, _), (b, _) in itertools.pairwise(names):
        g.add_edge(a, b)
    g.add_edge("report", END)
    return g


def load_factory(spec: str) -> Any:
    mod, sep, attr = spec.partition(":")
    if not sep or not mod or not attr:
        raise SystemExit(f"--saver {spec!r}: give module:factory, e.g. savers:sqlite")
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    try:
        return getattr(importlib.import_module(mod), attr)
    except (ImportError, AttributeError) as exc:
        raise SystemExit(f"--saver {spec!r}: cannot load it: {exc}") from None


def report_on_durable_put(saver: Any, already: list[str]) -> None:
    """Send ``step_completed`` for each node whose update is in a checkpoint once ``put``
    returned (wraps this instance's ``put``; any saver). Each carries the checkpoint's id and
    its parent's (the config ``put`` is given names the parent), so the harness's history
    checker can tell two successors of one checkpoint (a fork)."""
    from crashpoint import probe

    reported = list(already)
    put = saver.put

    def durable_put(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        out = put(config, checkpoint, metadata, new_versions)
        done = checkpoint.get("channel_values", {}).get("done") or []
        conf = config.get("configurable") or {}
        for name in done[len(reported) :]:
            probe.event(
                "step_completed",
                step=name,
                checkpoint=checkpoint.get("id"),
                parent=conf.get("checkpoint_id"),
                thread=conf.get("thread_id"),
            )
            reported.append(name)
        return out

    saver.put = durable_put


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--state", required=True)
    ap.add_argument("--saver", default=os.environ.get("CRASHPOINT_LG_SAVER", "savers:crashpoint"))
    ap.add_argument("--thread", default="cells-1")
    ap.add_argument("--topic", default="crash safe checkpointers for agents")
    args = ap.parse_args(argv)
    factory = load_factory(args.saver)
    os.makedirs(args.state, exist_ok=True)
    saver = factory(args.state)
    cfg: Any = {"configurable": {"thread_id": args.thread}}
    try:
        tup = saver.get_tuple(cfg)  # CrashpointSaver takes the thread's lock here
        done = list(tup.checkpoint["channel_values"].get("done", [])) if tup else []
        report_on_durable_put(saver, done)
        graph = build(args.thread).compile(checkpointer=saver)
        # resume from the last checkpoint (None: apply its pending writes, run what is left;
        # a finished thread runs nothing)
        first = {"topic": args.topic, "done": []} if tup is None else None
        graph.invoke(first, cfg, durability="sync")
        final = graph.get_state(cfg).values
    finally:
        close = getattr(saver, "close", None)
        if callable(close):
            close()
    print(json.dumps(final, sort_keys=True), flush=True)


def _exit_for(exc: BaseException) -> int | None:
    from crashpoint.checkpoint import exit_code
    from crashpoint.errors import CheckpointError

    if isinstance(exc, CheckpointError):
        return exit_code(exc)
    if isinstance(exc, sqlite3.DatabaseError):
        text = str(exc).lower()
        if "full" in text:
            return 74
        if "locked" in text or "busy" in text:
            return 73
        return 65  # malformed, not a database, ...
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return 74
    return None


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a checkpointer's clear refusal gets its documented code
        code = _exit_for(exc)
        if code is None:
            raise
        print(f"agent: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        sys.exit(code)
