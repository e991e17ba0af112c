"""A real, throw-away PostgreSQL server for tests, campaigns and benchmarks.

PostgreSQL refuses to run as root, and CI runs as root: when the effective uid is 0 the server is
started as an unprivileged account (``postgres`` by default, any other by name) in a temporary
data folder that account owns. Without root it runs as the current user. It is stopped,
process group and all, when the context exits. Nothing outside its own folder is touched.

No other local user can log in (a superuser can run shell commands as the server's account,
``COPY ... FROM PROGRAM``, so a login is as good as a shell):

- TCP, on ``127.0.0.1`` only at a free port, needs the superuser's password: a fresh random one
  per server (:attr:`PostgresServer.password`), set at ``initdb`` from a 0600 file that is removed
  at once, checked by ``scram-sha-256``. ``settings`` cannot widen ``listen_addresses`` or move
  the access files and the socket.
- The Unix socket lives in a 0700 folder of the server's account inside its 0700 private folder:
  only that account and root reach it, and only there does ``pg_hba.conf`` trust a login.

The DSNs (:meth:`PostgresServer.dsn`, :meth:`PostgresServer.create_database`) carry the password:
hand them to tests and agents in the environment, not in argv (``/proc/PID/cmdline`` is world
readable, ``/proc/PID/environ`` is not). Where a URL must go on a command line, use
``dsn(name, password=False)`` and give the client :meth:`PostgresServer.client_env` (``PGPASSFILE``,
a 0600 libpq password file that libpq and psycopg read by themselves).

    with PostgresServer.start() as pg:     # or unavailable() -> the reason it cannot
        dsn = pg.create_database("t1")      # postgresql://crashpoint:PASSWORD@127.0.0.1:PORT/t1

:func:`unavailable` says, in one line, why a server cannot be started here (no binaries, no
unprivileged account when root), so tests skip with the reason instead of failing.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import quote

from crashpoint._proc import socket_folder
from crashpoint.errors import InvalidArgument, StandInError

__all__ = ["PostgresServer", "find_binaries", "unavailable"]

SUPERUSER = "crashpoint"

#: Who may log in how: trust only through the socket in the 0700 folder (the server's account and
#: root), a password over loopback TCP; nothing else (not even replication).
HBA = """\
# written by crashpoint: a throw-away cluster that no other local user may log in to
local   all   all                  trust
host    all   all   127.0.0.1/32   scram-sha-256
host    all   all   ::1/128        scram-sha-256
"""

#: Settings a caller may not pass: they would let other users in or move the access files.
_GUARDED = frozenset(
    {
        "hba_file",
        "ident_file",
        "config_file",
        "data_directory",
        "unix_socket_directories",
        "unix_socket_group",
        "unix_socket_permissions",
        "password_encryption",
        "include",
        "include_dir",
        "include_if_exists",
    }
)
#: The server's socket inside its folder, at the longest (port 65535): what must fit ``sun_path``.
_SOCKET_LEAF = os.path.join("sock", ".s.PGSQL.65535")
_SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_LOOPBACK = ("127.0.0.1", "::1")


def find_binaries() -> str | None:
    """The folder holding ``initdb`` and ``postgres``: ``$CRASHPOINT_PG_BIN``, then ``PATH``,
    then ``pg_config --bindir``, then ``/usr/lib/postgresql/*/bin`` (newest first)."""
    candidates: list[str] = []
    env = os.environ.get("CRASHPOINT_PG_BIN")
    if env:
        candidates.append(env)
    for name in ("initdb", "postgres"):
        found = shutil.which(name)
        if found:
            candidates.append(os.path.dirname(os.path.realpath(found)))
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=False
            ).stdout.strip()
            if out:
                candidates.append(out)
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)
    for folder in candidates:
        if all(os.access(os.path.join(folder, b), os.X_OK) for b in ("initdb", "postgres")):
            return folder
    return None


def _run_as(user: str | None) -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam(user or "postgres")


def unavailable(user: str | None = None) -> str | None:
    """Why a server cannot be started on this machine, or None if it can."""
    if find_binaries() is None:
        return (
            "PostgreSQL server binaries (initdb, postgres) not found on PATH, in "
            "pg_config --bindir or /usr/lib/postgresql/*/bin; install the server package "
            "or set CRASHPOINT_PG_BIN"
        )
    if os.geteuid() == 0:
        try:
            _run_as(user)
        except KeyError:
            return (
                f"running as root and there is no unprivileged account "
                f"{user or 'postgres'!r} to run PostgreSQL as (it refuses to run as root); "
                "create one (useradd postgres) or run as a normal user"
            )
    return None


def _plain_name(name: str) -> str:
    if (
        not name
        or not name.replace("_", "").isalnum()
        or not name[0].isalpha()
        or not name.isascii()
    ):
        raise InvalidArgument(f"database name {name!r}: use ASCII letters, digits and _")
    return name


def _check_settings(settings: dict[str, str]) -> None:
    """Refuse settings that would open the server to other users (see the module doc)."""
    for key, value in settings.items():
        where = f"settings[{key!r}]"
        if not isinstance(key, str) or not _SETTING_NAME.match(key):
            raise InvalidArgument(f"{where}: not a PostgreSQL setting name; use letters, _ and .")
        if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
            raise InvalidArgument(
                f"{where} = {value!r}: a value is one line of text (no newline or NUL)"
            )
        name = key.lower()
        if name in _GUARDED:
            raise InvalidArgument(
                f"{where}: the throw-away server keeps its own access settings (socket folder, "
                "pg_hba.conf, password hashing) so no other user can log in; drop this setting"
            )
        if name == "listen_addresses":
            hosts = [h.strip() for h in value.strip().strip("'").split(",")]
            if "127.0.0.1" not in hosts or any(h not in _LOOPBACK for h in hosts):
                raise InvalidArgument(
                    f"{where} = {value!r}: the throw-away server listens on loopback only "
                    "('127.0.0.1', optionally with '::1'); drop the setting"
                )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """A throw-away PostgreSQL server on loopback, run as the unprivileged ``postgres`` account
    in a private folder (CI runs as root), one database per test. Use :meth:`start` (a context
    manager) rather than the constructor.

    Locked down (see the module doc): over TCP the superuser needs :attr:`password`, fresh per
    server; the socket folder is 0700. The DSNs carry the password: pass them to clients in
    the environment, never in argv (or pass ``dsn(name, password=False)`` with
    :meth:`client_env`)."""

    folder: str
    port: int
    bindir: str
    process: subprocess.Popen[bytes] | None = None
    account: pwd.struct_passwd | None = None
    #: the superuser's password over TCP (random, per server); kept out of ``repr``
    password: str = field(default="", repr=False)
    _databases: list[str] = field(default_factory=list)

    @property
    def socket_dir(self) -> str:
        return os.path.join(self.folder, "sock")

    @property
    def data_dir(self) -> str:
        return os.path.join(self.folder, "data")

    @property
    def log_path(self) -> str:
        return os.path.join(self.folder, "server.log")

    @property
    def pgpass(self) -> str:
        """A libpq password file (0600, owned by the user who started the server) that logs
        the superuser in over loopback TCP, at any port (a proxy in front of it too)."""
        return os.path.join(self.folder, "pgpass")

    def dsn(self, dbname: str = "postgres", *, password: bool = True) -> str:
        """A libpq URI for ``dbname`` over loopback TCP (the form users paste).

        It carries the password: give it to a client in its environment (or a 0600 file), not
        in argv, where every local user reads it. ``password=False`` leaves it out, for a
        command line; the client then needs :meth:`client_env`."""
        user = SUPERUSER
        if password and self.password:
            user += ":" + quote(self.password, safe="")
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def client_env(self) -> dict[str, str]:
        """Environment variables that let a libpq client (psql, psycopg, SQLAlchemy) log in
        with a DSN that has no password: ``PGPASSFILE`` naming :attr:`pgpass`."""
        return {"PGPASSFILE": self.pgpass}

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        *,
        user: str | None = None,
        base: str | None = None,
        fsync: bool = True,
        settings: dict[str, str] | None = None,
        timeout: float = 60.0,
    ) -> Iterator[PostgresServer]:
        """Initialise a data folder, start the server, yield it, stop it and delete the folder.

        ``fsync=False`` trades durability of the *server* for speed (tests that kill clients,
        not the server, lose nothing by it); benchmarks keep the default. ``settings`` are
        extra ``postgresql.conf`` lines (name -> value as PostgreSQL spells it); ones that would
        let another user in (``listen_addresses`` beyond loopback, the socket folder and its
        permissions, ``hba_file`` ...) raise :class:`InvalidArgument`.
        """
        _check_settings(settings or {})
        reason = unavailable(user)
        if reason:
            raise StandInError(reason)
        bindir = find_binaries()
        assert bindir is not None
        account = _run_as(user)
        if base is None:  # a long TMPDIR leaves no room for the socket: a short folder then
            try:
                folder = socket_folder("crashpoint-pg-", _SOCKET_LEAF)
            except OSError as exc:
                raise StandInError(f"PostgreSQL cannot start: {exc.strerror}") from None
        else:
            folder = tempfile.mkdtemp(prefix="crashpoint-pg-", dir=base)
        password = secrets.token_urlsafe(24)  # fresh per server; URL- and pgpass-safe
        server = cls(folder=folder, port=0, bindir=bindir, account=account, password=password)
        try:
            os.chmod(folder, 0o700)
            os.mkdir(server.socket_dir, 0o700)
            if account is not None:
                for path in (folder, server.socket_dir):
                    os.chown(path, account.pw_uid, account.pw_gid)
                # the account must be able to reach its folder through its parents
                parent = os.path.dirname(folder)
                mode = os.stat(parent).st_mode
                if not mode & 0o001:
                    raise StandInError(
                        f"{parent} is not searchable by {account.pw_name!r}; pass base= a "
                        "folder it can reach (e.g. /tmp)"
                    )
            server._write_pgpass()
            server._initdb(fsync=fsync, settings=settings or {})
            server._launch(timeout)
            yield server
        finally:
            server.stop()
            shutil.rmtree(folder, ignore_errors=True)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        env["LANG"] = "C"
        if self.account is not None:
            env["HOME"] = self.folder
            env["USER"] = env["LOGNAME"] = self.account.pw_name
        return env

    def _popen_kw(self) -> dict[str, object]:
        kw: dict[str, object] = {"env": self._env(), "cwd": self.folder}
        if self.account is not None:
            kw.update(user=self.account.pw_uid, group=self.account.pw_gid, extra_groups=[])
        return kw

    def _secret_file(self, path: str, text: str, owner: pwd.struct_passwd | None) -> None:
        """Write ``text`` to a new 0600 file owned by ``owner`` (None: whoever we are)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            if owner is not None:
                os.fchown(fd, owner.pw_uid, owner.pw_gid)
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def _write_pgpass(self) -> None:
        # the client's, not the server account's: only root and whoever started the server
        # read it; any port, so a client through a proxy (faults.TcpProxy) finds it too
        lines = "".join(
            f"{host}:*:*:{SUPERUSER}:{self.password}\n" for host in ("127.0.0.1", "localhost")
        )
        self._secret_file(self.pgpass, lines, None)

    def _initdb(self, *, fsync: bool, settings: dict[str, str]) -> None:
        # the password reaches initdb in a 0600 file of the server's account, removed at once
        pwfile = os.path.join(self.folder, "pwfile")
        self._secret_file(pwfile, self.password + "\n", self.account)
        argv = [
            os.path.join(self.bindir, "initdb"),
            "-D",
            self.data_dir,
            "-U",
            SUPERUSER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
        ]
        if not fsync:
            argv.append("--no-sync")
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, check=False, timeout=300, **self._popen_kw()
            )  # type: ignore[call-overload]
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(pwfile)
        if done.returncode != 0:
            raise StandInError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        # initdb's own pg_hba.conf (0600, the account's) also lets replication in: keep ours
        with open(os.path.join(self.data_dir, "pg_hba.conf"), "w") as f:
            f.write(HBA)
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.socket_dir}'",
            "unix_socket_permissions": "0700",
            "password_encryption": "'scram-sha-256'",
            "fsync": "on" if fsync else "off",
            "synchronous_commit": "on" if fsync else "off",
            "full_page_writes": "on" if fsync else "off",
            "max_connections": "200",
            "shared_buffers": "32MB",
            "logging_collector": "off",
        }
        conf.update(settings)
        with open(os.path.join(self.data_dir, "postgresql.auto.conf"), "a") as f:
            for k, v in conf.items():
                f.write(f"{k} = {v}\n")

    def _launch(self, timeout: float, *, keep_port: bool = False) -> None:
        deadline = time.monotonic() + timeout
        for k in range(5):  # a free port can be taken between the probe and the bind
            self.port = self.port if keep_port and k == 0 and self.port else _free_port()
            log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
            try:
                self.process = subprocess.Popen(
                    [
                        os.path.join(self.bindir, "postgres"),
                        "-D",
                        self.data_dir,
                        "-p",
                        str(self.port),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    **self._popen_kw(),
                )  # type: ignore[call-overload]
            finally:
                log.close()
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    break
                if (
                    os.path.exists(os.path.join(self.socket_dir, f".s.PGSQL.{self.port}"))
                    and self._accepts()
                ):
                    return
                time.sleep(0.05)
            else:
                raise StandInError(
                    f"PostgreSQL did not accept connections within {timeout}s; "
                    f"see {self.log_path}: {self._log_tail()}"
                )
            if "could not bind" not in self._log_tail():
                raise StandInError(
                    f"PostgreSQL exited with {self.process.returncode}: {self._log_tail()}"
                )
        raise StandInError(f"PostgreSQL could not bind a port: {self._log_tail()}")

    def _tool(self, name: str) -> str | None:
        own = os.path.join(self.bindir, name)
        return own if os.path.exists(own) else shutil.which(name)

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(1)
            try:
                s.connect(("127.0.0.1", self.port))
            except OSError:
                return False
        isready = self._tool("pg_isready")
        if isready is None:
            return True
        done = subprocess.run(
            [isready, "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER],
            capture_output=True,
            check=False,
            timeout=10,
        )
        return done.returncode == 0

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-2000:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def psql(self, sql: str, dbname: str = "postgres", *, secret: bool = False) -> str:
        """Run one SQL command through ``psql`` (no driver needed) over loopback TCP, the
        password from :attr:`pgpass`; return its output. ``secret``: the command holds a secret
        (a role's password), so it goes through psql's standard input, not its argv."""
        psql = self._tool("psql")
        if psql is None:
            raise StandInError("psql not found beside the server binaries or on PATH")
        done = subprocess.run(
            [
                psql,
                "-X",
                "-w",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                SUPERUSER,
                "-d",
                dbname,
                *(("-f", "-") if secret else ("-c", sql)),
            ],
            input=sql if secret else None,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            env={**self._env(), **self.client_env()},
        )
        if done.returncode != 0:
            raise StandInError(f"psql failed: {done.stderr.strip()}")
        return done.stdout

    def create_database(self, name: str) -> str:
        """Create an empty database (the name must be a plain identifier); return its DSN,
        password included (see :meth:`dsn`: environment, not argv)."""
        _plain_name(name)
        self.psql(f'CREATE DATABASE "{name}"')
        self._databases.append(name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        _plain_name(name)
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def backend_pids(self, dbname: str | None = None) -> list[int]:
        """Client-serving backend pids (to kill a client's connection from the server side)."""
        sql = (
            "SELECT pid FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        if dbname:
            _plain_name(dbname)
            sql += f" AND datname = '{dbname}'"
        out = self.psql(sql)
        return [int(x) for x in out.split()]

    def shutdown(self, mode: str = "immediate") -> None:
        """Stop the server as an outage does: ``immediate`` (SIGQUIT: every backend ends at
        once, no checkpoint; the next start recovers from the WAL, as after a crash) or
        ``fast`` (SIGINT: sessions are ended, a checkpoint is written). Start it again with
        :meth:`relaunch`. Clients see their connections end and new ones refused."""
        if mode not in ("immediate", "fast"):
            raise InvalidArgument(f"shutdown mode {mode!r}: use 'immediate' or 'fast'")
        proc = self.process
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGQUIT if mode == "immediate" else signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # backends it left (none normally)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def relaunch(self, timeout: float = 60.0) -> None:
        """Start the server again on its data folder after :meth:`shutdown` (the same port
        when it is free, else another: :attr:`port` says which)."""
        if self.running:
            return
        self._launch(timeout, keep_port=True)

    def stop(self) -> None:
        """Fast shutdown (SIGINT), then SIGKILL of the whole process group after 10 s."""
        proc = self.process
        if proc is None:
            return
        self.process = None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group (none normally)

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
