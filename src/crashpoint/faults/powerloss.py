"""Power-loss simulation: what would be left on disk if the power were cut *now*?

A process crash (kill -9) keeps every byte the process handed to the kernel; a power cut keeps
only what was made durable. :class:`PowerLossRecorder` is an :class:`~crashpoint.checkpoint.
_fsio.FsOps` that performs the real I/O and, beside it, keeps a model of the durable state:

- per file (identified by inode, not by name), the bytes it held at its last ``fsync`` /
  ``fdatasync``; a file never synced through the recorder is empty after a power cut;
- per folder, the entries (name -> file or folder) it held at its last ``fsync`` of the folder.
  New names, renames and removals that were not followed by an fsync of the folder are undone.

Folders and files that exist under ``root`` when recording starts are assumed durable as they
are. The model is the pessimistic one the POSIX contract allows (and ext4 / XFS show after a
power cut): no write reaches the disk unless something synced it.

After every operation the recorder can capture a :class:`DiskImage` (``keep_images=True``) and
call ``on_op``, so a test can cut the power at *every* point of a run::

    rec = PowerLossRecorder(tmp_path / "disk")
    store = Store(tmp_path / "disk" / "store", fs=rec)
    ...                                    # run the workload
    for image in rec.images:               # one per instant: start, then after each op
        image.materialize(tmp_path / f"cut-{image.index}")

Only what goes through the ``FsOps`` methods is observed. Files the code under test creates with
plain ``os.open`` are treated as never synced, which is the safe direction for a durability test.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from crashpoint._fsio import DIR_MODE, FILE_MODE, FsOps
from crashpoint.faults._files import write_all

__all__ = ["DiskImage", "Op", "PowerLossRecorder"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

#: An empty, shared folder listing (listings are never mutated, only replaced).
_NO_ENTRIES: Mapping[str, int] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Op:
    """One file operation the recorder observed: its position in the run, its name, its path."""

    index: int
    name: str
    path: str

    def __str__(self) -> str:
        return f"#{self.index} {self.name} {self.path}"


@dataclass(frozen=True, slots=True)
class DiskImage:
    """The durable state at one instant: what a power cut at that instant leaves.

    ``index`` is the number of operations performed before the cut (0: before the first);
    ``op`` is the last operation performed (None for the start).
    """

    index: int
    op: Op | None
    root: int
    dirs: Mapping[int, Mapping[str, int]]
    files: Mapping[int, bytes]

    def listing(self) -> dict[str, bytes | None]:
        """Every durable path under the root, relative, mapped to its bytes (None: a folder)."""
        out: dict[str, bytes | None] = {}

        def walk(node: int, prefix: str) -> None:
            for name, child in sorted(self.dirs.get(node, _NO_ENTRIES).items()):
                rel = f"{prefix}{name}"
                if child in self.dirs:
                    out[rel] = None
                    walk(child, rel + "/")
                else:
                    out[rel] = self.files.get(child, b"")

        walk(self.root, "")
        return out

    def materialize(self, dest: str | os.PathLike[str]) -> str:
        """Build the root folder as the power cut leaves it at ``dest`` (created; must not
        exist or be empty). Files get mode 0600, folders 0700. Return ``dest`` as a str."""
        dest = os.fspath(dest)
        if os.path.lexists(dest):
            if not os.path.isdir(dest) or os.listdir(dest):
                raise FileExistsError(f"materialize needs a new or empty folder, not {dest}")
        else:
            os.makedirs(dest, DIR_MODE)
        for rel, content in self.listing().items():
            path = os.path.join(dest, rel)
            if content is None:
                os.mkdir(path, DIR_MODE)
                continue
            fd = os.open(
                path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE
            )
            try:
                write_all(fd, content)
            finally:
                os.close(fd)
        return dest


class PowerLossRecorder(FsOps):
    """Real file operations plus a model of which bytes and names would survive a power cut.

    ``root``: the folder whose durable state :meth:`image` describes (it must exist; it and
    everything under it is assumed durable when recording starts). ``keep_images``: append a
    :class:`DiskImage` to :attr:`images` at the start and after every operation. ``on_op``:
    called after every operation (after its image is captured), e.g. to note what the code
    under test had acknowledged at that instant, or to raise and stop the run there.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        keep_images: bool = True,
        on_op: Callable[[Op], None] | None = None,
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise NotADirectoryError(f"the recorder's root must be an existing folder: {root}")
        self.keep_images = keep_images
        self.on_op = on_op
        self.ops: list[Op] = []
        self.images: list[DiskImage] = []
        self._next_id = 0
        self._ids: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> newest node id
        self._keys: dict[int, tuple[int, int]] = {}  # node id -> (st_dev, st_ino)
        self._dirs: dict[int, Mapping[str, int]] = {}  # folder node -> durable entries
        self._files: dict[int, bytes] = {}  # file node -> durable bytes
        self._fds: dict[int, tuple[int, str]] = {}  # open fd -> (node, path)
        self._root_id = self._adopt_tree(self.root)
        if keep_images:
            self.images.append(self.image())

    # -- the model ------------------------------------------------------------------------------

    def _new_node(self, key: tuple[int, int], *, folder: bool) -> int:
        node = self._next_id
        self._next_id += 1
        self._ids[key] = node
        self._keys[node] = key
        if folder:
            self._dirs[node] = _NO_ENTRIES
        else:
            self._files[node] = b""
        return node

    def _adopt_tree(self, path: str) -> int:
        """Register ``path`` and everything under it as durable as it is now."""
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            node = self._new_node((st.st_dev, st.st_ino), folder=False)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    self._files[node] = f.read()
            return node
        node = self._new_node((st.st_dev, st.st_ino), folder=True)
        self._dirs[node] = MappingProxyType(
            {name: self._adopt_tree(os.path.join(path, name)) for name in os.listdir(path)}
        )
        return node

    def _node_of(self, st: os.stat_result) -> int:
        """The node for a file seen now; one never seen is new and has nothing durable."""
        node = self._ids.get((st.st_dev, st.st_ino))
        folder = stat.S_ISDIR(st.st_mode)
        if node is None or (node in self._dirs) != folder:
            node = self._new_node((st.st_dev, st.st_ino), folder=folder)
        return node

    def _track(self, fd: int, path: str, *, created: bool) -> None:
        st = os.fstat(fd)
        if created:  # a new inode, even if its number was used by a file now gone
            node = self._new_node((st.st_dev, st.st_ino), folder=False)
        else:
            node = self._node_of(st)
        self._fds[fd] = (node, path)

    def _sync_file(self, fd: int) -> None:
        st = os.fstat(fd)
        entry = self._fds.get(fd)
        if entry is not None and self._keys[entry[0]] == (st.st_dev, st.st_ino):
            node = entry[0]
        else:  # an fd the recorder did not see opened (or a reused fd number)
            node = self._node_of(st)
        with open(f"/proc/self/fd/{fd}", "rb") as f:  # the fd may be write-only
            self._files[node] = f.read()

    def _sync_dir(self, path: str) -> None:
        st = os.lstat(path)
        node = self._node_of(st)
        entries: dict[str, int] = {}
        for name in os.listdir(path):
            try:
                entries[name] = self._node_of(os.lstat(os.path.join(path, name)))
            except FileNotFoundError:
                continue
        self._dirs[node] = MappingProxyType(entries)

    def _done(self, name: str, path: str) -> None:
        op = Op(len(self.ops), name, path)
        self.ops.append(op)
        if self.keep_images:
            self.images.append(self.image(op))
        if self.on_op is not None:
            self.on_op(op)

    def _path_of(self, fd: int) -> str:
        entry = self._fds.get(fd)
        return entry[1] if entry else f"fd {fd}"

    def image(self, op: Op | None = None) -> DiskImage:
        """The durable state now: what a power cut at this instant leaves."""
        if op is None and self.ops:
            op = self.ops[-1]
        return DiskImage(len(self.ops), op, self._root_id, dict(self._dirs), dict(self._files))

    def materialize(self, dest: str | os.PathLike[str]) -> str:
        """Build the root folder at ``dest`` as a power cut now would leave it."""
        return self.image().materialize(dest)

    # -- FsOps, observed ------------------------------------------------------------------------

    def open_append(self, path: str) -> int:
        created = not os.path.lexists(path)
        fd = super().open_append(path)
        self._track(fd, path, created=created)
        self._done("open_append", path)
        return fd

    def open_rw(self, path: str) -> int:
        created = not os.path.lexists(path)
        fd = super().open_rw(path)
        self._track(fd, path, created=created)
        self._done("open_rw", path)
        return fd

    def _note_open(self, path: str, fd: int) -> None:
        # write_atomic opens its temp file with O_TRUNC: whatever it held is gone, a new file.
        self._track(fd, path, created=True)
        self._done("open_temp", path)

    def write(self, fd: int, data: bytes) -> None:
        super().write(fd, data)
        self._done("write", self._path_of(fd))

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        super().pwrite(fd, data, offset)
        self._done("pwrite", self._path_of(fd))

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        self._done("truncate", self._path_of(fd))

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        self._sync_file(fd)
        self._done("fdatasync", self._path_of(fd))

    def fsync(self, fd: int) -> None:
        super().fsync(fd)
        self._sync_file(fd)
        self._done("fsync", self._path_of(fd))

    def close(self, fd: int) -> None:
        path = self._path_of(fd)
        super().close(fd)
        self._fds.pop(fd, None)
        self._done("close", path)

    def fsync_dir(self, path: str) -> None:
        super().fsync_dir(path)
        self._sync_dir(path)
        self._done("fsync_dir", path)

    def replace(self, src: str, dst: str) -> None:
        super().replace(src, dst)
        self._done("replace", f"{src} -> {dst}")

    def unlink(self, path: str) -> None:
        super().unlink(path)
        self._done("unlink", path)

    def mkdir(self, path: str) -> None:
        super().mkdir(path)
        st = os.lstat(path)
        self._new_node((st.st_dev, st.st_ino), folder=True)
        self._done("mkdir", path)
