"""The import graph of a package, from its source (an AST walk), and the house rules over it.

import-linter (run by CI, contracts in pyproject.toml) states the layers and the private-module
rule in its own words; this module checks what it cannot say, and what must hold even where it
is not installed:

- **no circle at all** between modules (imports made only for type checkers, under
  ``if TYPE_CHECKING:``, do not count: they never run);
- **no upward edge** between the package's layers, nor between the harness's rooms;
- **rooms and doors**: a private module (one whose own name starts with ``_``) is imported only
  from inside the package that holds it, and a door imports only public faces;
- every import made inside a function (to keep start-up cheap) says why, in a comment on its
  line or the line above.

Everything here works on a plain mapping of edges, so a test can hand it a graph with a
deliberate circle or a door reaching into a private module and see it fail.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: The package's layers, lowest first: a module may import its own layer and those below.
LAYERS: tuple[tuple[str, ...], ...] = (
    (  # 1 base: standard library only; this is all that runs inside an agent
        "crashpoint",
        "crashpoint.errors",
        "crashpoint.probe",
        "crashpoint._entry",
        "crashpoint._fsio",
        "crashpoint._units",
        "crashpoint._placeholders",
        "crashpoint._failpoints",
        "crashpoint._lazy",
        "crashpoint._version",
        "crashpoint._forkserver",
    ),
    ("crashpoint.checkpoint",),  # 2 the library
    ("crashpoint._proc",),  # 3 process control
    ("crashpoint.faults",),  # 4 faults
    ("crashpoint.harness",),  # 5 the harness
    ("crashpoint.adapters", "crashpoint.agents"),  # 6 adapters, demo agents
    (  # 7 doors (``python -m crashpoint`` is the command line too)
        "crashpoint.pytest_plugin",
        "crashpoint.cli",
        "crashpoint.strategies",
        "crashpoint.__main__",
    ),
)
#: Within a layer, packages that must not import one another.
INDEPENDENT: tuple[tuple[str, ...], ...] = (
    ("crashpoint.adapters", "crashpoint.agents"),
    ("crashpoint.pytest_plugin", "crashpoint.cli", "crashpoint.strategies"),
)
#: The harness's rooms, lowest first; the middle three are independent of one another.
ROOMS: tuple[tuple[str, ...], ...] = (
    ("crashpoint.harness._spec",),
    (
        "crashpoint.harness._standins",
        "crashpoint.harness._checker",
        "crashpoint.harness._report",
    ),
    ("crashpoint.harness._engine",),
)
#: The doors, and the public faces they may import (besides their own package).
DOORS = (
    "crashpoint.pytest_plugin",
    "crashpoint.cli",
    "crashpoint.strategies",
    "crashpoint.__main__",
)
PUBLIC_FACES = (
    "crashpoint",
    "crashpoint.cli",
    "crashpoint.errors",
    "crashpoint.probe",
    "crashpoint.checkpoint",
    "crashpoint.checkpoint.postgres",
    "crashpoint.faults",
    "crashpoint.harness",
)


@dataclass
class Graph:
    """Modules (name -> file) and edges (importer, imported) -> how: ``top`` (module level),
    ``func`` (inside a function) or ``tc`` (under ``if TYPE_CHECKING:``), each with its lines."""

    modules: dict[str, Path] = field(default_factory=dict)
    edges: dict[tuple[str, str], dict[str, list[int]]] = field(default_factory=dict)
    #: function-level imports without a comment saying why: (module, line)
    unexplained: list[tuple[str, int]] = field(default_factory=list)

    def runtime(self) -> dict[str, set[str]]:
        """importer -> what it imports when it runs (TYPE_CHECKING imports left out)."""
        out: dict[str, set[str]] = {m: set() for m in self.modules}
        for (a, b), how in self.edges.items():
            if set(how) - {"tc"}:
                out.setdefault(a, set()).add(b)
        return out


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def build_graph(src: Path, package: str = "crashpoint") -> Graph:
    """The import graph of ``src/package`` (every ``.py`` file under it)."""
    g = Graph()
    for dirpath, dirnames, files in os.walk(src / package):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                p = Path(dirpath) / f
                g.modules[module_name(src, p)] = p
    for mod, path in g.modules.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        is_pkg = path.name == "__init__.py"
        _walk(g, mod, is_pkg, ast.parse(text), lines, in_func=False, in_tc=False)
    return g


def _resolve(g: Graph, mod: str, is_pkg: bool, node: ast.ImportFrom | ast.Import) -> list[str]:
    targets: list[str] = []
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        if node.level:
            base_parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
            base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        for a in node.names:
            sub = f"{base}.{a.name}"
            targets.append(sub if sub in g.modules else base)
    out = []
    for t in targets:
        while t and t not in g.modules and "." in t:
            t = t.rsplit(".", 1)[0]
        if t in g.modules and t != mod:
            out.append(t)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return "TYPE_CHECKING" in ast.unparse(test)


def _walk(
    g: Graph, mod: str, is_pkg: bool, node: ast.AST, lines: list[str], *, in_func: bool, in_tc: bool
) -> None:
    for child in ast.iter_child_nodes(node):
        func = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.body:
                _walk(g, mod, is_pkg, _Holder(sub), lines, in_func=func, in_tc=True)
            for sub in child.orelse:
                _walk(g, mod, is_pkg, _Holder(sub), lines, in_func=func, in_tc=in_tc)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            targets = _resolve(g, mod, is_pkg, child)
            how = "tc" if in_tc else "func" if in_func else "top"
            for t in targets:
                g.edges.setdefault((mod, t), {}).setdefault(how, []).append(child.lineno)
            if targets and how == "func" and not _explained(lines, child.lineno):
                g.unexplained.append((mod, child.lineno))
        _walk(g, mod, is_pkg, child, lines, in_func=func, in_tc=in_tc)


class _Holder(ast.AST):
    """Wraps one statement so :func:`_walk` visits it as a child."""

    _fields = ("body",)

    def __init__(self, stmt: ast.stmt) -> None:
        self.body = [stmt]


def _explained(lines: list[str], lineno: int) -> bool:
    """An import inside a function says why: a comment on its line, on a line of its
    parentheses, or just above it (above a run of imports, the comment above the run)."""
    if "#" in lines[lineno - 1]:
        return True
    for line in lines[lineno : lineno + 30]:  # the rest of a parenthesised import
        if "#" in line:
            return True
        if ")" in line or not line.strip().endswith(","):
            break
    i = lineno - 2
    while i >= 0 and (not lines[i].strip() or lines[i].lstrip().startswith(("import ", "from "))):
        i -= 1
    return i >= 0 and "#" in lines[i]


# -- the rules -----------------------------------------------------------------------------------


def cycles(runtime: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a self-loop)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    graph = {k: sorted(v) for k, v in runtime.items()}

    def visit(v: str) -> None:
        # iterative Tarjan: the graph may be deeper than the recursion limit
        work = [(v, iter(graph.get(v, ())))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1 or node in graph.get(node, ()):
                    out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _owner(module: str, groups: Iterable[Iterable[str]]) -> str | None:
    """The most specific listed package that contains ``module``."""
    best: str | None = None
    for group in groups:
        for pkg in group:
            if (module == pkg or module.startswith(pkg + ".")) and (
                best is None or len(pkg) > len(best)
            ):
                best = pkg
    return best


def _rank(pkg: str, groups: tuple[tuple[str, ...], ...]) -> int:
    return next(i for i, group in enumerate(groups) if pkg in group)


def upward_edges(
    runtime: Mapping[str, Iterable[str]], groups: tuple[tuple[str, ...], ...]
) -> list[str]:
    """Edges from a lower group to a higher one, or between independent packages of one group;
    modules outside every group are not judged."""
    bad = []
    for a, targets in sorted(runtime.items()):
        pa = _owner(a, groups)
        for b in sorted(targets):
            pb = _owner(b, groups)
            if pa is None or pb is None or pa == pb:
                continue
            ra, rb = _rank(pa, groups), _rank(pb, groups)
            if rb > ra:
                bad.append(f"{a} -> {b}: layer {ra + 1} imports layer {rb + 1}")
            elif rb == ra and any(pa in g and pb in g for g in INDEPENDENT + ROOMS[1:2]):
                bad.append(f"{a} -> {b}: {pa} and {pb} are independent")
    return bad


def _innermost_private_parent(module: str) -> str | None:
    """The package a private module belongs to (its innermost private component's parent)."""
    parts = module.split(".")
    for i in range(len(parts) - 1, 0, -1):
        name = parts[i]
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            return ".".join(parts[:i])
    return None


def private_reaches(runtime: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports of a private module from outside the package that holds it."""
    bad = []
    for a, targets in sorted(runtime.items()):
        for b in sorted(targets):
            parent = _innermost_private_parent(b)
            if parent is not None and a != parent and not a.startswith(parent + "."):
                bad.append(f"{a} -> {b}: {b} is private to {parent}")
    return bad


def door_reaches(runtime: Mapping[str, Iterable[str]]) -> list[str]:
    """Imports by a door of anything but a public face or its own package."""
    bad = []
    for a, targets in sorted(runtime.items()):
        door = next((d for d in DOORS if a == d or a.startswith(d + ".")), None)
        if door is None:
            continue
        for b in sorted(targets):
            if b == door or b.startswith(door + ".") or b in PUBLIC_FACES:
                continue
            bad.append(f"{a} -> {b}: a door imports public faces only")
    return bad
