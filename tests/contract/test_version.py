"""One version source: ``src/crashpoint/_version.py``.

The packaging metadata reads it (``dynamic = ["version"]`` and ``[tool.setuptools.dynamic]`` in
``pyproject.toml``), ``crashpoint.__version__`` is the same string, and no other module under
``src/`` writes a version of its own that could drift from it.
"""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import crashpoint
from crashpoint import _version

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
VERSION_FILE = SRC / "crashpoint" / "_version.py"


def literal_version_assignments(path: Path) -> list[int]:
    """Line numbers where ``path`` assigns a string literal to ``__version__``
    (``__version__ = "..."``, ``__version__: str = "..."``)."""
    text = path.read_text(encoding="utf-8")
    if "__version__" not in text:  # no such assignment: no parse (the suite's time)
        return []
    tree = ast.parse(text, filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        names = {t.id for t in targets if isinstance(t, ast.Name)}
        is_str = isinstance(value, ast.JoinedStr) or (
            isinstance(value, ast.Constant) and isinstance(value.value, str)
        )
        if "__version__" in names and is_str:
            lines.append(node.lineno)
    return lines


def test_version_file_is_a_docstring_and_one_literal() -> None:
    tree = ast.parse(VERSION_FILE.read_text(encoding="utf-8"))
    assert isinstance(tree.body[0], ast.Expr)  # the docstring
    assert isinstance(tree.body[0].value, ast.Constant)
    assert len(tree.body) == 2, "only a docstring and __version__ (no imports: setuptools reads it)"
    assert literal_version_assignments(VERSION_FILE) == [tree.body[1].lineno]
    assert isinstance(_version.__version__, str)
    assert _version.__version__


def test_installed_metadata_version_is_the_version_file() -> None:
    assert importlib.metadata.version("crashpoint") == _version.__version__


def test_package_version_is_the_version_file() -> None:
    assert crashpoint.__version__ == _version.__version__


def test_no_other_module_writes_a_version_literal() -> None:
    offenders = {
        path: lines
        for path in sorted(SRC.rglob("*.py"))
        if path != VERSION_FILE and (lines := literal_version_assignments(path))
    }
    listing = [f"{p.relative_to(ROOT)}:{n}" for p, lines in offenders.items() for n in lines]
    assert not offenders, listing
