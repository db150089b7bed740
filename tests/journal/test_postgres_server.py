"""The PostgreSQL test server itself: real server, real TCP logins, kill -9 and restart."""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import PostgresServer, PostgresServerError, find_binaries

needs_server = pytest.mark.skipif(
    find_binaries() is None,
    reason="no PostgreSQL server binaries; install Debian's 'postgresql' (make test does)",
)


@pytest.fixture
def own_server(caplog: pytest.LogCaptureFixture) -> Iterator[PostgresServer]:
    """A server of this test's own, since these tests kill it (the session one is shared)."""
    caplog.set_level(logging.DEBUG)
    with PostgresServer() as server:
        yield server


def _listening_addresses(port: int) -> set[str]:
    """Local addresses of the sockets listening on *port*, from /proc/net/tcp{,6}."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


@needs_server
def test_session_fixture_gives_a_password_protected_database(postgres: PostgresServer) -> None:
    with psycopg.connect(postgres.dsn, connect_timeout=30) as conn:
        assert conn.info.host == "127.0.0.1"
        assert conn.info.user == postgres.user
        assert conn.execute("SELECT current_database()").fetchone() == (postgres.database,)
    wrong = postgres.dsn.replace(postgres.password, "not-the-password")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong, connect_timeout=30)


@needs_server
def test_write_kill_restart_finds_committed_row_and_stop_removes_directory(
    own_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = own_server
    with psycopg.connect(server.dsn, connect_timeout=30) as conn:
        conn.execute("CREATE TABLE steps (id int PRIMARY KEY, note text NOT NULL)")
        conn.execute("INSERT INTO steps VALUES (1, 'committed before the crash')")
        conn.commit()
        assert conn.execute("SELECT note FROM steps").fetchall() == [
            ("committed before the crash",)
        ]
        # Only loopback: the server's own setting and the kernel's listening sockets agree.
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
    listening = _listening_addresses(server.port)
    if listening:  # /proc/net/tcp is Linux's; elsewhere the SHOW above is the check
        assert listening == {"0100007F"}, f"listening on {listening}, expected 127.0.0.1 only"
    with pytest.raises(OSError), socket.create_connection(("::1", server.port), timeout=5):
        pass

    directory, data_dir, port, dsn = server.directory, server.data_dir, server.port, server.dsn
    assert directory is not None and data_dir.is_dir()
    pid = server.pid
    assert pid is not None
    server.kill()
    assert not server.running
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=5)

    server.start()  # crash recovery on the same data directory and port
    assert (server.directory, server.port, server.dsn) == (directory, port, dsn)
    with psycopg.connect(server.dsn, connect_timeout=30) as conn:
        rows = conn.execute("SELECT id, note FROM steps").fetchall()
    assert rows == [(1, "committed before the crash")]

    server.stop()
    assert not directory.exists()
    assert not server.running
    server.stop()  # idempotent

    # The password is in the DSN handed to clients, and nowhere else.
    assert server.password not in repr(server)
    assert server.password not in str(server)
    assert server.password not in server.safe_dsn
    assert "***" in repr(server)
    assert caplog.records, "the server's lifecycle is logged"
    for record in caplog.records:
        assert server.password not in record.getMessage()


@needs_server
def test_server_log_never_holds_the_password() -> None:
    with PostgresServer() as server:
        # A failed login and a failed statement both reach the server log.
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(server.dsn.replace(server.password, "wrong"), connect_timeout=30)
        with (
            psycopg.connect(server.dsn, connect_timeout=30) as conn,
            pytest.raises(psycopg.errors.UndefinedTable),
        ):
            conn.execute("SELECT * FROM missing")
        server_log = server.log_path.read_text()
        assert "password authentication failed" in server_log
        assert server.password not in server_log


@needs_server
def test_databases_are_created_on_request(postgres: PostgresServer) -> None:
    dsn = postgres.create_database("created_on_request")
    with psycopg.connect(dsn, connect_timeout=30) as conn:
        conn.execute("CREATE TABLE t (x int)")
        assert conn.execute("SELECT current_database()").fetchone() == ("created_on_request",)
    with pytest.raises(ValueError, match="not a plain PostgreSQL identifier"):
        postgres.create_database("x; DROP DATABASE toolbridge")


@needs_server
def test_start_failure_reports_the_log_tail() -> None:
    server = PostgresServer(shared_buffers="not-a-size")
    try:
        with pytest.raises(PostgresServerError) as caught:
            server.start()
        message = str(caught.value)
        assert "exited with code" in message
        assert "shared_buffers" in message  # the server's own complaint, from its log
        assert server.password not in message
    finally:
        server.stop()
    assert server.directory is None


def test_missing_binaries_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(PostgresServerError, match=r"initdb, postgres, psql missing"):
        PostgresServer(binaries=tmp_path)
