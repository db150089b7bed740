"""A real, throwaway PostgreSQL server for the tests (issue 13): no mocks, no shared server.

`PostgresServer` runs Debian's server binaries (``/usr/lib/postgresql/<newest>/bin``, else
``postgres`` on PATH): ``initdb`` into a fresh temporary directory, ``postgres`` listening only on
127.0.0.1 on a free port with its unix socket inside that directory, then a database and a
password-protected login role. TCP logins need the password (scram-sha-256); the superuser
logs in only through the socket in the private directory. When the tests run as root the
server runs as the system user ``toolbridge-pg`` (created once), because PostgreSQL refuses to
run as root.

``kill()`` SIGKILLs the whole server (postmaster and backends, as a machine dying would) and
``start()`` restarts it on the same data directory and port, so failover tests can find what
was committed. ``stop()`` always stops the server and removes the directory::

    with PostgresServer() as server:
        psycopg.connect(server.dsn)

`find_binaries()` says where the server is, or None; the ``postgres`` session fixture in
``tests/conftest.py`` skips only then (``make test`` installs Debian's ``postgresql``).
"""

from __future__ import annotations

import contextlib
import logging
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
from pathlib import Path
from types import TracebackType

__all__ = [
    "SERVER_USER",
    "PostgresServer",
    "PostgresServerError",
    "find_binaries",
    "postgres_session",
]

log = logging.getLogger(__name__)

SERVER_USER = "toolbridge-pg"
DEBIAN_ROOT = Path("/usr/lib/postgresql")
# Generous: a loaded CI machine may take a while for initdb or crash recovery after a kill.
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
LOG_TAIL_LINES = 40
# Unix socket paths are limited to 107 bytes; a long TMPDIR would make the server fail late.
_MAX_SOCKET_DIR = 80
_TOOLS = ("initdb", "postgres", "psql")
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresServerError(RuntimeError):
    """The test server could not be set up, started or used; the message carries the log tail."""


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", path.name)) or (-1,)


def find_binaries() -> Path | None:
    """The directory holding ``initdb``, ``postgres`` and ``pg_isready``, or None.

    Debian keeps them off PATH in ``/usr/lib/postgresql/<major>/bin``; the newest major wins.
    """
    candidates: list[Path] = []
    if DEBIAN_ROOT.is_dir():
        majors = sorted(DEBIAN_ROOT.iterdir(), key=_version_key, reverse=True)
        candidates.extend(major / "bin" for major in majors)
    on_path = shutil.which("postgres")
    if on_path is not None:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if all(os.access(directory / tool, os.X_OK) for tool in _TOOLS):
            return directory
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _server_account() -> pwd.struct_passwd:
    """The unprivileged account the server runs as under root, created on first use."""
    with contextlib.suppress(KeyError):
        return pwd.getpwnam(SERVER_USER)
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    result = subprocess.run(
        [useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", SERVER_USER],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    # Exit code 9: another test process created the same user a moment ago.
    if result.returncode not in (0, 9):
        raise PostgresServerError(
            f"could not create the system user {SERVER_USER!r} that runs the test server"
            f" (PostgreSQL refuses to run as root): useradd exited {result.returncode}:"
            f" {result.stderr.strip()}"
        )
    try:
        return pwd.getpwnam(SERVER_USER)
    except KeyError:
        raise PostgresServerError(
            f"useradd reported success but the user {SERVER_USER!r} does not exist"
        ) from None


def _traversable_by_others(path: Path) -> bool:
    """Whether every directory from / to *path* lets another user pass (the server user)."""
    for directory in (path, *path.parents):
        try:
            if not directory.stat().st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(no server log at {path}: {exc.strerror})"
    kept = text.splitlines()[-lines:]
    return "\n".join(kept) if kept else "(the server log is empty)"


class PostgresServer:
    """One PostgreSQL server in its own temporary directory, for one test session or test.

    The password is random per server; it appears only in `dsn` (and `password`), never in
    `repr`, `safe_dsn`, log records or errors.
    """

    def __init__(
        self,
        *,
        binaries: Path | None = None,
        user: str = "toolbridge",
        database: str = "toolbridge",
        shared_buffers: str = "32MB",
        max_connections: int = 100,
    ) -> None:
        for what, name in (("user", user), ("database", database)):
            if not _NAME.fullmatch(name):
                raise ValueError(
                    f"{what} name {name!r} is not a plain PostgreSQL identifier: expected"
                    " lower-case letters, digits and '_', starting with a letter or '_'"
                )
        self.binaries = binaries if binaries is not None else find_binaries()
        if self.binaries is None:
            raise PostgresServerError(
                f"no PostgreSQL server binaries: looked in {DEBIAN_ROOT}/<version>/bin and for"
                " 'postgres' on PATH; install Debian's 'postgresql' package (make test does)"
            )
        missing = [tool for tool in _TOOLS if not os.access(self.binaries / tool, os.X_OK)]
        if missing:
            raise PostgresServerError(
                f"no PostgreSQL server binaries in {self.binaries}: {', '.join(missing)} missing"
                f" or not executable; expected {', '.join(_TOOLS)} there"
            )
        self.user = user
        self.database = database
        # URL-safe characters: the password goes into a URL and a SQL literal without escaping.
        self.password = secrets.token_urlsafe(24)
        self.host = "127.0.0.1"
        self.port = 0
        self.directory: Path | None = None
        self._settings = {
            "listen_addresses": self.host,
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
            "shared_buffers": shared_buffers,
            "max_connections": str(max_connections),
            "password_encryption": "scram-sha-256",
            # Statements are never logged: a failing CREATE ROLE would otherwise log the password.
            "log_statement": "none",
            "log_min_error_statement": "panic",
        }
        self._process: subprocess.Popen[bytes] | None = None
        self._account: pwd.struct_passwd | None = None
        self._initialised = False

    # -- naming ---------------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """``postgresql://user:password@127.0.0.1:port/database``: hand to psycopg, never log."""
        return self.dsn_for(self.database)

    def dsn_for(self, database: str) -> str:
        """The DSN of another database on this server (see `create_database`)."""
        return f"postgresql://{self.user}:{self.password}@{self.host}:{self.port}/{database}"

    @property
    def safe_dsn(self) -> str:
        """The DSN with the password replaced by ``***``, for messages and logs."""
        return f"postgresql://{self.user}:***@{self.host}:{self.port}/{self.database}"

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"PostgresServer({self.safe_dsn}, {state}, directory={self.directory})"

    @property
    def data_dir(self) -> Path:
        return self._require_directory() / "data"

    @property
    def log_path(self) -> Path:
        return self._require_directory() / "postgres.log"

    @property
    def socket_dir(self) -> Path:
        return self._require_directory()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while it runs."""
        return self._process.pid if self.running and self._process is not None else None

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> PostgresServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the server: the first call creates the cluster, later calls restart on it."""
        if self.running:
            raise PostgresServerError(f"{self!r} is already running")
        if not self._initialised:
            self._create_directory()
            self._initdb()
            self.port = _free_port()
        self._launch()
        if not self._initialised:
            self._create_role_and_database()
            self._initialised = True
        log.info("PostgreSQL test server ready at %s (%s)", self.safe_dsn, self.directory)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend, as if the machine had died."""
        process = self._process
        if process is None:
            return
        # The server runs in its own session: its process group holds postmaster and backends.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        self._process = None
        log.info("PostgreSQL test server %s killed with SIGKILL", self.safe_dsn)

    def stop(self) -> None:
        """Stop the server (fast shutdown, SIGKILL if it hangs) and remove its directory."""
        try:
            process = self._process
            if process is not None and process.poll() is None:
                # SIGINT is PostgreSQL's "fast" shutdown: clients are disconnected, data flushed.
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGINT)
                try:
                    process.wait(timeout=STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    log.warning("PostgreSQL test server ignored SIGINT; sending SIGKILL")
            self.kill()
        finally:
            directory, self.directory = self.directory, None
            self._initialised = False
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)

    # -- databases ------------------------------------------------------------------------

    def create_database(self, name: str) -> str:
        """Create an empty database owned by the test role; returns its DSN."""
        if not _NAME.fullmatch(name):
            raise ValueError(f"database name {name!r} is not a plain PostgreSQL identifier")
        self._psql("postgres", f"CREATE DATABASE {name} OWNER {self.user};\n")
        return self.dsn_for(name)

    def psql(self, sql: str, database: str | None = None) -> str:
        """Run SQL as the superuser through the private socket; returns psql's output."""
        return self._psql(database or self.database, sql)

    # -- internals ------------------------------------------------------------------------

    def _require_directory(self) -> Path:
        if self.directory is None:
            raise PostgresServerError("the test server has no directory: it was never started")
        return self.directory

    def _create_directory(self) -> None:
        base = Path(tempfile.gettempdir())
        if os.geteuid() == 0:
            self._account = _server_account()
            # The server user must reach its directory; a private TMPDIR would stop it.
            if not _traversable_by_others(base):
                base = Path("/tmp")
        if len(str(base)) > _MAX_SOCKET_DIR:
            base = Path("/tmp")
        self.directory = Path(tempfile.mkdtemp(prefix="toolbridge-pg-", dir=base))
        if self._account is not None:
            os.chown(self.directory, self._account.pw_uid, self._account.pw_gid)

    def _ids(self) -> tuple[int | None, int | None, list[int] | None]:
        """Popen's user, group and extra_groups: the server account under root, else None."""
        account = self._account
        if account is None:
            return None, None, None
        return account.pw_uid, account.pw_gid, []

    def _env(self) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("PG") and key not in ("HOME", "USER", "LOGNAME")
        }
        env.update({"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "TZ": "UTC"})
        if self._account is not None:
            env.update({"HOME": str(self.directory), "USER": SERVER_USER})
        return env

    def _run(self, args: list[str], what: str, stdin: str | None = None) -> str:
        uid, gid, groups = self._ids()
        result = subprocess.run(
            args,
            input=stdin,
            capture_output=True,
            text=True,
            env=self._env(),
            cwd=self.directory,
            check=False,
            timeout=START_TIMEOUT,
            user=uid,
            group=gid,
            extra_groups=groups,
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).replace(self.password, "***").strip()
            raise PostgresServerError(
                f"{what} failed (exit {result.returncode}): {output}\n"
                f"server log {self.log_path}, last lines:\n{_tail(self.log_path)}"
            )
        return result.stdout

    def _initdb(self) -> None:
        assert self.binaries is not None
        self._run(
            [
                str(self.binaries / "initdb"),
                "--pgdata", str(self.data_dir),
                "--username", "postgres",
                "--encoding", "UTF8",
                "--locale", "C.UTF-8",
                # The superuser: socket only, and the socket lives in a 0700 directory.
                "--auth-local", "trust",
                # Every TCP login needs a password: the tests see what a deployment sees.
                "--auth-host", "scram-sha-256",
                "--no-instructions",
                # The tests crash the server process, never the OS: files in the page cache
                # survive a SIGKILL, so initdb's own fsync pass only costs time. The server
                # itself runs with fsync on.
                "--no-sync",
            ],
            "initdb",
        )  # fmt: skip

    def _launch(self) -> None:
        assert self.binaries is not None
        args = [str(self.binaries / "postgres"), "-D", str(self.data_dir)]
        settings = {
            **self._settings,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
        }
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        uid, gid, groups = self._ids()
        # Appending keeps the log of the previous run (before a kill) for the error message.
        with open(self.log_path, "ab") as server_log:
            if self._account is not None:
                os.chown(self.log_path, self._account.pw_uid, self._account.pw_gid)
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=server_log,
                stderr=subprocess.STDOUT,
                env=self._env(),
                cwd=self.directory,
                # Its own process group, so kill() reaches the backends and Ctrl-C does not.
                start_new_session=True,
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.binaries is not None and self._process is not None
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise PostgresServerError(
                    f"the PostgreSQL server exited with code {code} while starting on"
                    f" {self.host}:{self.port}; server log {self.log_path}, last lines:\n"
                    f"{_tail(self.log_path)}"
                )
            if self._accepting():
                return
            if time.monotonic() > deadline:
                self.kill()
                raise PostgresServerError(
                    f"the PostgreSQL server did not accept connections on {self.host}:{self.port}"
                    f" within {START_TIMEOUT:.0f}s; server log {self.log_path}, last lines:\n"
                    f"{_tail(self.log_path)}"
                )
            time.sleep(0.1)

    def _accepting(self) -> bool:
        assert self.binaries is not None
        isready = self.binaries / "pg_isready"
        if os.access(isready, os.X_OK):
            # Exit 0 only once recovery is over and logins are accepted (1 while starting).
            result = subprocess.run(
                [str(isready), "--quiet", "-h", self.host, "-p", str(self.port), "-t", "2"],
                env=self._env(),
                check=False,
            )
            return result.returncode == 0
        try:
            self._psql("postgres", "SELECT 1;\n")
        except PostgresServerError:
            return False
        return True

    def _psql(self, database: str, sql: str) -> str:
        assert self.binaries is not None
        # SQL on stdin, never argv: argv is visible to every user in the process list.
        return self._run(
            [
                str(self.binaries / "psql"),
                "--no-psqlrc", "--quiet", "--tuples-only", "--no-align",
                "--set", "ON_ERROR_STOP=1",
                "--host", str(self.socket_dir),
                "--port", str(self.port),
                "--username", "postgres",
                "--dbname", database,
            ],
            f"psql on database {database!r}",
            stdin=sql,
        )  # fmt: skip

    def _create_role_and_database(self) -> None:
        self._psql(
            "postgres",
            f"CREATE ROLE {self.user} LOGIN PASSWORD '{self.password}';\n"
            f"CREATE DATABASE {self.database} OWNER {self.user};\n",
        )


def postgres_session() -> Iterator[PostgresServer]:
    """Body of the ``postgres`` session fixture: skip only when there is no server at all."""
    import pytest

    binaries = find_binaries()
    if binaries is None:
        pytest.skip(
            f"no PostgreSQL server binaries ({DEBIAN_ROOT}/<version>/bin or 'postgres' on PATH);"
            " install Debian's 'postgresql' package, as `make test` does"
        )
    with PostgresServer(binaries=binaries) as server:
        yield server
