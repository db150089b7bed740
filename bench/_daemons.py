"""What `bench_daemon.py` needs around its processes: a started ``toolbridge`` process (its
address, peak RSS, kill -9), a throwaway PostgreSQL server (`tests.support.postgres`), whether
``serve`` has an option, and the failover measurement. Not a benchmark itself (`run_all` runs
``bench_*.py`` only)."""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for tests.support.postgres when run as a script

__all__ = [
    "FailoverResult",
    "Process",
    "cpu_seconds",
    "failover",
    "postgres_pids",
    "postgres_server",
    "serve_has",
    "statements",
    "transactions",
]

LOG_LINES = 40
FAILOVER_TOOLS = '''
"""Failover tools: each execution appends a line to executions.log (fsynced, so a kill -9
right after keeps it) and then waits while the file "block" exists."""

import os
import time
from pathlib import Path

from bridge import manifest

HERE = Path(__file__).resolve().parent


def _run(name: str, detail: object) -> None:
    with open(HERE / "executions.log", "a", encoding="utf-8") as log:
        log.write(f"{name} {detail}\\n")
        log.flush()
        os.fsync(log.fileno())
    deadline = time.monotonic() + 120
    while (HERE / "block").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@manifest(description="Charge a card: must never run twice.")
def charge(amount: int) -> str:
    """Charge.

    Args:
        amount: Euros.
    """
    _run("charge", amount)
    return f"charged {amount}"


@manifest(description="Look a key up (safe to repeat).", idempotent=True)
def lookup(key: str) -> str:
    """Lookup.

    Args:
        key: The key.
    """
    _run("lookup", key)
    return f"value of {key}"
'''
FAILOVER_RULES: list[dict[str, Any]] = [
    {
        "match": r"charge (?P<n>\d+)",
        "steps": [{"tool": "charge", "arguments": {"amount": "{n}"}}],
        "answer": "result: {outputs.charge}",
    },
    {
        "match": r"lookup (?P<k>\w+)",
        "steps": [{"tool": "lookup", "arguments": {"key": "{k}"}}],
        "answer": "result: {outputs.lookup}",
    },
]


class Process:
    """A ``python -m bridge <command>`` process that prints ``<marker><url>`` once it is up."""

    def __init__(self, args: list[str], marker: str, env: dict[str, str]) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", *args],
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = ""
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if marker in line:
                self.url = line.split(marker, 1)[1].split()[0].strip().strip('"}').split('"')[0]
                break
        if not self.url:
            self.proc.wait()
            log = "\n".join(self.lines)
            raise RuntimeError(f"'toolbridge {args[0]}' did not start:\n{log}")
        # Keep reading, or a chatty process blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def peak_mib(self) -> float:
        """Peak resident memory so far (VmHWM), MiB."""
        status = Path(f"/proc/{self.proc.pid}/status").read_text(encoding="utf-8")
        kib = next(int(line.split()[1]) for line in status.splitlines() if "VmHWM" in line)
        return kib / 1024

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the live processes `pids` have used so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        except OSError:  # exited meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def postgres_pids(server: Any) -> list[int]:
    """The postmaster and its children (backends, WAL writer, checkpointer...); backends
    call setsid(), so the postmaster's process group does not hold them."""
    leader = int((server.data_dir / "postmaster.pid").read_text().splitlines()[0])
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text(encoding="utf-8")
            except OSError:
                continue
            pid, parent = int(entry.name), int(stat.rsplit(")", 1)[1].split()[1])
            if leader in (pid, parent):
                pids.append(pid)
    return pids


def transactions(server: Any, dsn: str) -> int:
    """Transactions committed or rolled back in the database of `dsn` so far (statistics
    reach the server when a backend is idle for a second, or exits)."""
    name = dsn.rsplit("/", 1)[1]
    out = server.psql(
        f"SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = '{name}';\n",
        database="postgres",
    )
    return int(out.strip() or 0)


def statements(
    emulator: dict[str, str], tools: Path, server: Any, conversations: int = 5
) -> tuple[float, dict[str, float]]:
    """Statements one daemon sends PostgreSQL per conversation (one tool round), from the
    server's log with ``log_statement = all`` on a database of its own: the total and the
    count per kind (the statement's first words), most frequent first."""
    dsn = server.create_database("bench_statements")
    name = dsn.rsplit("/", 1)[1]
    server.psql(f"ALTER DATABASE {name} SET log_statement = 'all';\n", database="postgres")
    args = ["serve", "--tools", str(tools), "--port", "0", "--workers", "4"]
    daemon = Process(args, "listening on ", {**emulator, "TOOLBRIDGE_DB": dsn})
    try:
        session = requests.Session()
        # A first conversation warms up (prepared statements, the pool); not counted.
        for counted in (False, True):
            if counted:
                time.sleep(1)
                start = server.log_path.stat().st_size
            for _ in range(conversations if counted else 1):
                created = session.post(daemon.url + "/v1/conversations", json={}, timeout=60)
                cid = created.json()["conversation_id"]
                reply = session.post(
                    f"{daemon.url}/v1/conversations/{cid}/messages",
                    json={"query": "weather in Paris"},
                    timeout=60,
                )
                reply.raise_for_status()
        time.sleep(1)  # the relay's last NOTIFY, the lease's release
        log = server.log_path.read_bytes()[start:].decode("utf-8", errors="replace")
    finally:
        daemon.stop()
    # A statement of several lines goes on in the lines indented with a tab.
    found = re.findall(r"LOG:  (?:statement|execute [^:]*): (.*(?:\n\t.*)*)", log)
    kinds: collections.Counter[str] = collections.Counter()
    for statement in found:
        words = " ".join(statement.split()[:5]) or "(empty: the pool's connection check)"
        kinds[words] += 1
    return len(found) / conversations, {k: n / conversations for k, n in kinds.most_common()}


def serve_has(option: str) -> bool:
    """Whether ``toolbridge serve --help`` lists `option` (the lead adds options as we go)."""
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    return option in done.stdout


@contextlib.contextmanager
def postgres_server(max_connections: int) -> Iterator[Any]:
    """A throwaway PostgreSQL server (`PostgresServer`), always stopped and removed; None when
    the server binaries (``make test`` installs Debian's ``postgresql``) or psycopg (the
    ``postgres`` extra) are missing."""
    from tests.support.postgres import PostgresServer, find_binaries

    if find_binaries() is None or importlib.util.find_spec("psycopg") is None:
        yield None
        return
    # Each replica's pool may grow to --workers + 4 connections.
    with PostgresServer(max_connections=max_connections) as server:
        yield server


@dataclass
class FailoverResult:
    """What one kill -9 of a replica left, as seen through the survivor."""

    conversations: int
    lease_seconds: float | None
    started_before_kill: int = 0
    seconds_to_all_ended: float | None = None
    first_ended: float | None = None
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    finished_by: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: int = 0
    duplicates: int = 0
    reruns: int = 0
    call_states: collections.Counter[str] = field(default_factory=collections.Counter)
    next_message: str = ""

    def lines(self) -> list[str]:
        ended = (
            f"{self.seconds_to_all_ended:.1f} s"
            if self.seconds_to_all_ended is not None
            else "not all within the timeout"
        )
        first = f"{self.first_ended:.1f} s" if self.first_ended is not None else "-"
        return [
            f"conversations on the killed replica: {self.conversations}"
            f" (tool running in {self.started_before_kill} at the kill), --lease-seconds"
            f" {self.lease_seconds if self.lease_seconds is not None else '(not supported)'}",
            f"kill -9 -> first message ended on the survivor: {first}; all ended: {ended}",
            f"message statuses on the survivor: {dict(sorted(self.statuses.items()))}, ended by"
            f" replica: {dict(sorted(self.finished_by.items()))}",
            f"lost messages: {self.lost}; duplicate executions of non-idempotent calls:"
            f" {self.duplicates}; re-runs of idempotent calls: {self.reruns}",
            f"tool call states on the survivor: {dict(sorted(self.call_states.items()))}",
            f"next message in a taken-over conversation, on the survivor: {self.next_message}",
        ]


def failover(
    emulator: dict[str, str],
    folder: Path,
    dsn: str,
    conversations: int,
    lease_seconds: float | None,
    replica_ids: bool,
    timeout: float,
) -> FailoverResult:
    """Two replicas A and B on one database; `conversations` messages run on A with their
    tool held; kill -9 A; time until B shows every one of them ended, then count executions."""
    tools = folder / "failover"
    tools.mkdir(exist_ok=True)
    (tools / "failover_tools.py").write_text(FAILOVER_TOOLS, encoding="utf-8")
    executions = tools / "executions.log"
    executions.unlink(missing_ok=True)
    block = tools / "block"
    block.touch()
    result = FailoverResult(conversations=conversations, lease_seconds=lease_seconds)
    replicas: list[Process] = []
    try:
        for name in ("a", "b"):
            args = ["serve", "--tools", str(tools / "failover_tools.py"), "--port", "0"]
            args += ["--workers", str(conversations + 4)]
            if lease_seconds is not None:
                args += ["--lease-seconds", f"{lease_seconds:g}"]
            if replica_ids:
                args += ["--replica-id", f"bench-{name}"]
            replicas.append(Process(args, "listening on ", {**emulator, "TOOLBRIDGE_DB": dsn}))
        a, b = replicas
        queries = {}
        for i in range(conversations):
            created = requests.post(a.url + "/v1/conversations", json={}, timeout=60)
            created.raise_for_status()
            cid = created.json()["conversation_id"]
            # Half non-idempotent (must never run twice), half idempotent (may be re-run).
            queries[cid] = f"charge {i + 1}" if i % 2 == 0 else f"lookup k{i + 1}"

        def send(cid: str, query: str) -> None:
            with contextlib.suppress(requests.RequestException):  # A dies under the request
                requests.post(
                    f"{a.url}/v1/conversations/{cid}/messages", json={"query": query}, timeout=300
                )

        for cid, query in queries.items():
            threading.Thread(target=send, args=(cid, query), daemon=True).start()
        deadline = time.monotonic() + 60
        while _count_lines(executions) < conversations and time.monotonic() < deadline:
            time.sleep(0.02)
        result.started_before_kill = _count_lines(executions)
        killed = time.perf_counter()
        a.kill9()
        # A's calls are dead with it; anything B runs again must not wait.
        block.unlink()
        pending = dict(queries)
        session = requests.Session()
        detail: dict[str, dict[str, Any]] = {}
        while pending and time.perf_counter() - killed < timeout:
            for cid in list(pending):
                response = session.get(f"{b.url}/v1/conversations/{cid}", timeout=30)
                if response.status_code != 200:
                    continue
                messages = response.json()["messages"]
                if messages and messages[-1]["status"] != "running":
                    elapsed = time.perf_counter() - killed
                    if result.first_ended is None:
                        result.first_ended = elapsed
                    detail[cid] = response.json()
                    del pending[cid]
            if pending:
                time.sleep(0.05)
        if not pending:
            result.seconds_to_all_ended = time.perf_counter() - killed
        result.lost = len(pending)
        for cid in pending:
            response = session.get(f"{b.url}/v1/conversations/{cid}", timeout=30)
            if response.status_code == 200:
                detail[cid] = response.json()
        for body in detail.values():
            messages = body["messages"]
            result.statuses[messages[-1]["status"] if messages else "missing"] += 1
            if messages:
                result.finished_by[str(messages[-1].get("replica"))] += 1
            for call in body["tool_calls"]:
                state = call["state"] + (f" ({call['error']})" if call.get("error") else "")
                result.call_states[f"{call['name']}: {state}"] += 1
        runs = collections.Counter(executions.read_text(encoding="utf-8").splitlines())
        for line, count in runs.items():
            if line.startswith("charge "):
                result.duplicates += count - 1
            else:
                result.reruns += count - 1
        if detail:
            cid = next(iter(detail))
            reply = session.post(
                f"{b.url}/v1/conversations/{cid}/messages",
                json={"query": "lookup again"},
                timeout=120,
            )
            result.next_message = f"HTTP {reply.status_code}" + (
                f", {reply.json().get('status')}" if reply.status_code == 200 else ""
            )
    finally:
        block.unlink(missing_ok=True)
        for replica in replicas:
            replica.stop()
    return result


def _count_lines(path: Path) -> int:
    try:
        return len(path.read_text(encoding="utf-8").splitlines())
    except FileNotFoundError:
        return 0
