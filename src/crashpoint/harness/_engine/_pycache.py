"""The private bytecode cache of the Python agents the harness starts.

Every attempt (spawned, or the fork-mode zygote and its children) gets
``PYTHONPYCACHEPREFIX=<cache>`` instead of ``PYTHONDONTWRITEBYTECODE=1``: Python then reads and
writes every ``.pyc`` in a mirror tree under the cache, never a ``__pycache__`` next to a source,
so the agent's and the user's folders stay as they were, and an attempt no longer compiles the
agent's modules again (nor, where the interpreter ships no ``.pyc`` files, as slim container
images do, the standard library's). ``PYTHONDONTWRITEBYTECODE`` in the harness's own
environment is not passed on (only :data:`~crashpoint.harness._spec.PASS_ENV` is). A scenario
whose ``agent.env`` sets ``PYTHONDONTWRITEBYTECODE`` or ``PYTHONPYCACHEPREFIX`` keeps its
choice: the harness then sets neither.

Where (:func:`bytecode_cache`, resolved once per process):

- ``CRASHPOINT_PYCACHE=off`` (or ``0``, ``no``, ``false``, ``none``): no cache; attempts run with
  ``PYTHONDONTWRITEBYTECODE=1``, as before the cache existed.
- ``CRASHPOINT_PYCACHE=/abs/folder``: that folder.
- unset or empty: ``$XDG_CACHE_HOME/crashpoint/pycache`` (``~/.cache/crashpoint/pycache``), or,
  if that one cannot be used, ``<tmp>/crashpoint-<uid>/pycache``.

Per user and kept between runs, because a cache that starts empty costs more than it saves
once: with a prefix Python ignores the ``.pyc`` files next to the sources, so the first process
compiles everything it imports, the standard library included (``benchmarks/bytecode_cache.py``,
a small agent importing json, sqlite3 and email: 0.4-0.5 s once; then each attempt saves the
compile of the agent's own modules, and where the interpreter ships no ``.pyc`` files, 0.45 s
of 0.6 s). A folder is used only if it is a real folder (not a symlink) owned by this user,
writable by no one else, and every folder above it is owned by this user or root and writable
by no one else unless sticky: a cache another user can write is code they run in our agents
(CI often runs as root under a ``HOME`` another user owns). One that fails is not used; the
reason is the cache's :attr:`BytecodeCache.note` (each campaign's ``bytecode_cache``, and one
of its notes when no cache is left). The cache is bounded: once per process, mirrors of source
folders that no longer exist are removed, and a cache still above :data:`MAX_BYTES` is emptied.

Attempts whose file operations are counted (under strace, or with the injected audit hook) run
without the cache (:func:`uncached_env`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "MAX_BYTES",
    "PYCACHE_VAR",
    "BytecodeCache",
    "bytecode_cache",
    "bytecode_env",
    "cache_for",
    "uncached_env",
    "unsafe_folder",
]

#: The variable that moves or turns off the cache.
PYCACHE_VAR = "CRASHPOINT_PYCACHE"
#: A cache larger than this (after its dead mirrors are removed) is emptied.
MAX_BYTES = 256 * 1024 * 1024
_OFF = frozenset({"off", "0", "no", "false", "none"})
#: What an agent's own environment may set to make its own choice.
_PYTHON_VARS = ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
_HOW = f"set {PYCACHE_VAR} to a folder of yours (or to off)"


@dataclass(frozen=True)
class BytecodeCache:
    """Where the attempts' bytecode goes: ``path`` ("" when there is no cache: attempts then
    run with ``PYTHONDONTWRITEBYTECODE=1``), and ``note``, why a folder was not used ("" when
    none was refused). Both are each campaign's ``bytecode_cache``; a note without a cache is
    also one of its notes."""

    path: str
    note: str = ""

    def to_json(self) -> dict[str, str | None]:
        return {"path": self.path or None, "note": self.note or None}


def unsafe_folder(path: str, *, create: bool = False) -> str:
    """Why ``path`` must not hold bytecode our agents run ("" if it may): see the module doc.
    ``create``: make it (0700, and its missing parents) first."""
    if not os.path.isabs(path):
        return f"{path!r} is not an absolute path"
    path = os.path.normpath(path)
    me = os.geteuid()
    if create:
        missing = []
        up = path
        while not os.path.lexists(up) and os.path.dirname(up) != up:
            missing.append(up)
            up = os.path.dirname(up)
        try:
            for folder in reversed(
                missing
            ):  # each made 0700, as ~/.cache and <tmp>/crashpoint-<uid>
                with contextlib.suppress(FileExistsError):
                    os.mkdir(folder, 0o700)
        except OSError as exc:
            return f"{path} cannot be made: {exc.strerror or exc}"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be used: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder (a symlink or a file)"
    if st.st_uid != me:
        return f"{path} is owned by uid {st.st_uid}, not by us (uid {me})"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    parent = os.path.realpath(os.path.dirname(path))
    while True:
        try:
            pst = os.stat(parent)
        except OSError as exc:
            return f"{parent} cannot be used: {exc.strerror or exc}"
        if pst.st_uid not in (me, 0):
            return f"{parent}, above it, is owned by uid {pst.st_uid}, not by us or root"
        if pst.st_mode & 0o022 and not pst.st_mode & stat.S_ISVTX:
            return (
                f"{parent}, above it, is writable by others and not sticky "
                f"(mode {stat.S_IMODE(pst.st_mode):o})"
            )
        up = os.path.dirname(parent)
        if up == parent:
            return ""
        parent = up


def _default_places() -> list[str]:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
    places = [os.path.join(base, "crashpoint", "pycache")] if os.path.isabs(base) else []
    tmp = os.path.join(tempfile.gettempdir(), f"crashpoint-{os.geteuid()}", "pycache")
    return [*places, tmp]


def _resolve(setting: str) -> BytecodeCache:
    value = setting.strip()
    if value.lower() in _OFF:
        return BytecodeCache("")  # asked for: nothing to note
    if value:
        why = unsafe_folder(value, create=True)
        if why:
            return BytecodeCache(
                "", f"{PYCACHE_VAR}: not used, {why}; attempts cache no bytecode. To fix: {_HOW}"
            )
        return BytecodeCache(os.path.normpath(value))
    refused: list[str] = []
    for place in _default_places():
        why = unsafe_folder(place, create=True)
        if not why:
            note = f"bytecode cache {place}: {'; '.join(refused)}" if refused else ""
            return BytecodeCache(place, note)
        refused.append(f"not used: {why}")
    return BytecodeCache("", f"no bytecode cache ({'; '.join(refused)}). To fix: {_HOW}")


def prune(path: str, max_bytes: int = MAX_BYTES) -> int:
    """Bound the cache at ``path``: remove the mirrors of source folders that are gone, then
    empty it if it still holds more than ``max_bytes``. Returns the bytes left."""
    total = 0
    for top, dirs, files in os.walk(path):
        source = top[len(path) :] or os.sep
        if top != path and not os.path.isdir(source):
            shutil.rmtree(top, ignore_errors=True)
            dirs[:] = []
            continue
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    if total > max_bytes:
        for entry in os.listdir(path):
            full = os.path.join(path, entry)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(full)
        return 0
    return total


_lock = threading.Lock()
_resolved: dict[tuple[str, ...], BytecodeCache] = {}


def bytecode_cache() -> BytecodeCache:
    """This process's bytecode cache (see the module doc): resolved, made and bounded once per
    setting of the variables it depends on."""
    key = (
        os.environ.get(PYCACHE_VAR, ""),
        os.environ.get("XDG_CACHE_HOME", ""),
        os.environ.get("HOME", ""),
        tempfile.gettempdir(),
        str(os.geteuid()),
    )
    with _lock:
        cache = _resolved.get(key)
        if cache is None:
            cache = _resolve(key[0])
            if cache.path:
                with contextlib.suppress(OSError):
                    prune(cache.path)
            _resolved[key] = cache
        return cache


def bytecode_env(agent_env: Mapping[str, str], cache: BytecodeCache) -> dict[str, str]:
    """The variables an attempt's environment gets for ``cache``: none when ``agent_env`` (the
    scenario's ``agent.env``) sets either of Python's own (its choice wins)."""
    if any(k in agent_env for k in _PYTHON_VARS):
        return {}
    if not cache.path:
        return {"PYTHONDONTWRITEBYTECODE": "1"}
    return {"PYTHONPYCACHEPREFIX": cache.path}


def cache_for(agent_env: Mapping[str, str]) -> BytecodeCache:
    """The cache an agent with ``agent_env`` uses: its own ``PYTHONPYCACHEPREFIX`` (or none)
    when it sets one of Python's variables, else :func:`bytecode_cache`."""
    if any(k in agent_env for k in _PYTHON_VARS):
        return BytecodeCache(agent_env.get("PYTHONPYCACHEPREFIX", ""))
    return bytecode_cache()


def uncached_env(env: Mapping[str, str], agent_env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for an attempt whose system calls or file operations are counted (under strace,
    or with the injected audit hook): without the cache, as before it, since a module compiled
    in one run and read from the cache in another opens other files and so shifts the counts
    (a fileop kill armed by its count in the golden run would land elsewhere). Unchanged when
    ``agent_env`` makes its own choice."""
    out = dict(env)
    if not any(k in agent_env for k in _PYTHON_VARS):
        out.pop("PYTHONPYCACHEPREFIX", None)
        out["PYTHONDONTWRITEBYTECODE"] = "1"
    return out
