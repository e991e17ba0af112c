"""The wheel ships what runs: the package, its data files, and nothing else.

``faults/_inject/sitecustomize.py`` sits in a folder without ``__init__.py`` (it is put on an
agent's ``PYTHONPATH``, never imported), so only ``[tool.setuptools.package-data]`` gets it
into the wheel; the same goes for ``py.typed`` and the demo agent's corpus. The wheel is built
from a copy of the checkout with the installed build backend (no isolation, no index), so a
listing that forgets a file fails here, not on a user's machine.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from crashpoint import _version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pytest itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "crashpoint"
#: Never copied into the build folder: the suite's own output and other environments.
NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    "*.egg-info",
    "build",
    "dist",
    ".*_cache",
    ".hypothesis",
    "crashpoint-report",
    ".work",
    ".benchmarks",
)


def build_backend_problem() -> str | None:
    """Why the wheel cannot be built here without the index, or None."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    system = pyproject["build-system"]
    if system["build-backend"] != "setuptools.build_meta":
        return f"build backend {system['build-backend']} is not the one this test knows"
    if importlib.util.find_spec("setuptools") is None:
        return "setuptools (the build backend) is not importable: pip install 'setuptools>=77'"
    have = Version(importlib.metadata.version("setuptools"))
    for line in system["requires"]:
        req = Requirement(line)
        if req.name == "setuptools" and have not in req.specifier:
            return f"setuptools {have} is installed; pyproject's [build-system] wants {req}"
    return None


def copy_sources(dest: Path) -> None:
    """The checkout's files as a clone would have them (git's list when this is a git
    checkout, else the folder minus build output and caches)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if listed.returncode != 0:
        shutil.copytree(ROOT, dest, ignore=NOT_SOURCES)
        return
    for name in filter(None, listed.stdout.decode().split("\0")):
        src = ROOT / name
        if src.is_file() and "__pycache__" not in src.parts:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[zipfile.ZipFile]:
    problem = build_backend_problem()
    if problem:
        pytest.skip(problem)
    base = tmp_path_factory.mktemp("wheel")
    copy_sources(base / "src-tree")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(base / "dist"),
            str(base / "src-tree"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    (built,) = (base / "dist").glob("crashpoint-*.whl")
    with zipfile.ZipFile(built) as zf:
        yield zf


def test_wheel_ships_the_package_data(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    assert "crashpoint/faults/_inject/sitecustomize.py" in names
    assert "crashpoint/py.typed" in names
    assert "crashpoint/_version.py" in names
    corpus = sorted(p.name for p in (PACKAGE / "agents" / "corpus").glob("*.txt"))
    assert corpus
    for name in corpus:
        assert f"crashpoint/agents/corpus/{name}" in names


def test_wheel_ships_no_tests(wheel: zipfile.ZipFile) -> None:
    strays = [n for n in wheel.namelist() if n.startswith("tests/") or "/tests/" in n]
    assert not strays
    tops = {n.split("/", 1)[0] for n in wheel.namelist()}
    assert tops == {"crashpoint", f"crashpoint-{_version.__version__}.dist-info"}, tops


def test_wheel_metadata_has_the_version_and_the_licence(wheel: zipfile.ZipFile) -> None:
    info = f"crashpoint-{_version.__version__}.dist-info"
    metadata = email.parser.Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
    assert metadata["Version"] == _version.__version__
    assert metadata["License-Expression"] == "MIT"
    assert f"{info}/licenses/LICENSE" in wheel.namelist()
