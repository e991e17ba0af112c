"""CrashpointSaver: LangGraph's own conformance suite, a real graph, O(N) bytes, kill -9 mid-put
(a real torn tail), corruption detected, two processes on one thread."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "langgraph.checkpoint.base",
    reason="LangGraph is not installed: pip install 'crashpoint[langgraph]'",
)

from crashpoint.adapters.langgraph_saver import CrashpointSaver, run_id_for
from crashpoint.errors import CheckpointCorrupt, RunLocked

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _graph(saver: Any) -> Any:
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class S(TypedDict):
        n: int
        log: list[str]

    def a(s: S) -> dict[str, Any]:
        return {"n": s["n"] + 1, "log": [*s["log"], "a"]}

    def b(s: S) -> dict[str, Any]:
        return {"n": s["n"] * 2, "log": [*s["log"], "b"]}

    g = StateGraph(S)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def test_langgraph_conformance_suite() -> None:
    """LangGraph's checkpointer conformance suite (langgraph-checkpoint-conformance): every base
    capability and the extended ones we implement pass."""
    conformance = pytest.importorskip(
        "langgraph.checkpoint.conformance",
        reason="pip install langgraph-checkpoint-conformance (in the dev extra)",
    )

    @conformance.checkpointer_test(name="CrashpointSaver")
    async def factory() -> Any:
        folder = tempfile.mkdtemp(prefix="cp-saver-")
        saver = CrashpointSaver(folder)
        try:
            yield saver
        finally:
            saver.close()
            shutil.rmtree(folder, ignore_errors=True)

    report = asyncio.run(conformance.validate(factory))
    report.print_report()
    assert report.passed_all_base()
    assert report.passed_all(), "an extended capability we implement (prune) failed"


def test_graph_round_trip_sync_and_async(tmp_path: Path) -> None:
    with CrashpointSaver(tmp_path) as saver:
        assert _graph(saver).invoke({"n": 1, "log": []}, _cfg("t/1")) == {"n": 4, "log": ["a", "b"]}
    with CrashpointSaver(tmp_path) as saver:  # a new process would see the same
        assert _graph(saver).get_state(_cfg("t/1")).values == {"n": 4, "log": ["a", "b"]}

    async def run() -> Any:
        async with CrashpointSaver(tmp_path) as saver:
            return await _graph(saver).ainvoke({"n": 5, "log": []}, _cfg("t2"))

    assert asyncio.run(run()) == {"n": 12, "log": ["a", "b"]}
    # one folder per thread, named by a hash (a thread id never becomes a path)
    assert sorted(os.listdir(tmp_path)) == sorted(
        [".store-lock", run_id_for("t/1"), run_id_for("t2")]
    )


def _put_chain(saver: CrashpointSaver, thread: str, steps: int, size: int) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    version: str | None = None
    for i in range(steps):
        cp = empty_checkpoint()
        version = saver.get_next_version(version, None)
        cp["channel_values"] = {f"c{i}": "x" * size}
        cp["channel_versions"] = {f"c{i}": version}
        config = saver.put(config, cp, {"step": i}, {f"c{i}": version})


def _growing(saver: Any, steps: int) -> Any:
    """A graph whose state grows 200 B a step (a list channel with an add reducer): LangGraph
    hands the saver the whole list at every step."""
    import operator
    from typing import Annotated, TypedDict

    from langgraph.graph import END, StateGraph

    S = TypedDict("S", {"items": Annotated[list[str], operator.add], "n": int})  # noqa: UP013

    def node(s: Any) -> dict[str, Any]:
        return {"items": [f"{s['n']:04d}" + "x" * 196], "n": s["n"] + 1}

    g = StateGraph(S)
    g.add_node("step", node)
    g.set_entry_point("step")
    g.add_conditional_edges("step", lambda s: END if s["n"] >= steps else "step")
    return g.compile(checkpointer=saver)


def test_bytes_per_step_are_linear_for_a_growing_state(tmp_path: Path) -> None:
    """200 steps cost about twice 100 steps (a saver writing each step's whole state, as
    SqliteSaver does, costs four times at any length), and the state read back is the state
    written."""
    sizes = []
    for steps in (100, 200):
        folder = tmp_path / str(steps)
        cfg: Any = {"configurable": {"thread_id": "t"}, "recursion_limit": steps + 10}
        with CrashpointSaver(folder) as saver:
            out = _growing(saver, steps).invoke({"items": [], "n": 0}, cfg, durability="sync")
            sizes.append(saver.store.bytes_written)
        with CrashpointSaver(folder) as saver:  # read back from disk, deltas resolved
            assert _growing(saver, steps).get_state(cfg).values == out
            history = list(saver.list(cfg))
        assert len(history) == steps + 2
        assert len(out["items"]) == steps
    assert sizes[1] < 2.5 * sizes[0], sizes
    assert sizes[1] / 200 < 8_000, "more than 8 kB per 200-byte step"


def test_delta_is_only_taken_for_a_value_that_grew_at_its_end(tmp_path: Path) -> None:
    from crashpoint.adapters.langgraph_saver import _delta

    base = b"\x92" + b"a" * 100 + b"b" * 100
    grown = b"\x93" + b"a" * 100 + b"b" * 100 + b"c" * 50
    k, j, end = _delta(base, grown) or (0, 0, 0)
    assert grown[:k] + base[j:] + grown[end:] == grown
    assert end - k == 200
    assert _delta(base, b"\x92" + b"a" * 100 + b"z" * 100) is None  # changed in the middle
    assert _delta(base, b"\x91" + b"a" * 100) is None  # shrank
    # a value rewritten in the middle, then grown: every version reads back exactly
    with CrashpointSaver(tmp_path) as saver:
        _put_values(saver, [["x" * 50] * 3, ["x" * 50] * 4, ["y" * 50] * 4, ["y" * 50] * 5])
    with CrashpointSaver(tmp_path) as saver:
        got = [t.checkpoint["channel_values"]["v"] for t in saver.list(_cfg("t"))]
    assert got[::-1] == [["x" * 50] * 3, ["x" * 50] * 4, ["y" * 50] * 4, ["y" * 50] * 5]


def _put_values(saver: CrashpointSaver, values: list[Any]) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    version: str | None = None
    for v in values:
        cp = empty_checkpoint()
        version = saver.get_next_version(version, None)
        cp["channel_values"] = {"v": v}
        cp["channel_versions"] = {"v": version}
        config = saver.put(config, cp, {}, {"v": version})


CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {src!r})
    from crashpoint.checkpoint import Store
    from crashpoint._fsio import FsOps
    from crashpoint.adapters.langgraph_saver import CrashpointSaver
    from langgraph.checkpoint.base import empty_checkpoint

    class TearOnNthWrite(FsOps):
        # a real partial write, then a real SIGKILL: the torn tail a crash leaves
        n = 0
        def write(self, fd, data):
            TearOnNthWrite.n += 1
            if TearOnNthWrite.n == int(sys.argv[2]):
                os.write(fd, data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            super().write(fd, data)

    saver = CrashpointSaver(store=Store(sys.argv[1], fs=TearOnNthWrite()))
    config = {{"configurable": {{"thread_id": "t", "checkpoint_ns": ""}}}}
    for i in range(100):
        cp = empty_checkpoint()
        cp["channel_values"] = {{"v": i}}
        cp["channel_versions"] = {{"v": i + 1}}
        config = saver.put(config, cp, {{"step": i}}, {{"v": i + 1}})
        print(cp["id"], i, flush=True)   # printed only once the put returned (durable)
""")


def test_kill_mid_put_leaves_last_durable_checkpoint(tmp_path: Path, children: Any) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(src=SRC))
    state = tmp_path / "state"
    # the 9th write of the store (the lock file, meta.json and the thread record come first)
    child = children.python(script, str(state), "9")
    assert child.wait(timeout=60) == -signal.SIGKILL, child.stderr_text()
    lines = []
    while (line := child.read_line(timeout=1)) is not None:
        lines.append(line.split())
    assert len(lines) >= 3, "the kill came before any put was acknowledged"
    last_id, last_i = lines[-1]
    with CrashpointSaver(state) as saver:
        j = saver._hold("t").journal
        assert j.recovery.torn_tail is not None, "the kill left no torn tail: not exercised"
        tup = saver.get_tuple(_cfg("t"))
        assert tup is not None
        assert tup.checkpoint["id"] == last_id
        assert tup.checkpoint["channel_values"] == {"v": int(last_i)}
        assert len(list(saver.list(_cfg("t")))) == len(lines)  # all acknowledged, no more


def test_corruption_is_detected_not_served(tmp_path: Path) -> None:
    with CrashpointSaver(tmp_path) as saver:
        _put_chain(saver, "t", 5, 50)
    seg = sorted(p for p in (tmp_path / run_id_for("t")).iterdir() if p.name.startswith("seg-"))[0]
    data = bytearray(seg.read_bytes())
    data[len(data) // 3] ^= 0x40  # a bit flip in a record in the middle
    seg.write_bytes(bytes(data))
    with CrashpointSaver(tmp_path) as saver, pytest.raises(CheckpointCorrupt) as err:
        saver.get_tuple(_cfg("t"))
    assert str(seg) in str(err.value)
    # on_corrupt="rollback": the valid prefix is kept, and is what the saver serves
    with CrashpointSaver(tmp_path, on_corrupt="rollback") as saver:
        tup = saver.get_tuple(_cfg("t"))
        n = len(list(saver.list(_cfg("t"))))
        assert 0 <= n < 5
        assert (tup is None) == (n == 0)


HOLDER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {src!r})
    from crashpoint.adapters.langgraph_saver import CrashpointSaver
    saver = CrashpointSaver(sys.argv[1])
    saver.get_tuple({{"configurable": {{"thread_id": "shared"}}}})   # a graph starting to resume
    print("holding", flush=True)
    sys.stdin.readline()
    saver.close()
    print("released", flush=True)
""")


def test_two_processes_on_one_thread(tmp_path: Path, children: Any) -> None:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER.format(src=SRC))
    state = tmp_path / "state"
    holder = children.python(script, str(state))
    assert holder.read_line(timeout=60) == "holding", holder.stderr_text()
    with CrashpointSaver(state) as saver:
        with pytest.raises(RunLocked):
            _graph(saver).invoke({"n": 1, "log": []}, _cfg("shared"))
        # another thread of the same store is not blocked
        assert _graph(saver).invoke({"n": 1, "log": []}, _cfg("other"))["n"] == 4
    holder.send("go")
    assert holder.read_line(timeout=60) == "released"
    assert holder.wait(timeout=30) == 0
    with CrashpointSaver(state) as saver:  # the first resumer is gone: the second proceeds
        assert _graph(saver).invoke({"n": 1, "log": []}, _cfg("shared"))["n"] == 4
