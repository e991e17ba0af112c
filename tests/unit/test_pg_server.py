"""The test PostgreSQL server itself: it starts as an unprivileged account, serves a database
of its own per test, and stops with nothing left behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from typing import Any

import psutil
import pytest

from crashpoint.errors import InvalidArgument
from crashpoint.harness._standins._postgres import SUPERUSER, PostgresServer


def test_the_server_runs_unprivileged_and_serves_a_database(pg_server: Any, pg_dsn: str) -> None:
    proc = psutil.Process(pg_server.process.pid)
    assert proc.uids().effective != 0  # PostgreSQL refuses root; CI is root
    dbname = pg_dsn.rsplit("/", 1)[1]
    assert pg_server.psql("SELECT current_database()", dbname).strip() == dbname
    assert oct(os.stat(pg_server.folder).st_mode & 0o777) == "0o700"


# -- locked down (issue 26): no other local user logs in, over TCP or through the socket ----------


def _outsider() -> list[str]:
    """The argv prefix that runs a command as ``nobody`` (skips with the reason where it can't)."""
    if os.geteuid() != 0:
        pytest.skip("running a client as another local user needs root (setpriv / runuser)")
    for prefix in (
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"],
        ["runuser", "-u", "nobody", "--"],
    ):
        if shutil.which(prefix[0]) is None:
            continue
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [*prefix, "id", "-u"], capture_output=True, text=True, timeout=10, check=False
            )
            if done.returncode == 0 and done.stdout.strip() not in ("", "0"):
                return prefix
    pytest.skip("neither setpriv nor runuser can run a command as nobody here")


def _psql_as_outsider(pg_server: Any, host: str, password: str | None = None) -> str:
    """psql as ``nobody``, superuser name and database known, password unknown; its stderr."""
    env = {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C", "HOME": "/nonexistent"}
    if password is not None:
        env["PGPASSWORD"] = password
    argv = [os.path.join(pg_server.bindir, "psql"), "-X", "-w", "-At", "-h", host]
    argv += ["-p", str(pg_server.port), "-U", SUPERUSER, "-d", "postgres", "-c", "SELECT 1"]
    done = subprocess.run(
        [*_outsider(), *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
        cwd="/",
    )
    assert done.returncode != 0, f"another local user logged in through {host}: {done.stdout}"
    return done.stderr


def test_another_local_user_cannot_log_in_over_tcp(pg_server: Any) -> None:
    # the port is reachable (the server answers), but not without the generated password
    err = _psql_as_outsider(pg_server, "127.0.0.1")
    assert "no password supplied" in err, err
    err = _psql_as_outsider(pg_server, "127.0.0.1", password="postgres")  # noqa: S106 - a guess
    assert f'password authentication failed for user "{SUPERUSER}"' in err, err


def test_another_local_user_cannot_reach_the_socket_or_the_password(pg_server: Any) -> None:
    sock = os.path.join(pg_server.socket_dir, f".s.PGSQL.{pg_server.port}")
    assert os.path.exists(sock)  # it is there: the refusal below is the folder's, not a typo
    err = _psql_as_outsider(pg_server, pg_server.socket_dir)
    assert "Permission denied" in err, err
    for path in (pg_server.socket_dir, pg_server.folder):
        st = os.stat(path)
        assert st.st_mode & 0o777 == 0o700
        assert st.st_uid == (pg_server.account.pw_uid if pg_server.account else os.geteuid())
    peek = subprocess.run(
        [*_outsider(), "cat", pg_server.pgpass],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
        cwd="/",
    )
    assert peek.returncode != 0, peek.stdout
    assert "Permission denied" in peek.stderr, peek.stderr


def test_the_cluster_trusts_no_host_connection(pg_server: Any) -> None:
    rules = pg_server.psql(
        "SELECT type, coalesce(address, ''), auth_method FROM pg_hba_file_rules"
    ).split()
    assert sorted(rules) == sorted(
        ["local||trust", "host|127.0.0.1|scram-sha-256", "host|::1|scram-sha-256"]
    )
    assert pg_server.psql("SHOW listen_addresses").strip() == "127.0.0.1"
    assert pg_server.psql("SHOW unix_socket_permissions").strip() == "0700"


def test_the_documented_dsn_and_the_passfile_log_in(pg_server: Any, pg_dsn: str) -> None:
    import psycopg

    dbname = pg_dsn.rsplit("/", 1)[1]
    assert pg_server.password
    assert pg_server.password in pg_dsn
    with psycopg.connect(pg_dsn, connect_timeout=5) as conn:
        row = conn.execute("SELECT current_user, current_database()").fetchone()
    assert row == (SUPERUSER, dbname)
    bare = pg_server.dsn(dbname, password=False)
    assert pg_server.password not in bare
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(bare, connect_timeout=5, passfile=os.devnull).close()
    # a client given the password-less DSN (say, in argv) and the environment logs in
    assert oct(os.stat(pg_server.pgpass).st_mode & 0o777) == "0o600"
    env = {"PATH": os.environ.get("PATH", ""), **pg_server.client_env()}
    done = subprocess.run(
        [os.path.join(pg_server.bindir, "psql"), "-X", "-w", "-At", "-d", bare, "-c", "SELECT 7"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env=env,
    )
    assert done.stdout.strip() == "7", done.stderr
    # the password is nowhere in the cluster's files (no left-over --pwfile, no plain text)
    needle = pg_server.password.encode()
    for root, _dirs, files in os.walk(pg_server.folder):
        for name in files:
            path = os.path.join(root, name)
            if path == pg_server.pgpass or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                assert needle not in f.read(), f"the password is in {path}"


@pytest.mark.parametrize(
    "settings",
    [
        {"listen_addresses": "'*'"},
        {"listen_addresses": "'0.0.0.0'"},
        {"listen_addresses": "'127.0.0.1,10.0.0.1'"},
        {"hba_file": "'/tmp/hba'"},
        {"unix_socket_directories": "'/tmp'"},
        {"unix_socket_permissions": "0777"},
        {"work_mem": "'4MB'\nlisten_addresses = '*'"},
    ],
)
def test_settings_cannot_open_the_server(settings: dict[str, str]) -> None:
    with pytest.raises(InvalidArgument, match="settings"), PostgresServer.start(settings=settings):
        pytest.fail("started")
