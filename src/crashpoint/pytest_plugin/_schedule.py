"""pytest-xdist's ``--dist loadfile``, handing scenario files out in the collection's order.

The workers collect the scenario files longest first (:mod:`._order`); pytest-xdist's own
loadfile scheduler would sort the files again by their number of items, which for scenario
files says little (one item of 53 file-operation kills against seven of three corruptions
each): a long one-item file would go last and leave the other workers idle at the end. Here the
scenario files keep the workers' order, ahead of any other file, and the other files keep
pytest-xdist's order (by number of items, unless ``--no-loadscope-reorder``). The rest is
pytest-xdist's (its ``LoadScopeScheduling.schedule``, of which this is the first distribution).

Imported by the plugin's ``pytest_xdist_make_scheduler`` hook only (the pytest-xdist
controller of a session that uses crashpoint, with ``--dist loadfile``): it imports
pytest-xdist.
"""

from __future__ import annotations

from collections.abc import Sequence

# pytest-xdist ships no type information: its scheduler is Any to mypy
from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

__all__ = ["ScenarioFileScheduling", "work_order"]

SUFFIX = ".scenario.yaml"


def work_order(ids: Sequence[str], *, reorder: bool = True) -> list[str]:
    """The files of a collection (``ids``: node ids, in the workers' order) in the order they
    are handed out: scenario files first, in collection order; then the others, by number of
    items (most first; ties in collection order) when ``reorder``, else in collection order."""
    files: dict[str, int] = {}
    for nodeid in ids:
        scope = nodeid.split("::", 1)[0]
        files[scope] = files.get(scope, 0) + 1
    rank = {f: n for n, f in enumerate(files)}

    def key(f: str) -> tuple[int, int, int]:
        if f.endswith(SUFFIX):
            return (0, 0, rank[f])
        return (1, -files[f] if reorder else 0, rank[f])

    return sorted(files, key=key)


class ScenarioFileScheduling(LoadFileScheduling):  # type: ignore[misc]
    """``--dist loadfile`` with scenario files first, in the order the workers collected them."""

    collection: list[str] | None  # pytest-xdist's: the ids, once every worker collected

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # pytest-xdist's own: more nodes came
            super().schedule()
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(next(iter(self.registered_collections.values())))
        if not self.collection:
            return
        units: dict[str, dict[str, bool]] = {}
        for nodeid in self.collection:
            units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
        reorder = bool(getattr(self.config.option, "loadscopereorder", True))
        for scope in work_order(self.collection, reorder=reorder):
            self.workqueue[scope] = units[scope]
        extra_nodes = len(self.nodes) - len(self.workqueue)
        if extra_nodes > 0:  # no more workers than work
            self.log(f"Shutting down {extra_nodes} nodes")
            for _ in range(extra_nodes):
                unused_node, _assigned = self.assigned_work.popitem()
                self.log(f"Shutting down unused node {unused_node}")
                unused_node.shutdown()
        for node in self.nodes:
            self._assign_work_unit(node)
        for node in self.nodes:  # each node starts with two work units where it can
            self._reschedule(node)
        if not self.workqueue:
            for node in self.nodes:
                node.shutdown()
