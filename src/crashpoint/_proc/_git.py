"""Two commits of one repository as two versions of an agent (``upgrade: {to: {rev: ...}}``).

:func:`git_commit` resolves a revision to its commit (at a scenario's load: a bad revision, a
folder that is no repository or a machine without ``git`` is a one-line error);
:func:`export_commit` writes that commit's files into a fresh folder (``git archive``, read
with :mod:`tarfile`'s safe ``data`` filter): nothing is registered in the repository (no
worktree to prune), so removing the folder is the whole clean-up. Standard library only.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tempfile

__all__ = ["GIT_TIMEOUT", "export_commit", "git_commit"]

#: Seconds any one git command may take (a repository on a hung network disk fails, not hangs).
GIT_TIMEOUT = 60.0


def _git(root: str, *args: str, binary: bool = False) -> subprocess.CompletedProcess[bytes]:
    git = shutil.which("git")
    if git is None:
        raise ValueError(
            "git is not installed (needed to check out another commit of the agent's "
            "repository); install git, or name version B by command or python instead"
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    try:
        return subprocess.run(
            [git, "-C", root, *args],
            capture_output=True,
            timeout=GIT_TIMEOUT,
            check=False,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise ValueError(
            f"git {args[0]} in {root} took more than {GIT_TIMEOUT:g}s (is the repository "
            "on a disk that answers?)"
        ) from None
    except OSError as exc:
        raise ValueError(f"git could not be run: {exc}") from None


def _line(out: bytes) -> str:
    lines = out.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else ""


def git_commit(repo: str, rev: str) -> tuple[str, str]:
    """(the repository's top folder, the full commit id) of ``rev`` in the repository that
    holds the folder ``repo``. ValueError saying what is wrong and how to fix it: no git, no
    such folder, not in a repository, a revision that names no commit."""
    if rev.startswith("-"):
        raise ValueError(f"revision {rev!r} starts with '-': give a commit, branch or tag")
    if not os.path.isdir(repo):
        raise ValueError(f"the repository folder {repo} does not exist")
    top = _git(repo, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise ValueError(
            f"{repo} is not inside a git repository ({_line(top.stderr)}); give upgrade.to.repo "
            "the folder of the agent's repository"
        )
    root = os.path.normpath(top.stdout.decode("utf-8", "surrogateescape").strip())
    # (a revision starting with "-" was refused above: no --end-of-options, which git < 2.24 lacks)
    sha = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if sha.returncode != 0:
        raise ValueError(
            f"revision {rev!r} is no commit of the repository {root} (see `git -C {root} log "
            "--oneline`; a branch, tag or commit id that exists there)"
        )
    return root, sha.stdout.decode("ascii", "replace").strip()


def _escapes(dest: str, name: str, target: str) -> bool:
    """True if the symbolic link ``name`` (inside ``dest``) pointing at ``target`` leads out."""
    root = os.path.realpath(dest)
    where = os.path.normpath(os.path.join(root, os.path.dirname(name), target))
    return os.path.isabs(target) or os.path.commonpath([root, where]) != root


def export_commit(root: str, sha: str, parent: str) -> str:
    """The files of commit ``sha`` of the repository ``root``, written into a new folder under
    ``parent`` (``rev-<sha12>-XXXX``); the caller removes it. ValueError if git fails (the
    partial folder removed)."""
    os.makedirs(parent, exist_ok=True)
    dest = tempfile.mkdtemp(prefix=f"rev-{sha[:12]}-", dir=parent)
    try:
        out = _git(root, "archive", "--format=tar", sha)
        if out.returncode != 0:
            raise ValueError(f"git archive {sha[:12]} in {root} failed: {_line(out.stderr)}")
        with tarfile.open(fileobj=io.BytesIO(out.stdout), mode="r:") as tf:
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:  # Python 3.10 before 3.10.12: refuse what the data filter would
                for m in tf.getmembers():
                    bad = os.path.isabs(m.name) or ".." in m.name.split("/")
                    # a symbolic link may point anywhere: one to outside the folder would let a
                    # later member be written through it, so only links that stay inside pass
                    if m.issym():
                        bad = bad or _escapes(dest, m.name, m.linkname)
                    if bad or m.islnk() or m.isdev():
                        raise ValueError(f"commit {sha[:12]} holds {m.name!r}: not exported")
                tf.extractall(dest)  # noqa: S202 - members checked above
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return dest
