"""The house keeps its doors: layers, rooms, faces, no circles, and a child side that loads little.

The rules are in ``tests/contract/_imports.py`` (and, in import-linter's words, in
``pyproject.toml``). The tests below run them on the real source, and on small graphs and a
small package on disk with a deliberate circle, an upward edge and a private reach, to show the
rules can fail.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _imports import (
    LAYERS,
    ROOMS,
    build_graph,
    cycles,
    door_reaches,
    private_reaches,
    upward_edges,
)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"

#: What ``import crashpoint.probe`` may load (the issue's bound), and the agent-side entry.
MAX_PROBE_MODULES = 6
MAX_ENTRY_MODULES = 12

#: The faces with an ``__all__``; the lazy ones list where each name lives (``_WHERE``).
FACES = (
    "crashpoint",
    "crashpoint.errors",
    "crashpoint.probe",
    "crashpoint.checkpoint",
    "crashpoint.checkpoint.postgres",
    "crashpoint._proc",
    "crashpoint.faults",
    "crashpoint.harness",
    "crashpoint.harness._spec",
    "crashpoint.harness._standins",
    "crashpoint.harness._checker",
    "crashpoint.harness._report",
    "crashpoint.harness._engine",
    "crashpoint.cli",
)


@pytest.fixture(scope="module")
def graph():  # type: ignore[no-untyped-def]
    return build_graph(SRC)


def test_no_circle_between_modules(graph) -> None:  # type: ignore[no-untyped-def]
    assert cycles(graph.runtime()) == []


def test_no_upward_edge_between_layers(graph) -> None:  # type: ignore[no-untyped-def]
    assert upward_edges(graph.runtime(), LAYERS) == []


def test_the_harness_rooms_are_layered(graph) -> None:  # type: ignore[no-untyped-def]
    assert upward_edges(graph.runtime(), ROOMS) == []


def test_a_private_module_is_imported_only_from_inside_its_package(graph) -> None:  # type: ignore[no-untyped-def]
    assert private_reaches(graph.runtime()) == []


def test_doors_import_public_faces_only(graph) -> None:  # type: ignore[no-untyped-def]
    assert door_reaches(graph.runtime()) == []


def test_every_import_inside_a_function_says_why(graph) -> None:  # type: ignore[no-untyped-def]
    where = [f"{m} line {n}" for m, n in graph.unexplained]
    assert where == [], "an import hidden in a function needs a comment saying why (cost)"


def test_the_graph_sees_every_module(graph) -> None:  # type: ignore[no-untyped-def]
    """The walk is no stub: it finds the modules and the edges everyone knows are there."""
    assert len(graph.modules) > 80
    runtime = graph.runtime()
    assert "crashpoint.errors" in runtime["crashpoint.probe"]
    assert "crashpoint.harness._spec" in runtime["crashpoint.harness._engine._trial"]


# -- the rules fail where they must --------------------------------------------------------------


def test_a_circle_is_found() -> None:
    graph = {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}, "p.d": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert cycles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_an_upward_edge_is_found() -> None:
    graph = {"crashpoint.checkpoint._run": {"crashpoint.harness"}}
    assert upward_edges(graph, LAYERS) == [
        "crashpoint.checkpoint._run -> crashpoint.harness: layer 2 imports layer 5"
    ]
    rooms = {"crashpoint.harness._checker._checks": {"crashpoint.harness._report"}}
    assert "are independent" in upward_edges(rooms, ROOMS)[0]


def test_a_private_reach_is_found() -> None:
    graph = {
        "crashpoint.harness._engine._trial": {
            "crashpoint.harness._spec._model",  # another room's private module: refused
            "crashpoint.harness._spec",  # its face: fine
            "crashpoint._fsio",  # the base's private module, inside crashpoint: fine
        },
        "crashpoint.pytest_plugin": {"crashpoint._units", "crashpoint.harness"},
    }
    assert private_reaches(graph) == [
        "crashpoint.harness._engine._trial -> crashpoint.harness._spec._model: "
        "crashpoint.harness._spec._model is private to crashpoint.harness._spec"
    ]
    assert door_reaches(graph) == [
        "crashpoint.pytest_plugin -> crashpoint._units: a door imports public faces only"
    ]


def test_the_walk_finds_a_circle_held_open_by_an_import_in_a_function(tmp_path: Path) -> None:
    """A real package on disk: a circle through a function-level import is still a circle, an
    import made only for type checkers is not one, and the unexplained import is reported."""
    pkg = tmp_path / "crashpoint"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from crashpoint.sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        textwrap.dedent(
            """\
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from crashpoint import c
            def f():
                from crashpoint import a
                return a
            """
        )
    )
    (pkg / "c.py").write_text("from crashpoint.sub import b\n")
    g = build_graph(tmp_path)
    assert cycles(g.runtime()) == [["crashpoint.a", "crashpoint.sub.b"]]
    assert g.unexplained == [("crashpoint.sub.b", 5)]


# -- faces ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("face", FACES)
def test_each_face_has_a_docstring_and_a_sorted_all_that_resolves(face: str) -> None:
    module = importlib.import_module(face)
    assert (module.__doc__ or "").strip(), f"{face} says nothing about what the room is for"
    names = list(module.__all__)
    assert len(names) == len(set(names)), f"{face}.__all__ repeats a name"
    assert names == sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n)), (
        f"{face}.__all__ is not sorted (constants, classes, functions)"
    )
    for name in names:
        assert _resolves(module, name), f"{face}.{name} does not resolve"
    where = getattr(module, "_WHERE", None)
    if where is not None:  # a lazy face: the table and __all__ list the same names
        assert set(where) == set(names), f"{face}: _WHERE and __all__ differ"


def _resolves(module: object, name: str) -> bool:
    """The name resolves, or (an optional extra missing) its error says which to install."""
    try:
        return getattr(module, name) is not None
    except ImportError as exc:
        return "pip install 'crashpoint[" in str(exc)


# -- the child side ------------------------------------------------------------------------------


def _loaded(code: str, *argv: str) -> list[str]:
    """The modules ``python -X importtime -c code`` (or ``-m argv``) imports, in order."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}
    cmd = [sys.executable, "-X", "importtime", *(["-c", code] if code else argv)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=False)
    names = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "package":
                names.append(name)
    return names


def test_the_probe_loads_a_handful_of_modules() -> None:
    mods = [m for m in _loaded("import crashpoint.probe") if m.startswith("crashpoint")]
    assert "crashpoint.probe" in mods
    assert len(mods) <= MAX_PROBE_MODULES, mods


def test_the_entry_module_loads_the_base_only_and_no_psutil() -> None:
    """What every spawned entry agent pays before its own code: here the agent is a function of
    the standard library, so everything crashpoint is the entry's own cost."""
    mods = _loaded("", "-m", "crashpoint._entry", "json:dumps")
    ours = [m for m in mods if m.startswith("crashpoint")]  # (_entry itself runs as __main__)
    assert "crashpoint" in ours
    assert len(ours) <= MAX_ENTRY_MODULES, ours
    assert "psutil" not in mods
    assert not [m for m in ours if m.startswith(("crashpoint.harness", "crashpoint.checkpoint"))]


def test_the_injected_sitecustomize_loads_no_library_harness_or_psutil() -> None:
    from crashpoint.faults import INJECT_DIR

    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHPOINT_")}
    env["PYTHONPATH"] = INJECT_DIR
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    mods = [ln.rsplit("|", 1)[1].strip() for ln in proc.stderr.splitlines() if "|" in ln]
    assert "sitecustomize" in mods  # it did run
    assert not [m for m in mods if m.startswith("crashpoint") or m == "psutil"], mods


def test_replay_folders_written_before_the_move_still_run_their_entry() -> None:
    """``python -m crashpoint.harness._entry`` (what older replay folders name) still works."""
    proc = subprocess.run(
        [sys.executable, "-m", "crashpoint.harness._entry", "json:dumps", "x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "RuntimeWarning" not in proc.stderr


def test_the_cgroup_watcher_runs_on_the_standard_library_alone() -> None:
    """``_proc/_cgroup.py`` is also run as its own watcher, ``python -I -S _cgroup.py --watch``,
    where crashpoint cannot be imported: an import of it at module level would leave every
    cgroup of a killed harness behind."""
    from crashpoint._proc import _cgroup

    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import runpy; runpy.run_path({_cgroup.__file__!r})"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
