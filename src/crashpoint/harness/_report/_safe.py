"""Writing reports and evidence safely: folders nobody else controls, no symlink followed,
every file written whole (temp + fsync + rename), 0600 files in 0700 folders, no secret kept.

Report folders are often shared (``/tmp``, a CI workspace) and the harness often runs as root,
so a report path is untrusted until checked:

- :func:`secure_dir` creates a folder and its missing parents (0700) without following a
  symlink, and refuses a folder that another user owns or can write in (see its rules).
- :func:`write_file` writes a file as a fresh temp file (``O_CREAT|O_EXCL|O_NOFOLLOW``, 0600)
  in the same folder, fsyncs it and renames it over the name: a planted link is refused, never
  followed, and a reader never sees half a file.
- :func:`redact_bytes`, :class:`Scrubber` and :func:`redact_json` replace secret values
  (``agent.env`` values and the canary) with ``<redacted:NAME>``; :func:`scrub_tree` does so
  in every file of an evidence folder, in place.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets as _secrets
import shutil
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from crashpoint.checkpoint import Redactor
from crashpoint.errors import InvalidArgument, UnsafeReportFolder

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "MIN_SCRUB_LEN",
    "EvidenceBudget",
    "Scrubber",
    "UnsafeReportFolder",
    "atomic_writer",
    "check_report_folder",
    "copy_tree_bounded",
    "human_size",
    "is_plain_path",
    "marker",
    "redact_bytes",
    "redact_env",
    "redact_json",
    "redact_text",
    "scrub_file",
    "scrub_tree",
    "secure_dir",
    "tree_size",
    "unredact_json",
    "write_file",
]

FILE_MODE = 0o600
DIR_MODE = 0o700
#: Values shorter than this are redacted where they are known to be values (runner.json's
#: ``agent.env``) but not searched for in free text: ``1``, ``true`` or ``debug`` would match
#: ordinary words and numbers everywhere. Never pass a short secret through ``agent.env``.
MIN_SCRUB_LEN = 6
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FD = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd
_CHUNK = 1 << 20


def _who(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _refuse(path: str, why: str, fix: str) -> UnsafeReportFolder:
    return UnsafeReportFolder(
        f"refusing to write crashpoint reports in {path}: {why}. Another user could have "
        f"planted links there to make the harness overwrite other files. {fix}"
    )


def _trusted_owner(uid: int) -> bool:
    return uid in (os.geteuid(), 0)


def _check_own(path: str, st: os.stat_result) -> None:
    """The rules for a folder crashpoint writes in (the report folder and everything below)."""
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(
            path,
            f"it is a symbolic link (to {os.readlink(path)!r})",
            "Remove the link, or give the real folder's path.",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "it exists and is not a folder", "Remove it or choose another path.")
    if not _trusted_owner(st.st_uid):
        raise _refuse(
            path,
            f"it is owned by {_who(st.st_uid)}, not by you ({_who(os.geteuid())}) or root",
            f"Remove it (rm -r {path}) or choose a folder of your own.",
        )
    if st.st_mode & 0o022:
        raise _refuse(
            path,
            f"other users can write in it (mode {stat.S_IMODE(st.st_mode):04o})",
            f"Run `chmod go-w {path}` or choose another folder.",
        )


def _walk_ancestors(path: str) -> tuple[str, list[str]]:
    """Resolve ``path``'s existing ancestors, checking each; return (the real existing prefix,
    the missing components). The rules for folders above the report folder, which the user
    chose: a symlink counts only if you or root own it (a planted one is refused); a folder
    anyone may write in must have the sticky bit (``/tmp``), and below such a folder every
    folder must be yours or root's (another user may have created it first)."""
    parts = [p for p in path.split(os.sep) if p]
    real = os.sep
    shared = False
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            real = os.path.dirname(real)
            continue
        cur = os.path.join(real, name)
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return real, [name, *parts]
        if stat.S_ISLNK(st.st_mode):
            if not _trusted_owner(st.st_uid):
                raise _refuse(
                    cur,
                    f"it is a symbolic link owned by {_who(st.st_uid)}",
                    "Remove the link, or give the real folder's path.",
                )
            hops += 1
            if hops > 40:
                raise _refuse(cur, "too many levels of symbolic links", "Give the real path.")
            target = os.readlink(cur)
            if os.path.isabs(target):
                real = os.sep
            parts = [p for p in target.split(os.sep) if p] + parts
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise _refuse(cur, "it exists and is not a folder", "Choose another path.")
        if shared and not _trusted_owner(st.st_uid):
            raise _refuse(
                cur,
                f"it is owned by {_who(st.st_uid)} inside a folder anyone can write in",
                f"Remove it (rm -r {cur}) or choose a folder of your own.",
            )
        if st.st_mode & 0o002:
            if not st.st_mode & stat.S_ISVTX:
                raise _refuse(
                    cur,
                    f"anyone can write in it and it has no sticky bit (mode "
                    f"{stat.S_IMODE(st.st_mode):04o})",
                    "Choose a report folder under a folder only you can write in.",
                )
            shared = True
        real = cur
    return real, []


def secure_dir(path: str, *, root: str | None = None) -> str:
    """Make sure ``path`` is a folder safe to write reports in; return its absolute path.

    ``root`` (default: ``path`` itself) is the report folder: it and every folder between it
    and ``path`` must be real folders (no symlink), owned by you or root, and not writable by
    group or others; missing ones are created 0700. The folders above ``root`` follow the
    rules of :func:`_walk_ancestors`. Raises :class:`UnsafeReportFolder` with the folder, the
    reason and the fix.
    """
    path = os.path.abspath(path)
    root = path if root is None else os.path.abspath(root)
    if os.path.commonpath([root, path]) != root:
        raise InvalidArgument(f"{path} is not inside {root}")
    base, missing = _walk_ancestors(os.path.dirname(root))
    rel = os.path.relpath(path, os.path.dirname(root))
    cur = base
    for name in [*missing, *rel.split(os.sep)]:
        cur = os.path.join(cur, name)
        try:
            os.mkdir(cur, DIR_MODE)
        except FileExistsError:
            pass
        _check_own(cur, os.lstat(cur))
    return cur


def check_report_folder(path: str) -> None:
    """Refuse an existing report folder another user owns or can write in (nothing created):
    for an early, clear error before a run starts."""
    path = os.path.abspath(path)
    base, missing = _walk_ancestors(os.path.dirname(path))
    if missing:
        return
    cur = os.path.join(base, os.path.basename(path))
    try:
        st = os.lstat(cur)
    except FileNotFoundError:
        return
    _check_own(cur, st)


# -- writing files -----------------------------------------------------------------------------


def _open_dir(folder: str) -> int:
    fd = os.open(folder, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    try:
        _check_own(folder, os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def atomic_writer(path: str, *, durable: bool = True) -> Iterator[IO[bytes]]:
    """Write ``path`` whole or not at all: yields a binary file (a fresh 0600 temp file in the
    same folder, opened without following links); on success it is fsynced (unless not
    ``durable``: a file about to be deleted) and renamed over ``path``. The folder must pass
    :func:`secure_dir`'s rules; an existing ``path`` that is a symbolic link or not a regular
    file is refused."""
    folder, name = os.path.split(os.path.abspath(path))
    dfd = _open_dir(folder)
    tmp = f".{name}.{_secrets.token_hex(6)}.tmp"
    kw: dict[str, Any] = {"dir_fd": dfd} if _DIR_FD else {}
    tmp_path = tmp if _DIR_FD else os.path.join(folder, tmp)
    dst_path = name if _DIR_FD else os.path.join(folder, name)
    try:
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(dst_path, **kw)
            if not stat.S_ISREG(st.st_mode):
                what = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise UnsafeReportFolder(
                    f"refusing to write {os.path.join(folder, name)}: it is {what}, and "
                    "crashpoint never writes through one (another user may have planted it). "
                    "Remove it and run again."
                )
        fd = os.open(
            tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE, **kw
        )
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fchmod(f.fileno(), FILE_MODE)
                if durable:
                    os.fsync(f.fileno())
            if _DIR_FD:
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            else:
                os.replace(tmp_path, dst_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path, **kw)
            raise
        if durable:
            with contextlib.suppress(OSError):
                os.fsync(dfd)
    finally:
        os.close(dfd)


def write_file(path: str, data: bytes | str, *, durable: bool = True) -> str:
    """Write ``data`` to ``path`` with :func:`atomic_writer`; return ``path``."""
    with atomic_writer(path, durable=durable) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return path


# -- secrets -----------------------------------------------------------------------------------


def marker(name: str) -> str:
    """What a secret value is replaced with."""
    return f"<redacted:{name}>"


def is_plain_path(name: str, value: str) -> bool:
    """An ``agent.env`` value that is an absolute path to something that exists (a folder such
    as ``{scenario_dir}``, a config file), or a list of them joined by ``os.pathsep`` (a
    ``PYTHONPATH``), and whose name does not say secret: kept in evidence, where redacting it
    would hide where the agent ran and no secret is a path on disk."""
    parts = value.split(os.pathsep)
    return all(
        os.path.isabs(p) and "\0" not in p and os.path.exists(p) for p in parts
    ) and not Redactor().is_secret_name(name)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """``agent.env`` as evidence may hold it: a value is replaced by its marker if it is long
    enough to be searched for (:data:`MIN_SCRUB_LEN`) or its name says secret (``API_KEY``,
    ``DB_PASSWORD``, ``token``: the checkpoint library's rule). Short values of other names
    (``1``, ``0.3``, ``debug``) are kept, so replay needs no help for them."""
    r = Redactor()
    return {
        k: marker(k)
        if (len(v) >= MIN_SCRUB_LEN and not is_plain_path(k, v)) or r.is_secret_name(k)
        else v
        for k, v in env.items()
    }


def _scrubbable(secrets: Mapping[str, str]) -> dict[str, str]:
    """value -> name, for the values long enough to search for (longest first)."""
    out: dict[str, str] = {}
    for name, value in sorted(secrets.items(), key=lambda kv: -len(kv[1])):
        if len(value) >= MIN_SCRUB_LEN and value not in out:
            out[value] = name
    return out


def redact_text(text: str, secrets: Mapping[str, str]) -> str:
    """``text`` with every (long enough) secret value replaced by its marker."""
    return _redact(text, _scrubbable(secrets))


def _redact(text: str, table: Mapping[str, str]) -> str:
    for value, name in table.items():
        if value in text:
            text = text.replace(value, marker(name))
    return text


def redact_json(obj: Any, secrets: Mapping[str, str]) -> Any:
    """A copy of a JSON-able structure with secret values replaced inside every string (keys
    too). Numbers stay numbers, so the result is still valid JSON of the same shape."""
    table = _scrubbable(secrets)  # once, not at every node
    return _redact_json(obj, table) if table else obj


def _redact_json(obj: Any, table: Mapping[str, str]) -> Any:
    if isinstance(obj, str):
        return _redact(obj, table)
    if isinstance(obj, Mapping):
        return {_redact(str(k), table): _redact_json(v, table) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_redact_json(v, table) for v in obj]
    return obj


def unredact_json(obj: Any, values: Mapping[str, str]) -> Any:
    """The inverse for replay: each ``<redacted:NAME>`` with a known value gets it back."""
    if isinstance(obj, str):
        for name, value in values.items():
            obj = obj.replace(marker(name), value)
        return obj
    if isinstance(obj, Mapping):
        return {unredact_json(str(k), values): unredact_json(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unredact_json(v, values) for v in obj]
    return obj


class Scrubber:
    """Streaming :func:`redact_bytes`: ``feed`` chunks, then ``flush``; a secret split across
    two chunks is still found (the last ``len(longest secret) - 1`` bytes are held back)."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        table = {v.encode("utf-8"): marker(n).encode() for v, n in _scrubbable(secrets).items()}
        self._repl = table
        self._re = re.compile(b"|".join(re.escape(v) for v in table)) if table else None
        self._keep = max((len(v) for v in table), default=1) - 1
        self._buf = b""
        self.hits = 0

    def feed(self, data: bytes) -> bytes:
        if self._re is None:
            return data
        buf = self._buf + data
        limit = len(buf) - self._keep  # a secret starting before here lies wholly in buf
        if limit <= 0:
            self._buf = buf
            return b""
        out, pos = [], 0
        for m in self._re.finditer(buf):
            if m.start() >= limit:
                break
            out += [buf[pos : m.start()], self._repl[m.group()]]
            pos = m.end()
            self.hits += 1
        cut = max(pos, limit)
        out.append(buf[pos:cut])
        self._buf = buf[cut:]
        return b"".join(out)

    def flush(self) -> bytes:
        buf, self._buf = self._buf, b""
        if self._re is None or not buf:
            return buf
        n = [0]

        def sub(m: re.Match[bytes]) -> bytes:
            n[0] += 1
            return self._repl[m.group()]

        out = self._re.sub(sub, buf)
        self.hits += n[0]
        return out


def redact_bytes(data: bytes, secrets: Mapping[str, str]) -> bytes:
    """``data`` with every (long enough) secret value replaced by ``<redacted:NAME>``.

    ``secrets`` maps a name (the variable) to its value. For a stream, use :class:`Scrubber`.
    """
    if not any(v.encode("utf-8") in data for v in _scrubbable(secrets)):
        return data  # nothing to replace: no pattern to build (a compile per trial's secrets)
    s = Scrubber(secrets)
    return s.feed(data) + s.flush()


def _contains(path: str, scrubber_re: re.Pattern[bytes], keep: int) -> bool:
    with open(path, "rb") as f:
        tail = b""
        while chunk := f.read(_CHUNK):
            if scrubber_re.search(tail + chunk):
                return True
            tail = (tail + chunk)[-keep:] if keep else b""
    return False


def scrub_file(path: str, secrets: Mapping[str, str]) -> bool:
    """Rewrite the regular file ``path`` (temp + rename) with its secrets redacted, if it holds
    any; True if it did. Never follows a link."""
    s = Scrubber(secrets)
    if s._re is None:
        return False
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or not _contains(path, s._re, s._keep):
        return False
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    with os.fdopen(fd, "rb") as src, atomic_writer(path) as dst:
        while chunk := src.read(_CHUNK):
            dst.write(s.feed(chunk))
        dst.write(s.flush())
    return True


def _private(path: str) -> bool:
    """Make the regular file ``path`` 0600; False (and nothing changed) if it is not a regular
    file. Opened without following a link, and a file with other hard links is left as it is:
    its mode is shared with a name that may lie outside the trial (an agent can plant one)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        if st.st_nlink == 1:
            os.fchmod(fd, FILE_MODE)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def scrub_tree(folder: str, secrets: Mapping[str, str], *, skip: tuple[str, ...] = ()) -> int:
    """Redact secrets in every file under ``folder`` (contents and names), and set folders to
    0700 and files to 0600; links are left as links, never followed. ``skip``: top-level
    names whose content is left as is (files the caller wrote already redacted). Returns how
    many files (or names) were changed."""
    changed = 0
    table = _scrubbable(secrets)
    for dirpath, dirs, files in os.walk(folder, topdown=True):
        with contextlib.suppress(OSError):
            os.chmod(dirpath, DIR_MODE)
        if dirpath == folder and skip:
            for name in files:
                if name in skip:
                    _private(os.path.join(dirpath, name))
            files[:] = [n for n in files if n not in skip]
        for names in (dirs, files):
            for i, name in enumerate(list(names)):
                clean = redact_text(name, secrets) if table else name
                if clean != name:
                    with contextlib.suppress(OSError):
                        os.rename(os.path.join(dirpath, name), os.path.join(dirpath, clean))
                        names[i] = clean
                        changed += 1
        for name in files:
            p = os.path.join(dirpath, name)
            try:
                if not _private(p):
                    continue
                if table and scrub_file(p, secrets):
                    changed += 1
            except OSError:
                continue
    return changed


# -- bounded evidence --------------------------------------------------------------------------


def tree_size(path: str) -> int:
    """Bytes of the regular files under ``path`` (links not followed); 0 if it is gone."""
    total = 0
    with contextlib.suppress(OSError):
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            return st.st_size if stat.S_ISREG(st.st_mode) else 0
    for dirpath, _dirs, files in os.walk(path):
        for n in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, n))
                if stat.S_ISREG(st.st_mode):
                    total += st.st_size
    return total


def human_size(n: int) -> str:
    """``1536`` -> ``1.5 KiB``."""
    if n < 1024:
        return f"{n} B"
    x = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        x /= 1024
        if x < 1024 or unit == "GiB":
            break
    return f"{x:.1f} {unit}"


@dataclass
class EvidenceBudget:
    """How many bytes a trial's evidence may still take; what was left out, and why."""

    limit: int
    why: str = "the evidence limit"
    omitted: dict[str, list[int]] = field(default_factory=dict)  # entry -> [bytes, files]

    def leave_out(self, entry: str, size: int) -> None:
        o = self.omitted.setdefault(entry, [0, 0])
        o[0] += size
        o[1] += 1

    def messages(self) -> list[str]:
        return [
            f"{entry}: {files} file(s), {human_size(size)} left out ({self.why})"
            for entry, (size, files) in sorted(self.omitted.items())
        ]


def copy_tree_bounded(
    src: str, dst: str, allowance: int, budget: EvidenceBudget, entry: str
) -> int:
    """Copy ``src`` to ``dst`` (folders 0700, files 0600, links as links, other special files
    skipped) while the copied bytes stay within ``allowance``; a file that does not fit is
    left out and recorded in ``budget`` under ``entry``. Returns the bytes copied."""
    used = 0
    for dirpath, dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        out = os.path.normpath(os.path.join(dst, rel))
        try:
            os.makedirs(out, DIR_MODE, exist_ok=True)
        except OSError:
            dirs[:] = []
            continue
        for d in list(dirs):  # a link to a folder is copied as a link, not walked
            sp = os.path.join(dirpath, d)
            if os.path.islink(sp):
                dirs.remove(d)
                files.append(d)
        for name in files:
            sp, dp = os.path.join(dirpath, name), os.path.join(out, name)
            try:
                st = os.lstat(sp)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(sp), dp)
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                if used + st.st_size > allowance:
                    budget.leave_out(entry, st.st_size)
                    continue
                _copy_file(sp, dp)
                used += st.st_size
            except OSError:
                continue
    return used


def _copy_file(src: str, dst: str) -> None:
    fd_in = os.open(src, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    try:
        fd_out = os.open(
            dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, FILE_MODE
        )
        try:
            with open(fd_in, "rb", closefd=False) as fi, open(fd_out, "wb", closefd=False) as fo:
                shutil.copyfileobj(fi, fo, _CHUNK)
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
