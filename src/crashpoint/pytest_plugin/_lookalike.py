"""Scenario lookalikes: ``foo.yml``, ``foo.yaml``, ``foo.scenario.yml``, ``foo-scenario.yaml``.

Only ``*.scenario.yaml`` files are collected. A YAML file with another name whose top level
has both ``agent:`` and ``faults:`` was meant to be one: given on the command line it is a
usage error with a "did you mean" (not pytest's "not found" or "no tests ran"); found while
walking a folder it gets one note in the session's output (not a warning: projects run with
``filterwarnings = error``). Standard library only, and cheap: the first 64 KiB of a file
whose name ends in ``.yml``/``.yaml`` is scanned for the two keys at column 0; nothing is
parsed or imported.
"""

from __future__ import annotations

import os
import re

__all__: list[str] = []

SUFFIX = ".scenario.yaml"
#: how much of a file is read to tell (the keys of a scenario are near its top)
HEAD = 64 * 1024
_KEY = re.compile(r"^(agent|faults)\s*:", re.MULTILINE)
_STEM = re.compile(r"[._-]?scenario$", re.IGNORECASE)


def suggested_name(name: str) -> str:
    """``foo.yml`` / ``foo-scenario.yaml`` / ``foo.scenario.yml`` -> ``foo.scenario.yaml``."""
    stem = re.sub(r"\.ya?ml$", "", name, flags=re.IGNORECASE)
    return (_STEM.sub("", stem) or stem) + SUFFIX


def lookalike(path: str | os.PathLike[str]) -> str | None:
    """The name ``path`` should have if it is a YAML file that looks like a scenario but is not
    named ``*.scenario.yaml``; None otherwise (or when it cannot be read: no error here)."""
    name = os.path.basename(os.fspath(path))
    if name.endswith(SUFFIX) or not re.search(r"\.ya?ml$", name, re.IGNORECASE):
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD).decode("utf-8", "replace")
    except OSError:
        return None
    if {m.group(1) for m in _KEY.finditer(head)} != {"agent", "faults"}:
        return None
    return suggested_name(name)


def hint(path: str | os.PathLike[str], better: str) -> str:
    """One line: what the file is, why it is not run, the name to give it."""
    folder = os.path.dirname(os.fspath(path))
    return (
        f"{os.fspath(path)} looks like a crashpoint scenario (top-level agent: and faults:) "
        f"but is not collected: only *{SUFFIX} files are. Did you mean "
        f"`{os.path.join(folder, better)}`? (rename it: mv {os.fspath(path)} "
        f"{os.path.join(folder, better)})"
    )
