"""The report folder while a gate runs: the previous run's outputs are never left looking current.

When a gate starts, each output it will write at the top of its report folder (gate.json,
junit.xml, report.html) is replaced by a "running" marker that no CI reads as green: gate.json
says ``"ok": false, "status": "running"``, junit.xml holds one error, report.html says there are
no results. The gate replaces them with its results as it finishes; one killed outright (SIGKILL,
OOM, a CI timeout) leaves the markers, never the previous run's ``"ok": true``. When it ends
without writing an output (no campaign ran, pytest stopped on a bad option), the marker is
removed: a file that still holds its marker, byte for byte, and nothing else.

Only those three names, only inside the folder, only regular files: a symbolic link or anything
else at one of the names is left alone (and not written through); nothing the gate did not write
is deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat

from crashpoint.harness._report._safe import write_file

__all__ = [
    "GATE_RUNNING",
    "RUNNING_MARKERS",
    "clear_report_running",
    "is_running_marker",
    "mark_report_running",
]

#: gate.json while a gate runs
GATE_RUNNING = {"ok": False, "incomplete": True, "status": "running"}

_WHY = "no results: the crashpoint gate is still running, or was killed before it wrote them"

#: name -> the marker each output holds while the gate runs
RUNNING_MARKERS: dict[str, str] = {
    "gate.json": json.dumps(GATE_RUNNING),
    "junit.xml": (
        '<?xml version="1.0" encoding="utf-8"?>'
        '<testsuites name="crashpoint gate">'
        '<testsuite name="crashpoint" tests="1" errors="1" failures="0" skipped="0">'
        '<testcase classname="crashpoint" name="gate">'
        f'<error message="{_WHY}">{_WHY}</error>'
        "</testcase></testsuite></testsuites>\n"
    ),
    "report.html": (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        "<title>crashpoint gate: running</title></head>"
        f"<body><h1>crashpoint gate: no results</h1><p>{_WHY}.</p></body></html>\n"
    ),
}

_READ_LIMIT = 64 * 1024  # more than any marker: a bigger file is an output, not a marker


def _kind(path: str) -> str:
    """ "" (nothing there), "file" (a regular file), or "other" (a link, a folder, ...)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return ""
    return "file" if stat.S_ISREG(st.st_mode) else "other"


def mark_report_running(folder: str) -> list[str]:
    """Replace the previous run's gate.json, junit.xml and report.html in ``folder`` by their
    "running" markers (:data:`RUNNING_MARKERS`); return the paths written. ``folder`` must
    be safe already (:func:`crashpoint.harness.secure_dir`); a name held by anything but a
    regular file is skipped."""
    written = []
    for name, text in RUNNING_MARKERS.items():
        path = os.path.join(folder, name)
        if _kind(path) == "other":
            continue
        with contextlib.suppress(OSError):  # UnsafeReportFolder too: a link planted meanwhile
            written.append(write_file(path, text))
    return written


def is_running_marker(path: str) -> bool:
    """Does ``path`` (a regular file, not followed through a link) hold its running marker?"""
    name = os.path.basename(path)
    if name not in RUNNING_MARKERS:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(_READ_LIMIT + 1)
    except OSError:
        return False
    finally:
        os.close(fd)
    if data == RUNNING_MARKERS[name].encode():
        return True
    if name != "gate.json" or len(data) > _READ_LIMIT:
        return False
    try:  # a gate.json marker written with other spacing (an older crashpoint)
        return bool(json.loads(data) == GATE_RUNNING)
    except ValueError:
        return False


def clear_report_running(folder: str, names: tuple[str, ...] = tuple(RUNNING_MARKERS)) -> list[str]:
    """Remove each of ``names`` in ``folder`` that still holds its running marker (the gate
    ended without writing that output); return the paths removed."""
    removed = []
    for name in names:
        path = os.path.join(folder, name)
        if is_running_marker(path):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
    return removed
