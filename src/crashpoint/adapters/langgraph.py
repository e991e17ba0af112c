"""LangGraph adapter: a compiled graph reports its nodes and checkpoints to the harness.

One line in the agent::

    from crashpoint.adapters.langgraph import instrument
    graph = instrument(builder.compile(checkpointer=saver))

Public hooks only: a LangChain callback handler (added with ``graph.with_config``) and a
wrapper around the checkpointer object the graph was compiled with (any
``BaseCheckpointSaver``: its own methods are called unchanged). Under the harness (Contract 1)
the graph then reports:

* ``step_started(node)`` when a node begins (the callback, before the node's code runs);
* ``event "langgraph:tool:<name>"`` when a tool call starts;
* ``event "langgraph:<node>:before_checkpoint"`` when the node returned (its side effects
  done), in the node's thread, before LangGraph hands its writes to the saver: a kill there is
  the boundary "after the effect, before the checkpoint";
* ``event "langgraph:checkpoint:<step>"`` once the saver's ``put``/``aput`` of a superstep's
  checkpoint has returned (durable), with the ids ``checkpoint``, ``parent`` (the checkpoint
  it follows; none for a thread's first), ``thread`` and ``ns`` (its namespace): two
  checkpoints saved with one parent are a fork, which the harness's history checker reports;
* ``step_completed(node)`` once the node's result is durable in the checkpointer: the saver's
  ``put_writes``/``aput_writes`` of its task has returned and so has the ``put`` of the
  checkpoint those writes hang on (LangGraph does not re-run a task whose writes it finds on
  the checkpoint it resumes from; with ``durability="async"`` writes can be saved on a
  checkpoint that is not saved yet, and are lost in a crash), or the ``put`` of its
  superstep's own checkpoint has returned. Never when
  the node's update is streamed: with ``durability="async"`` an update is streamed before it
  is saved, and a kill in between makes LangGraph run the node again.

Outside the harness every report is a no-op (see :mod:`crashpoint.probe`). The core never
imports this module.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, TypeVar
from uuid import UUID

from crashpoint import probe
from crashpoint.errors import InvalidArgument

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
    )
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "crashpoint.adapters.langgraph needs LangGraph: pip install 'crashpoint[langgraph]' "
        f"({exc})"
    ) from exc

__all__ = ["ProbeCallbacks", "ProbedSaver", "Tracker", "instrument"]

#: Writes that mean the task did not complete (it failed or was interrupted).
_NOT_DONE = ("__error__", "__interrupt__")

G = TypeVar("G")


class _Task:
    __slots__ = ("done", "ended", "node", "ns", "parent", "scope", "step")

    def __init__(self, node: str, step: int, ns: str) -> None:
        self.node, self.step, self.ns = node, step, ns
        # the checkpoint namespace the task runs in: "" for the top graph, the subgraph
        # node's own namespace ("sub:<task id>") for a node nested in a subgraph
        self.scope = ns.rpartition("|")[0]
        self.ended = self.done = False
        self.parent: str | None = None  # the checkpoint its saved writes hang on


class Tracker:
    """Which node each LangGraph task runs and in which superstep (from the callbacks), so
    the saver can name the nodes a write made durable. Thread-safe: LangGraph saves from
    background threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, _Task] = {}  # task id -> task
        self._runs: dict[UUID, str] = {}  # run id of a node's own run -> task id
        self._started: set[str] = set()  # checkpoint namespaces of tasks already reported
        self._saved: set[str] = set()  # ids of the checkpoints whose put returned

    def start(self, ns: str, node: str, step: Any, run_id: UUID) -> bool:
        """Note that the task of namespace ``ns`` (``node:task_id``) runs ``node``; True the
        first time (the node's own run, not a runnable nested in it)."""
        with self._lock:
            if ns in self._started:
                return False
            self._started.add(ns)
            task_id = ns.rsplit("|", 1)[-1].rpartition(":")[2]
            if task_id:
                self._tasks[task_id] = _Task(node, step if isinstance(step, int) else -2, ns)
                self._runs[run_id] = task_id
            return True

    def interrupted(self, task_id: str) -> None:
        """The task stopped at an ``interrupt()`` (its writes say so): LangGraph runs the
        node again from its start on resume, so that run is a new start of the step."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None and not task.done:
                self._started.discard(task.ns)

    def end(self, run_id: UUID) -> str | None:
        """The node whose own run ``run_id`` returned (None for any other run)."""
        with self._lock:
            task = self._tasks.get(self._runs.pop(run_id, ""))
            if task is None:
                return None
            task.ended = True
            return task.node

    def writes_saved(self, task_id: str, parent: str | None) -> list[str]:
        """The task's writes were saved, under checkpoint ``parent``: its node, once, if that
        checkpoint is saved too (LangGraph resumes from the latest saved checkpoint and does not
        re-run a task whose writes hang on it; writes on a checkpoint that was never saved, as
        ``durability="async"`` allows, are lost on a crash)."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.done:
                return []
            task.parent = parent
            if parent is None or parent not in self._saved:
                return []
            task.done = True
            return [task.node]

    def checkpoint_saved(self, checkpoint_id: str | None, step: Any, ns: str = "") -> list[str]:
        """The nodes made durable by saving checkpoint ``checkpoint_id`` of superstep ``step``
        in namespace ``ns`` (once each): the tasks of that graph (the top graph, or one
        subgraph: supersteps are counted per graph) in that superstep or an earlier one that
        returned (their writes are in it), and those whose saved writes hang on it."""
        with self._lock:
            if checkpoint_id:
                self._saved.add(checkpoint_id)
            out = []
            for task in self._tasks.values():
                if task.done:
                    continue
                if (task.parent is not None and task.parent == checkpoint_id) or (
                    task.ended
                    and task.scope == ns
                    and isinstance(step, int)
                    and 0 <= task.step <= step
                ):
                    task.done = True
                    out.append(task.node)
            return out


class ProbeCallbacks(BaseCallbackHandler):
    """Reports node starts, node returns (before their checkpoint) and tool-call starts. Runs
    inline (in the node's thread, before its code runs and before LangGraph saves its
    writes), and a failure to reach the harness is raised, never swallowed."""

    run_inline = True
    raise_error = True

    def __init__(self, tracker: Tracker) -> None:
        super().__init__()
        self.tracker = tracker

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        md = metadata or {}
        node = md.get("langgraph_node")
        ns = md.get("langgraph_checkpoint_ns")
        if (
            isinstance(node, str)
            and isinstance(ns, str)
            and self.tracker.start(ns, node, md.get("langgraph_step"), run_id)
        ):
            probe.step_started(node)

    def on_chain_end(
        self, outputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        node = self.tracker.end(run_id)
        if node is not None:
            probe.event(
                "event",
                name=f"langgraph:{node}:before_checkpoint",
                boundary=f"after {node}'s side effects, before its checkpoint write",
            )

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        name = kwargs.get("name") or (serialized or {}).get("name") or "tool"
        probe.event("event", name=f"langgraph:tool:{name}")


def _completed(writes: Sequence[tuple[str, Any]]) -> bool:
    return not any(c in _NOT_DONE for c, _ in writes)


class ProbedSaver(BaseCheckpointSaver[Any]):
    """Wraps any checkpointer: every call goes to ``inner`` unchanged; what it made durable is
    reported once the call has returned."""

    def __init__(self, inner: BaseCheckpointSaver[Any], tracker: Tracker | None = None) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.tracker = tracker or Tracker()
        # read once, not on every write: does the inner saver take task_path (newer LangGraph)?
        self._path = _accepts_task_path(inner.put_writes)
        self._apath = _accepts_task_path(inner.aput_writes)

    def __getattr__(self, name: str) -> Any:  # the inner saver's own extras (conn, setup...)
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def config_specs(self) -> list[Any]:
        return list(self.inner.config_specs)

    # reads: unchanged
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.inner.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.inner.list(config, filter=filter, before=before, limit=limit)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.inner.aget_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for t in self.inner.alist(config, filter=filter, before=before, limit=limit):
            yield t

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.inner.adelete_thread(thread_id)

    # writes: reported once durable
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        out = self.inner.put(config, checkpoint, metadata, new_versions)
        self._put_done(config, checkpoint, metadata)
        return out

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        out = await self.inner.aput(config, checkpoint, metadata, new_versions)
        self._put_done(config, checkpoint, metadata)
        return out

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self._path:
            self.inner.put_writes(config, writes, task_id, task_path)
        else:
            self.inner.put_writes(config, writes, task_id)
        self._writes_done(config, writes, task_id)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self._apath:
            await self.inner.aput_writes(config, writes, task_id, task_path)
        else:
            await self.inner.aput_writes(config, writes, task_id)
        self._writes_done(config, writes, task_id)

    def _writes_done(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str
    ) -> None:
        """A task's writes are saved: its node is completed if the checkpoint they hang on is
        saved too (LangGraph does not run a task again whose writes it finds there)."""
        if _completed(writes):
            parent = (config.get("configurable") or {}).get("checkpoint_id")
            for node in self.tracker.writes_saved(task_id, parent):
                probe.step_completed(node)
        elif any(c == "__interrupt__" for c, _ in writes):
            self.tracker.interrupted(task_id)

    def _put_done(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> None:
        """A superstep's checkpoint is durable: so are the nodes of that superstep (with
        ``durability="async"`` it may be saved before their own writes) and the nodes whose
        saved writes hang on it. A subgraph counts its own supersteps in its own namespace."""
        step = metadata.get("step") if isinstance(metadata, dict) else None
        conf = config.get("configurable") or {}
        ns = str(conf.get("checkpoint_ns") or "")
        probe.event(  # the ids let the harness's history checker see a fork
            "event",
            name=f"langgraph:checkpoint:{step}",
            checkpoint=checkpoint.get("id"),
            parent=conf.get("checkpoint_id"),
            thread=conf.get("thread_id"),
            ns=ns,
        )
        for node in self.tracker.checkpoint_saved(checkpoint.get("id"), step, ns):
            probe.step_completed(node)


def _accepts_task_path(fn: Any) -> bool:
    import inspect

    try:
        return "task_path" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def instrument(graph: G, *, tracker: Tracker | None = None) -> G:
    """The compiled ``graph`` reporting its nodes, tool calls and durable checkpoints to the
    harness: its checkpointer wrapped in :class:`ProbedSaver`, :class:`ProbeCallbacks` added to
    its config. The graph must have been compiled with a checkpointer (without one nothing is
    durable, so no node could be reported completed)."""
    saver = getattr(graph, "checkpointer", None)
    if not isinstance(saver, BaseCheckpointSaver):
        raise InvalidArgument(
            "instrument(graph): the graph has no checkpointer, so no node's result is ever "
            "durable; compile it with one, e.g. builder.compile(checkpointer=SqliteSaver(conn))"
        )
    tracker = tracker or (saver.tracker if isinstance(saver, ProbedSaver) else Tracker())
    if not isinstance(saver, ProbedSaver):
        saver = ProbedSaver(saver, tracker)
    g = graph.copy(update={"checkpointer": saver})  # type: ignore[attr-defined]
    return g.with_config(callbacks=[ProbeCallbacks(tracker)])  # type: ignore[no-any-return]
