"""File operations of a run: recorded from the golden run, then killed at one by one.

``kill: {at: fileop}`` sweeps the golden run's file operations: :func:`record_golden` lists
the mutating operations the agent did under the trial's folders (in order, each with its
occurrence number), and for each one a trial arms a kill there with :func:`arm` and checks
with :func:`landed` that the kill hit exactly that operation.

Two mechanisms, one interface:

- **strace** (any language, also writes done in C such as SQLite's): the golden run is traced
  (:func:`recorder`); the kill is strace's fault injection,
  ``-P <file> -e inject=<syscall>:signal=KILL:when=<k>``, which kills the agent on *entering*
  the call (the operation is not carried out). ``when`` counts only the calls on that file,
  and counts per process and per thread: the golden run's count in the thread that did the
  operation is used, so an agent whose threads share a file may be killed at another
  occurrence; :func:`landed` then says so (never a silent pass).
- **audit** (Python agents, where strace is unavailable): the injected ``sitecustomize``'s
  audit hook records operations (``CRASHPOINT_FILEOP_RECORD``) and kills just before the n-th
  occurrence of an operation on a file (``CRASHPOINT_FILEOP_AT``), writing a landing line
  first. It sees opens for writing, renames, removes, truncates, mkdir/rmdir, links: not
  writes, fsyncs, nor anything done in C.

An operation is named by its identity, stable across runs: ``op`` (``openat(w)``, ``write``,
``rename``...), ``path`` under a placeholder (``{state_dir}/ckpt.json.tmp``) and ``n``, its
occurrence among the golden run's (op, path) pairs. Only successful operations are listed
(a failed ``unlink`` of a missing file changes nothing, so a kill before it is no new state).
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from crashpoint.errors import InvalidArgument
from crashpoint.faults import _strace
from crashpoint.faults._strace import Syscall

__all__ = [
    "GOLDEN_SYSCALLS",
    "INJECT_DIR",
    "Armed",
    "FileOp",
    "Landing",
    "Watch",
    "arm",
    "explain_empty",
    "landed",
    "op_of",
    "read_golden",
    "record_golden",
    "recorder",
]

#: The folder whose sitecustomize.py the audit mechanism puts first on PYTHONPATH.
#: The folder put first on a Python agent's PYTHONPATH for the audit hook
#: (``_inject/sitecustomize.py``): found through the package (its resources), so it moves
#: with the package, wherever it is installed.
INJECT_DIR = str(importlib.resources.files("crashpoint.faults") / "_inject")

#: Calls that change a file (data, names, or durability), traced in the golden run.
MUTATING = frozenset(
    {
        "write",
        "pwrite64",
        "writev",
        "pwritev",
        "pwritev2",
        "ftruncate",
        "truncate",
        "fallocate",
        "fsync",
        "fdatasync",
        "sync_file_range",
        "rename",
        "renameat",
        "renameat2",
        "link",
        "linkat",
        "symlink",
        "symlinkat",
        "unlink",
        "unlinkat",
        "mkdir",
        "mkdirat",
        "rmdir",
        "mknod",
        "mknodat",
        "creat",
    }
)
_OPENS = frozenset({"open", "openat", "openat2"})
_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
#: What the golden run is traced for: the mutating calls, opens, and what tells the parser
#: each process's folder (chdir, and the forks that inherit it).
GOLDEN_SYSCALLS: tuple[str, ...] = (
    *sorted(_OPENS),
    *sorted(MUTATING),
    "chdir",
    "fchdir",
    "clone",
    "clone3",
    "fork",
    "vfork",
)

_VIA = ("strace", "audit")


def op_of(call: Syscall) -> str:
    """The operation a traced call is (``openat(w)`` for an open that may write), or "" if it
    changes no file. Success is not checked here."""
    if call.name in _OPENS:
        flags = (
            call.args[1]
            if call.name == "open" and len(call.args) > 1
            else call.args[2]
            if len(call.args) > 2
            else ""
        )
        return f"{call.name}(w)" if any(f in flags for f in _WRITE_FLAGS) else ""
    return call.name if call.name in MUTATING else ""


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _times(k: int) -> str:
    return {0: "never", 1: "once", 2: "twice"}.get(k, f"{k} times")


@dataclass(frozen=True, slots=True)
class FileOp:
    """One file operation of the golden run, by identity: (``op``, ``path``, ``n``).

    ``op``: the operation (strace: the syscall, an open that may write as ``openat(w)``;
    audit: ``open(w)``, ``rename``, ``unlink``, ``truncate``, ``mkdir``, ``rmdir``, ``link``,
    ``symlink``). ``path``: the file, under a placeholder of the trial's folders
    (``{state_dir}/ckpt.json.tmp``); for a rename or link its source (its target if only
    that is under the folders). ``n``: its occurrence among the golden run's (op, path), from 1.

    Not part of the identity, used to arm the kill: ``path2`` (the other path of a rename,
    link or symlink, placeholder form if under the folders), ``via`` (``strace`` or
    ``audit``: how it was recorded, and so how it can be armed), ``syscall`` and ``when``
    (strace: the call to inject at and its count among that thread's calls of it on the
    file), ``rel`` (relative spellings of the path the agent used, which strace's ``-P``
    needs as given), ``shared`` (other processes or threads also called ``syscall`` on the
    file: strace's per-thread count may then land elsewhere).
    """

    op: str
    path: str
    n: int
    path2: str = field(default="", compare=False)
    via: str = field(default="strace", compare=False)
    syscall: str = field(default="", compare=False)
    when: int = field(default=0, compare=False)
    rel: tuple[str, ...] = field(default=(), compare=False)
    shared: bool = field(default=False, compare=False)
    #: strace, for a file named after the process (``.meta.json.<pid>.tmp``: another name in
    #: each run, shown with ``*`` for the pid): the call's count among *all* that thread's
    #: calls of ``syscall``, which the kill then waits for (no ``-P``: the name is unknown)
    anywhere: int = field(default=0, compare=False)

    def label(self) -> str:
        """For reports: ``openat(w) {state_dir}/ckpt.json.tmp #2``."""
        other = f" -> {self.path2}" if self.path2 else ""
        return f"{self.op} {self.path}{other} #{self.n}"

    def __str__(self) -> str:
        return self.label()

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"op": self.op, "path": self.path, "n": self.n, "via": self.via}
        if self.path2:
            d["path2"] = self.path2
        if self.via == "strace":
            d.update(syscall=self.syscall, when=self.when)
            if self.rel:
                d["rel"] = list(self.rel)
            if self.shared:
                d["shared"] = True
            if self.anywhere:
                d["anywhere"] = self.anywhere
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any], *, where: str = "fileop") -> FileOp:
        """Read back :meth:`to_json`; a bad entry raises ValueError naming ``where`` and the
        key."""
        if not isinstance(d, Mapping):
            raise InvalidArgument(
                f"{where}: a file operation is a mapping with op, path and n, "
                f"not {type(d).__name__}"
            )

        def text(key: str, default: str | None = None) -> str:
            v = d.get(key, default)
            if not isinstance(v, str) or (default is None and not v):
                raise InvalidArgument(f"{where}: key {key!r} must be a non-empty string, got {v!r}")
            return v

        def count(key: str, low: int, default: int | None = None) -> int:
            v = d.get(key, default)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise InvalidArgument(
                    f"{where}: key {key!r} must be a whole number >= {low}, got {v!r}"
                )
            return v

        via = text("via", "strace")
        if via not in _VIA:
            raise InvalidArgument(
                f"{where}: key 'via' must be one of {', '.join(_VIA)}, got {via!r}"
            )
        path = text("path")
        _check_placeholder(path, f"{where}: key 'path'")
        rel = d.get("rel", [])
        if not isinstance(rel, list) or not all(isinstance(r, str) and r for r in rel):
            raise InvalidArgument(
                f"{where}: key 'rel' must be a list of relative paths, got {rel!r}"
            )
        if any(r.startswith("/") for r in rel):
            raise InvalidArgument(f"{where}: key 'rel' holds an absolute path: {rel!r}")
        return cls(
            op=text("op"),
            path=path,
            n=count("n", 1),
            path2=text("path2", ""),
            via=via,
            syscall=text("syscall") if via == "strace" else "",
            when=count("when", 1) if via == "strace" else 0,
            rel=tuple(rel),
            shared=bool(d.get("shared", False)),
            anywhere=count("anywhere", 1) if d.get("anywhere") else 0,
        )


# -- placeholders -------------------------------------------------------------------------------


def _check_placeholder(path: str, where: str) -> None:
    if not path.startswith("{") or "}" not in path:
        raise InvalidArgument(
            f"{where}: {path!r} must start with a placeholder such as "
            "{state_dir}/ or {workdir}/"
        )
    rest = path[path.index("}") + 1 :]
    if rest and not rest.startswith("/"):
        raise InvalidArgument(f"{where}: {path!r}: a '/' must follow the placeholder")
    if ".." in rest.split("/"):
        raise InvalidArgument(f"{where}: {path!r} must not climb out of its folder with '..'")


class _Roots:
    """Maps absolute paths to ``{name}/rest`` and back, for the trial's folders (each also
    under its real path, so a descriptor's resolved path maps the same way)."""

    def __init__(self, roots: Mapping[str, str]) -> None:
        self.roots = {k: os.path.normpath(os.path.abspath(v)) for k, v in roots.items() if v}
        forms = []
        for name, root in self.roots.items():
            for form in {root, os.path.realpath(root)}:
                forms.append((form, name))
        self.forms = sorted(forms, key=lambda f: len(f[0]), reverse=True)  # most specific first

    def placeholder(self, path: str) -> str | None:
        if not path:
            return None
        for form, name in self.forms:
            if path == form:
                return "{" + name + "}"
            if path.startswith(form.rstrip("/") + "/"):
                return "{" + name + "}" + path[len(form.rstrip("/")) :]
        return None

    def concrete(self, path: str) -> list[str]:
        """The absolute spellings (as given, and resolved) of a placeholder path."""
        _check_placeholder(path, "file operation")
        name, rest = path[1 : path.index("}")], path[path.index("}") + 1 :]
        if name not in self.roots:
            known = ", ".join("{" + k + "}" for k in sorted(self.roots)) or "none"
            raise InvalidArgument(
                f"file operation {path!r}: unknown placeholder {{{name}}} "
                f"(this trial's folders: {known})"
            )
        root = self.roots[name]
        out = [os.path.normpath(root + rest)]
        real = os.path.normpath(os.path.realpath(root) + rest)
        if real not in out:
            out.append(real)
        return out


# -- arming -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Armed:
    """How to run one attempt so that its file operations are recorded (``fileop`` None) or
    it is killed at ``fileop``. Start the agent with ``wrap(argv)`` and ``environ(env)``;
    afterwards :func:`landed` (or :func:`record_golden`) reads the files it names.

    ``trace``: strace's output; ``record``: the audit hook's operation log; ``log``: the
    audit hook's landing line. ``cwd``: the folder the agent starts in (resolves relative
    paths in the trace).
    """

    via: str
    fileop: FileOp | None = None
    roots: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    trace: str = ""
    record: str = ""
    log: str = ""
    env: tuple[tuple[str, str], ...] = ()
    syscalls: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    inject: tuple[str, ...] = ()

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """The command to start: ``argv`` under strace (strace mode), else ``argv``."""
        if self.via != "strace":
            return list(argv)
        return _strace.wrap(
            argv, self.trace, syscalls=self.syscalls, inject=self.inject, paths=self.paths
        )

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus what the mechanism needs (audit: the hook's variables, and the
        injected sitecustomize first on PYTHONPATH)."""
        out = dict(base)
        out.update(self.env)
        if self.via == "audit":
            out["PYTHONPATH"] = os.pathsep.join(
                [INJECT_DIR, *filter(None, [base.get("PYTHONPATH", "")])]
            )
        return out

    @property
    def files(self) -> tuple[str, ...]:
        """The evidence files this attempt writes (for the trial's folder)."""
        return tuple(f for f in (self.trace, self.record, self.log) if f)

    def landing_seen(self) -> bool:
        """True once the evidence shows the armed kill happened (cheap: for polling while
        the attempt runs; :func:`landed` then says whether it hit the planned operation)."""
        if self.fileop is None:
            return False
        try:
            if self.via == "audit":
                return os.path.getsize(self.log) > 0
            with open(self.trace, "rb") as f:  # a -P trace of one syscall: small
                return any(line.rstrip().endswith(b"= ?") for line in f)
        except OSError:
            return False


class Watch:
    """Polls an armed attempt while it runs and calls ``on_landing`` once, as soon as the
    kill landed: the operation's own process is dead, and ``on_landing`` (e.g. killing the
    attempt's process group) takes the agent's other processes down with it. Without it, a
    shell script whose ``mv`` was killed goes on running. ``stop()`` ends the polling.

    ``fired``: the landing was seen; ``error``: what ``on_landing`` raised (the group may
    already be gone), kept rather than lost in the thread."""

    def __init__(
        self, armed: Armed, on_landing: Callable[[], None], interval: float = 0.005
    ) -> None:
        self.armed, self.on_landing, self.interval = armed, on_landing, interval
        self.fired = False
        self.error: BaseException | None = None
        self._offset = 0
        self._tail = b""
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="crashpoint-fileop-watch", daemon=True)
        self._t.start()

    def _seen(self) -> bool:
        if self.armed.fileop is None:
            return False
        if self.armed.via == "audit":
            return self.armed.landing_seen()
        try:  # only what strace appended since the last look
            with open(self.armed.trace, "rb") as f:
                f.seek(self._offset)
                chunk = f.read(1 << 20)
        except OSError:
            return False
        self._offset += len(chunk)
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()
        return any(line.rstrip().endswith(b"= ?") for line in lines)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if self._seen():
                self.fired = True
                try:
                    self.on_landing()
                except Exception as e:  # kept for the caller, not lost in the thread
                    self.error = e
                return

    def stop(self) -> None:
        self._stop.set()
        if self._t is not threading.current_thread():
            self._t.join()


def _fresh(*paths: str) -> None:
    for p in paths:
        if p:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


def recorder(workfile_prefix: str, *, use_strace: bool, cwd: str = "") -> Armed:
    """Arm a run (the golden one) to record its file operations: strace traces
    :data:`GOLDEN_SYSCALLS` to ``<prefix>.strace``; the audit hook logs to
    ``<prefix>.fileops.jsonl``. Read them with :func:`record_golden`."""
    if use_strace:
        a = Armed(
            via="strace", cwd=cwd, trace=workfile_prefix + ".strace", syscalls=GOLDEN_SYSCALLS
        )
    else:
        rec = workfile_prefix + ".fileops.jsonl"
        a = Armed(via="audit", cwd=cwd, record=rec, env=(("CRASHPOINT_FILEOP_RECORD", rec),))
    _fresh(*a.files)
    return a


def arm(
    fileop: FileOp,
    roots: Mapping[str, str],
    workfile_prefix: str,
    *,
    use_strace: bool,
    cwd: str = "",
) -> Armed:
    """Arm one attempt to be killed at ``fileop``, whose placeholders name this trial's
    ``roots`` (``{"state_dir": ..., "workdir": ...}``). Work files go to
    ``<workfile_prefix>.strace`` (strace) or ``.fileops.jsonl`` and ``.landing.jsonl``
    (audit). ``use_strace`` must match how the golden run was recorded (``fileop.via``)."""
    via = "strace" if use_strace else "audit"
    if fileop.via != via:
        raise InvalidArgument(
            f"{fileop.label()} was recorded via {fileop.via}; arm it with "
            f"use_strace={fileop.via == 'strace'} (record the golden run the same "
            "way as the trials)"
        )
    r = _Roots(roots)
    paths = r.concrete(fileop.path)
    root_items = tuple(sorted(r.roots.items()))
    if use_strace:
        if not fileop.syscall or fileop.when < 1:
            raise InvalidArgument(
                f"{fileop.label()}: no syscall/when to inject at (recorded by "
                "an older version? record the golden run again)"
            )
        if fileop.anywhere:  # a per-run name: count every call of the syscall, no -P
            a = Armed(
                via="strace",
                fileop=fileop,
                roots=root_items,
                cwd=cwd,
                trace=workfile_prefix + ".strace",
                syscalls=(fileop.syscall,),
                inject=(f"{fileop.syscall}:signal=KILL:when={fileop.anywhere}",),
            )
        else:
            a = Armed(
                via="strace",
                fileop=fileop,
                roots=root_items,
                cwd=cwd,
                trace=workfile_prefix + ".strace",
                syscalls=(fileop.syscall,),
                paths=(*paths, *fileop.rel),
                inject=(f"{fileop.syscall}:signal=KILL:when={fileop.when}",),
            )
    else:
        rec, log = workfile_prefix + ".fileops.jsonl", workfile_prefix + ".landing.jsonl"
        target = json.dumps({"op": fileop.op, "paths": paths, "n": fileop.n})
        a = Armed(
            via="audit",
            fileop=fileop,
            roots=root_items,
            cwd=cwd,
            record=rec,
            log=log,
            env=(
                ("CRASHPOINT_FILEOP_AT", target),
                ("CRASHPOINT_FILEOP_LOG", log),
                ("CRASHPOINT_FILEOP_RECORD", rec),
            ),
        )
    _fresh(*a.files)
    return a


# -- recording ----------------------------------------------------------------------------------


def _audit_lines(path: str) -> list[dict[str, Any]]:
    out = []
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                if not line.strip():
                    continue
                with contextlib.suppress(ValueError):
                    d = json.loads(line)
                    if (
                        isinstance(d, dict)
                        and isinstance(d.get("op"), str)
                        and isinstance(d.get("path"), str)
                    ):
                        out.append(d)
    except OSError:
        return []
    return out


def _decorated_paths(call: Syscall) -> list[str]:
    out = []
    for a in call.args:
        _, path, _ = _strace.decoration(a)
        if path.startswith("/"):
            out.append(path)
    return out


def _per_run(path: str, pid: int) -> str:
    """``path`` with the process's own id, where its file name holds it as a number of its
    own (``.meta.json.2781.tmp``), replaced by ``*`` (and the random part of the reference
    library's ``.meta.json.2781.k3x9_a0q.tmp`` dropped): a name that changes in each run."""
    if pid < 100 or not path:
        return path
    head, _, name = path.rpartition("/")
    if str(pid) not in name:  # most names: no pattern to build (it costs a compile per run)
        return path
    # the reference library's temp names: .NAME.<pid>.<mkstemp's random>.tmp
    name = re.sub(rf"^(\..+\.{pid})\.[a-z0-9_]{{8}}\.tmp$", r"\1.tmp", name)
    new = re.sub(rf"(?<!\d){pid}(?!\d)", "*", name)
    return f"{head}/{new}" if head else new


def _key(call: Syscall, roots: _Roots) -> tuple[str, str] | None:
    """(placeholder path, placeholder path2) of a call on the trial's folders, else None;
    a file named after the calling process has ``*`` for its id (:func:`_per_run`)."""
    p, p2 = roots.placeholder(call.path), roots.placeholder(call.path2)
    p = _per_run(p, call.pid) if p is not None else None
    p2 = _per_run(p2, call.pid) if p2 is not None else None
    if p is not None:
        return p, p2 or ""
    if p2 is not None:  # e.g. a file renamed from elsewhere into the folders
        return p2, ""
    return None


def _strace_ops(
    trace: _strace.Trace, roots: _Roots, exclude: frozenset[str], killed_too: bool = False
) -> list[tuple[FileOp, Syscall]]:
    seen: Counter[tuple[str, str]] = Counter()
    per_thread: Counter[tuple[int, str, str]] = Counter()
    threads: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    rel: defaultdict[str, set[str]] = defaultdict(set)
    found: list[tuple[str, str, str, int, int, Syscall]] = []
    every: Counter[tuple[int, str]] = Counter()  # (thread, syscall): all its calls so far
    anywhere: dict[int, int] = {}  # index in found -> that count, for a per-run name
    for c in trace.calls:
        every[(c.pid, c.name)] += 1
        touched = set()
        for p, given in ((c.path, c.path_arg), (c.path2, c.path2_arg)):
            ph = roots.placeholder(p)
            if ph is not None:
                touched.add(ph)
                if given and not given.startswith("/"):
                    rel[ph].add(given)
        touched.update(ph for ph in map(roots.placeholder, _decorated_paths(c)) if ph)
        for ph in touched:  # what strace's -P <file> and inject's when=<k> count
            per_thread[(c.pid, c.name, ph)] += 1
            threads[(c.name, ph)].add(c.pid)
        op = op_of(c)
        ok = c.result is not None and c.result >= 0 and not c.errno
        if not op or not (ok or (killed_too and c.result is None)):
            continue
        key = _key(c, roots)
        if key is None or c.path in exclude or c.path2 in exclude:
            continue
        seen[(op, key[0])] += 1
        if "*" in key[0].rpartition("/")[2]:
            anywhere[len(found)] = every[(c.pid, c.name)]
        found.append(
            (
                op,
                key[0],
                key[1],
                seen[(op, key[0])],
                per_thread[(c.pid, c.name, roots.placeholder(c.path) or key[0])],
                c,
            )
        )
    return [
        (
            FileOp(
                op=op,
                path=p,
                n=n,
                path2=p2,
                via="strace",
                syscall=c.name,
                when=max(1, when),
                rel=tuple(sorted(rel.get(p, ()))),
                shared=len(threads[(c.name, p)]) > 1,
                anywhere=anywhere.get(k, 0),
            ),
            c,
        )
        for k, (op, p, p2, n, when, c) in enumerate(found)
    ]


def _audit_ops(
    lines: Iterable[dict[str, Any]], roots: _Roots, exclude: frozenset[str]
) -> list[FileOp]:
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for d in lines:
        path, path2 = str(d["path"]), str(d.get("path2") or "")
        p, p2 = roots.placeholder(path), roots.placeholder(path2) or ""
        if p is None and p2:  # e.g. a file renamed from elsewhere into the folders
            p, p2 = p2, ""
        if p is None or path in exclude:
            continue
        seen[(d["op"], p)] += 1
        out.append(FileOp(op=d["op"], path=p, n=seen[(d["op"], p)], path2=p2, via="audit"))
    return out


def record_golden(
    source: Armed | str,
    roots: Mapping[str, str],
    *,
    exclude: Iterable[str] = (),
    trace: _strace.Trace | None = None,
) -> list[FileOp]:
    """The mutating file operations under ``roots`` of a recorded run, in order.

    ``source``: the :func:`recorder` the run was started with, or the path of its strace
    output or audit log (told apart by content). ``roots``: that run's folders by
    placeholder name (``{"state_dir": ..., "workdir": ...}``). Everything else is left out:
    the interpreter's start-up, pipes, sockets, /proc, files outside the folders, the
    harness's own work files, failed calls, and ``exclude``. ``trace``: the strace output
    already read (:func:`read_golden`), so that it is not parsed again."""
    if isinstance(source, Armed) and source.via == "audit":
        path = source.record or source.trace
        own = frozenset(os.path.abspath(f) for f in source.files)
        skip = own | frozenset(os.path.abspath(e) for e in exclude)
        return _audit_ops(_audit_lines(path), _Roots(roots), skip)
    if not isinstance(source, Armed) and trace is None and _looks_like_audit(source):
        skip = frozenset({os.path.abspath(source)}) | frozenset(os.path.abspath(e) for e in exclude)
        return _audit_ops(_audit_lines(source), _Roots(roots), skip)
    return [op for op, _ in _golden_ops(source, roots, exclude, trace) or ()]


def read_golden(source: Armed | str) -> _strace.Trace | None:
    """The recorded run's strace output, parsed once for :func:`record_golden`,
    :func:`golden_times` and :func:`golden_seqs`; None for an audit log."""
    if isinstance(source, Armed):
        if source.via == "audit":
            return None
        path, cwd = source.record or source.trace, source.cwd
    else:
        path, cwd = source, ""
    return None if _looks_like_audit(path) else _strace.read(path, cwd=cwd)


def _golden_ops(
    source: Armed | str,
    roots: Mapping[str, str],
    exclude: Iterable[str],
    trace: _strace.Trace | None = None,
) -> list[tuple[FileOp, Syscall]] | None:
    """Each operation :func:`record_golden` returns with its trace call; None for an audit
    log (no trace)."""
    if isinstance(source, Armed):
        own = frozenset(os.path.abspath(f) for f in source.files)
    else:
        own = frozenset({os.path.abspath(source)})
    if trace is None:
        trace = read_golden(source)
        if trace is None:
            return None
    skip = own | frozenset(os.path.abspath(e) for e in exclude)
    return _strace_ops(trace, _Roots(roots), skip)


def golden_times(
    source: Armed | str,
    roots: Mapping[str, str],
    *,
    exclude: Iterable[str] = (),
    trace: _strace.Trace | None = None,
) -> list[float]:
    """When each operation :func:`record_golden` returns started (seconds since the epoch), in
    the same order: from a trace written with ``wrap(timestamps=True)`` (strace ``-ttt``);
    [] for an audit log or a trace without times (what places the operations among the
    run's events in reports)."""
    times = [c.time for _, c in _golden_ops(source, roots, exclude, trace) or ()]
    return times if times and all(times) else []


def golden_seqs(
    source: Armed | str,
    roots: Mapping[str, str],
    *,
    exclude: Iterable[str] = (),
    trace: _strace.Trace | None = None,
) -> list[int]:
    """The trace's call number (:attr:`Syscall.seq`) of each operation :func:`record_golden`
    returns, in the same order; [] for an audit log (what ties each operation to the power-loss
    log's operations, :attr:`LogOp.line`, for a kill replayed from the recorded state)."""
    return [c.seq for _, c in _golden_ops(source, roots, exclude, trace) or ()]


def golden_record(
    source: Armed | str,
    roots: Mapping[str, str],
    *,
    exclude: Iterable[str] = (),
    trace: _strace.Trace | None = None,
) -> tuple[list[FileOp], list[float], list[int]]:
    """:func:`record_golden`, :func:`golden_times` and :func:`golden_seqs` of one recorded run
    at once, from one pass over its trace (each of them alone makes that pass)."""
    audit = (isinstance(source, Armed) and source.via == "audit") or (
        not isinstance(source, Armed) and trace is None and _looks_like_audit(source)
    )
    pairs = None if audit else _golden_ops(source, roots, exclude, trace)
    if pairs is None:
        return record_golden(source, roots, exclude=exclude, trace=trace), [], []
    times = [c.time for _, c in pairs]
    return [op for op, _ in pairs], times if times and all(times) else [], [c.seq for _, c in pairs]


def explain_empty(recorded: Armed, roots: Mapping[str, str]) -> str:
    """Why :func:`record_golden` found no operation in a run recorded with ``recorded``, and
    what to do about it (for the message of a sweep with nothing to sweep)."""
    where = " or ".join("{" + k + "}" for k in sorted(roots)) or "the trial's folders"
    if recorded.via == "audit":
        if not os.path.exists(recorded.record):
            return (
                "the injected sitecustomize never ran in the golden run: the audit hook "
                "only sees a Python agent started with {python} (not -S or -I); for any "
                f"other agent install strace ({_strace.available()[1] or 'it is here'})"
            )
        return (
            f"the golden run opened, renamed or removed no file under {where} from Python "
            "code; the audit hook cannot see writes, fsyncs, nor files written from C "
            "(SQLite): install strace to see those "
            f"({_strace.available()[1] or 'it is here'}), or pass the agent its state "
            "folder as {state_dir}"
        )
    if not os.path.exists(recorded.trace):
        return (
            f"no strace output at {recorded.trace}: the golden run did not start under "
            "strace (see its stderr)"
        )
    return (
        f"the golden run changed no file under {where} (strace saw every write, rename, "
        "remove and sync): the agent keeps its state elsewhere; pass it {state_dir} "
        "or {workdir}"
    )


def _looks_like_audit(path: str) -> bool:
    try:
        with open(path, encoding="latin-1") as f:
            for line in f:
                if line.strip():
                    return line.lstrip().startswith("{")
    except OSError:
        pass
    return False


# -- did it land --------------------------------------------------------------------------------


class Landing(NamedTuple):
    """Whether an armed kill hit its file operation. ``where``: the operation it hit (a
    label), "" if none; ``why_not``: "" when it fired, else what happened and what to do."""

    fired: bool
    where: str
    why_not: str


def landed(armed: Armed, fileop: FileOp | None = None, *, attempt: int = 0) -> Landing:
    """Did the attempt started with ``armed`` die exactly at ``fileop`` (default: the one it
    was armed at)? ``attempt`` only words the explanation ("in attempt 2")."""
    op = fileop or armed.fileop
    if op is None:
        raise InvalidArgument("landed() needs the file operation: this Armed only records")
    during = f" in attempt {attempt}" if attempt else " in this attempt"
    roots = _Roots(dict(armed.roots))
    if armed.via == "audit":
        return _landed_audit(armed, op, roots, during)
    if not os.path.exists(armed.trace):
        return Landing(
            False,
            "",
            f"no strace output at {armed.trace}: the agent did not "
            f"start under strace{during} (see its stderr)",
        )
    trace = _strace.read(armed.trace, cwd=armed.cwd)
    pairs = _strace_ops(trace, roots, frozenset(), killed_too=True)
    done = sum(1 for f, c in pairs if (f.op, f.path) == (op.op, op.path) and c.result is not None)
    for f, c in pairs:
        if c.result is None and (trace.killed(c.pid) or c.pid not in trace.exits):
            if f == op:
                return Landing(True, f.label(), "")
            return Landing(False, f.label(), _elsewhere(op, f))
    for c in trace.calls:  # killed in a call of the same syscall that is no operation
        if c.result is None and c.name == op.syscall and trace.killed(c.pid):
            where = f"{c.name} {roots.placeholder(c.path) or c.path or '?'}"
            return Landing(
                False,
                where,
                f"the kill landed at {where} (not a file operation "
                f"of the golden run), not at {op.label()}: strace counts every "
                f"{op.syscall} on the file, per process and thread",
            )
    if done < op.n:
        return Landing(
            False,
            "",
            f"the agent never did {op.op} {op.path} a {_ordinal(op.n)} "
            f"time{during}: it did it {_times(done)}",
        )
    return Landing(
        False,
        "",
        f"the agent did {op.op} {op.path} {_times(done)}{during}, but "
        f"not as call #{op.when} of {op.syscall} on it in one process "
        "or thread as in the golden run, where strace's kill waited "
        "(the agent spreads it over other threads or processes)",
    )


def _elsewhere(want: FileOp, got: FileOp) -> str:
    why = (
        "other threads or processes of the agent use it too"
        if want.shared
        else "this attempt did it in another order than the golden run"
    )
    return (
        f"the kill landed at {got.label()}, not at {want.label()}: strace counts "
        f"{want.syscall} on the file per process and thread, and {why}"
    )


def _landed_audit(armed: Armed, op: FileOp, roots: _Roots, during: str) -> Landing:
    targets = set(roots.concrete(op.path))
    for d in _audit_lines(armed.log):
        if d.get("op") == op.op and d.get("path") in targets:
            n = d.get("n")
            if n == op.n:
                return Landing(True, op.label(), "")
            return Landing(
                False,
                f"{op.op} {op.path} #{n}",
                f"the kill landed at {op.op} {op.path} #{n}, not #{op.n}",
            )
    if not os.path.exists(armed.record):
        return Landing(
            False,
            "",
            f"the injected sitecustomize did not run{during}: the agent "
            "is not a Python process that keeps PYTHONPATH (python -S "
            "or -I skip it); file-operation kills in other agents need "
            f"strace ({_strace.available()[1] or 'available here'})",
        )
    done = sum(
        1
        for f in _audit_ops(_audit_lines(armed.record), roots, frozenset())
        if (f.op, f.path) == (op.op, op.path)
    )
    if done < op.n:
        return Landing(
            False,
            "",
            f"the agent never did {op.op} {op.path} a {_ordinal(op.n)} "
            f"time{during}: it did it {_times(done)}",
        )
    return Landing(
        False,
        "",
        f"the agent did {op.op} {op.path} {_times(done)}{during} but the "
        "kill did not fire: it did them in different processes (each "
        "Python process counts on its own)",
    )
