"""Every exported name is documented, and the docs list no name that is gone.

``docs/reference/api.md`` has one section per public face, headed by the face's name in
backticks (``## `crashpoint.faults` ``), running to the next ``##`` heading (its ``###``
groups stay inside it). A name is documented when a table row of its face's section starts with
it, as ```` | `Name` | kind | ... ````: a row is the one place a name is defined, so a passing
mention in another row or in the prose does not count, nor does a row in another face's section.

Each public face that imports here is checked both ways: a name in its ``__all__`` without a row
is *missing*, a row for a name it no longer exports is *stale*. The adapters are skipped, with
the reason, where their framework (an extra) is not installed. Their ``__all__`` is read from
the source (a literal list, each name defined at the module's top level): importing them imports
their framework, 1-4 s of CPU each (openai-agents the most), and their own tests import them.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "reference" / "api.md"

#: The public faces, in layer order (the order of the page's sections).
FACES = (
    "crashpoint",
    "crashpoint.errors",
    "crashpoint.probe",
    "crashpoint.checkpoint",
    "crashpoint.checkpoint.postgres",
    "crashpoint.faults",
    "crashpoint.harness",
    "crashpoint.strategies",
    "crashpoint.adapters.langgraph",
    "crashpoint.adapters.langgraph_saver",
    "crashpoint.adapters.dbos",
    "crashpoint.adapters.openai_agents",
    "crashpoint.adapters.pydantic_ai",
    "crashpoint.cli",
)
#: face -> (the module its extra installs, the extra): skipped where the module is missing.
EXTRAS = {
    "crashpoint.adapters.langgraph": ("langgraph", "langgraph"),
    "crashpoint.adapters.langgraph_saver": ("langgraph", "langgraph"),
    "crashpoint.adapters.dbos": ("dbos", "dbos"),
    "crashpoint.adapters.openai_agents": ("agents", "openai-agents"),
    "crashpoint.adapters.pydantic_ai": ("pydantic_ai", "pydantic-ai"),
}
_HEADING = re.compile(r"^##\s+(.*?)\s*$")
_FACE_HEADING = re.compile(r"^`([A-Za-z_][\w.]*)`$")
_ROW = re.compile(r"^\|\s*`([A-Za-z_]\w*)`\s*\|")


def sections(page: str) -> dict[str, str]:
    """face name -> the text of its section (from its ``##`` heading to the next one)."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    fenced = False
    for line in page.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            face = _FACE_HEADING.match(heading.group(1))
            current = out.setdefault(face.group(1), []) if face else None
        elif current is not None:
            current.append(line)
    return {face: "\n".join(lines) for face, lines in out.items()}


def documented(section: str) -> list[str]:
    """The names a section defines: the first cell of each table row, in order."""
    return [m.group(1) for line in section.splitlines() if (m := _ROW.match(line.strip()))]


@dataclass(frozen=True)
class Drift:
    """How one face's ``__all__`` and its section of the API page differ."""

    face: str
    missing: tuple[str, ...]  # exported, no row
    stale: tuple[str, ...]  # a row, not exported
    has_section: bool = True

    def __bool__(self) -> bool:
        return bool(self.missing or self.stale or not self.has_section)

    def message(self) -> str:
        page = API_PAGE.relative_to(ROOT)
        lines = []
        if not self.has_section:
            lines.append(f"{page} has no section '## `{self.face}`'")
        if self.missing:
            lines.append(
                f"{self.face} exports {len(self.missing)} name(s) with no row in its section of "
                f"{page}: {', '.join(self.missing)} (add a row: | `Name` | kind | what it is |)"
            )
        if self.stale:
            lines.append(
                f"{page} lists {len(self.stale)} name(s) under {self.face} that it no longer "
                f"exports: {', '.join(self.stale)} (remove the rows, or export the names)"
            )
        return "\n".join(lines)


def drift(face: str, exported: Iterable[str], page: str) -> Drift:
    """Compare the names ``face`` exports with the rows of its section of ``page``."""
    names = list(exported)
    section = sections(page).get(face)
    rows = documented(section or "")
    missing = tuple(n for n in names if n not in rows)
    stale = tuple(dict.fromkeys(n for n in rows if n not in names))
    return Drift(face, missing, stale, has_section=section is not None)


@pytest.fixture(scope="module")
def page() -> str:
    return API_PAGE.read_text(encoding="utf-8")


def _defined(node: ast.stmt) -> list[str]:
    """The top-level names one statement of a module binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def static_all(source: str, where: str) -> list[str]:
    """A module's ``__all__`` read from its source without importing it: it must be one literal
    list of names, each bound at the module's top level (a def, class, assignment or import)."""
    tree = ast.parse(source, where)
    found: list[str] | None = None
    bound: set[str] = set()
    for node in tree.body:
        bound.update(_defined(node))
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "__all__"
        ]:
            try:
                found = ast.literal_eval(node.value)
            except ValueError:
                found = None
    assert isinstance(found, list), f"{where}: no literal `__all__ = [...]` at the top level"
    undefined = [n for n in found if n not in bound]
    assert not undefined, f"{where}: __all__ names {undefined}, not defined at the top level"
    return found


def _exported(face: str) -> list[str]:
    if face not in EXTRAS:
        return list(importlib.import_module(face).__all__)
    module, extra = EXTRAS[face]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{face} needs {module}: pip install 'crashpoint[{extra}]'")
    spec = importlib.util.find_spec(face)  # imports crashpoint.adapters, not the framework
    assert spec is not None
    assert spec.origin is not None
    return static_all(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)


@pytest.mark.parametrize("face", FACES)
def test_every_exported_name_has_a_row_and_every_row_is_exported(face: str, page: str) -> None:
    found = drift(face, _exported(face), page)
    assert not found, found.message()


def test_an_adapters_all_read_from_source_is_checked() -> None:
    """The static read of an adapter's ``__all__`` (no import) refuses what an import would
    show wrong: a name that is not defined, an ``__all__`` that is not a literal list."""
    src = "import os\nfrom x import y as z\nclass A: ...\ndef b(): ...\nC: int = 1\n"
    assert static_all(src + "__all__ = ['A', 'C', 'b', 'os', 'z']\n", "m.py") == [
        "A", "C", "b", "os", "z",
    ]  # fmt: skip
    with pytest.raises(AssertionError, match=r"m.py: __all__ names \['gone'\], not defined"):
        static_all(src + "__all__ = ['A', 'gone']\n", "m.py")
    with pytest.raises(AssertionError, match="no literal"):
        static_all(src + "__all__ = sorted(['A'])\n", "m.py")


@pytest.mark.parametrize("face", ["crashpoint.errors", "crashpoint.faults", "crashpoint.cli"])
def test_the_source_read_agrees_with_the_import(face: str) -> None:
    """On faces that import cheaply, the static read gives exactly the imported ``__all__``."""
    spec = importlib.util.find_spec(face)
    assert spec is not None
    assert spec.origin is not None
    got = static_all(Path(spec.origin).read_text(encoding="utf-8"), spec.origin)
    assert got == list(importlib.import_module(face).__all__)
