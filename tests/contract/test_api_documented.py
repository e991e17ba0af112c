"""Every exported name is documented, and the docs list no name that is gone.

``docs/reference/api.md`` has one section per public face, headed by the face's name in
backticks (``## `crashpoint.faults` ``), running to the next ``##`` heading (its ``###``
groups stay inside it). A name is documented when a table row of its face's section starts with
it, as ```` | `Name` | kind | ... ````: a row is the one place a name is defined, so a passing
mention in another row or in the prose does not count, nor does a row in another face's section.

Each public face that imports here is checked both ways: a name in its ``__all__`` without a row
is *missing*, a row for a name it no longer exports is *stale*. The adapters are skipped, with
the reason, where their framework (an extra) is not installed.
"""

from __future__ import annotations

import importlib
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


def _import_face(face: str) -> object:
    if face in EXTRAS:
        module, extra = EXTRAS[face]
        pytest.importorskip(
            module,
            reason=f"{face} needs {module}: pip install 'crashpoint[{extra}]'",
        )
    return importlib.import_module(face)


@pytest.mark.parametrize("face", FACES)
def test_every_exported_name_has_a_row_and_every_row_is_exported(face: str, page: str) -> None:
    module = _import_face(face)
    found = drift(face, module.__all__, page)  # type: ignore[attr-defined]
    assert not found, found.message()


def test_the_page_has_one_section_per_public_face_in_layer_order(page: str) -> None:
    assert list(sections(page)) == list(FACES)


# -- the check fails where it must -----------------------------------------------------------


def test_a_name_without_a_row_is_reported(page: str) -> None:
    import crashpoint.probe as face

    found = drift("crashpoint.probe", [*face.__all__, "not_documented_anywhere"], page)
    assert found.missing == ("not_documented_anywhere",)
    assert found.stale == ()
    assert "crashpoint.probe exports 1 name(s)" in found.message()
    assert "not_documented_anywhere" in found.message()


def test_a_row_for_a_name_no_longer_exported_is_reported(page: str) -> None:
    import crashpoint.probe as face

    found = drift("crashpoint.probe", [n for n in face.__all__ if n != "step_started"], page)
    assert found.missing == ()
    assert found.stale == ("step_started",)
    assert "no longer exports: step_started" in found.message()


def test_a_row_in_another_faces_section_or_a_mention_in_prose_does_not_count() -> None:
    page = "\n".join(
        [
            "## `crashpoint`",
            "The `Store` and `probe` are here.",  # prose: not a row
            "| name | kind | what it is |",
            "|---|---|---|",
            "| `probe` | module | the `Store`'s neighbour |",
            "## `crashpoint.checkpoint`",
            "| `Store` | class | a folder of runs |",
        ]
    )
    assert drift("crashpoint", ["Store", "probe"], page).missing == ("Store",)
    assert drift("crashpoint.checkpoint", ["Store"], page).missing == ()
    assert not drift("crashpoint.probe", [], page).has_section
