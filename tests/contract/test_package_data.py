"""The wheel ships what runs: the package, its data files, and nothing else.

``faults/_inject/sitecustomize.py`` sits in a folder without ``__init__.py`` (it is put on an
agent's ``PYTHONPATH``, never imported), so only ``[tool.setuptools.package-data]`` gets it
into the wheel; the same goes for ``py.typed`` and the demo agent's corpus. The wheel is built
from a copy of the checkout with the installed build backend (no isolation, no index), so a
listing that forgets a file fails here, not on a user's machine. The backend's PEP 517 hook is
called as a frontend calls it, in a fresh interpreter in the source tree (``pip wheel
--no-build-isolation`` does the same after 1.5 s of CPU of its own).
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

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


#: A PEP 517 frontend's call of the backend's build_wheel hook (in the source tree).
BUILD_WHEEL = "import sys, setuptools.build_meta as backend; backend.build_wheel(sys.argv[1])"


def build_wheel(tmp_path: Path, children: Any) -> zipfile.ZipFile:
    """A wheel built from a clone-like copy of the checkout by the build backend, in a session
    of its own (the ``children`` fixture reaps it, pass or fail)."""
    problem = build_backend_problem()
    if problem:
        pytest.skip(problem)
    copy_sources(tmp_path / "src-tree")
    (tmp_path / "dist").mkdir()
    build = children.spawn(
        [sys.executable, "-c", BUILD_WHEEL, str(tmp_path / "dist")], cwd=tmp_path / "src-tree"
    )
    assert build.wait(300) == 0, build.stderr_text()[-4000:]
    (built,) = (tmp_path / "dist").glob("crashpoint-*.whl")
    return zipfile.ZipFile(built)


def test_the_wheel_ships_its_package_data_version_and_licence_and_no_tests(
    tmp_path: Path, children: Any
) -> None:
    with build_wheel(tmp_path, children) as wheel:
        names = set(wheel.namelist())
        metadata_text = wheel.read(f"crashpoint-{_version.__version__}.dist-info/METADATA").decode()
    assert "crashpoint/faults/_inject/sitecustomize.py" in names
    assert "crashpoint/py.typed" in names
    assert "crashpoint/_version.py" in names
    corpus = sorted(p.name for p in (PACKAGE / "agents" / "corpus").glob("*.txt"))
    assert corpus
    for name in corpus:
        assert f"crashpoint/agents/corpus/{name}" in names
    assert not [n for n in names if n.startswith("tests/") or "/tests/" in n]
    info = f"crashpoint-{_version.__version__}.dist-info"
    assert {n.split("/", 1)[0] for n in names} == {"crashpoint", info}
    metadata = email.parser.Parser().parsestr(metadata_text)
    assert metadata["Version"] == _version.__version__
    assert metadata["License-Expression"] == "MIT"
    assert f"{info}/licenses/LICENSE" in names
