"""The daemon under load: throughput, added latency over the loop alone, peak RSS; and the
time a replica's death takes to be repaired by another.

Workload: C concurrent clients; each opens a conversation and asks one question that takes one
tool round ("weather in Paris": query -> interrupt -> local tool -> submit -> answer), twice.
The same workload runs two ways against one emulator process (``toolbridge emulator``):

- direct: `Bridge` in this process, one thread per client (the loop alone);
- daemon: ``toolbridge serve`` as its own process (``--workers C``), clients over HTTP
  (``POST /v1/conversations`` then ``POST .../messages``), journal in a SQLite file (and,
  for comparison, ``--db :memory:``), then in PostgreSQL (a throwaway server,
  `tests.support.postgres.PostgresServer`): 1 replica, 2 replicas on one database with client i
  talking to replica i % 2, and 2 replicas with each message sent to the replica that did not
  create its conversation.

Added latency = daemon percentile - direct percentile of the per-conversation wall time.
Peak RSS is each daemon process's VmHWM from /proc; CPU is read from /proc around the run.
The direct run's CPU is this process's own (`time.process_time`, all threads) around it: the
loop and its HTTP client, as in the daemon, which adds serving HTTP and its journal. The direct
run journals in memory (`MemoryJournal`, `Bridge`'s default): the like-for-like daemon is the
``--db :memory:`` one (an in-memory SQLite database: SQL, no fsync); the SQLite file (WAL,
``synchronous=FULL``) is the realistic one. The issue-14 targets are printed last as ratios.

Failover: replicas A and B (``--lease-seconds``, default 3 here) on one database; K messages run
on A, each held inside its tool (half non-idempotent, half idempotent); kill -9 A; the time
until B shows every one of them ended, the executions per call (a non-idempotent call run twice
is a duplicate), and messages that never ended (lost). Timings go to stdout; nothing is
asserted.

Sequential: one client, one conversation at a time, `Bridge.ask` in this process and the daemon
(SQLite file, then ``--db :memory:``) in alternating blocks, so both see the same machine: the
latency the daemon adds when nothing queues (p50 / p99) and each side's CPU per conversation.

Targets: the last table prints each target of the daemon's cost per conversation that this
benchmark measures as a ratio (or a difference) of this run with PASS/FAIL: daemon CPU / direct
CPU at 50 clients (SQLite file <= 1.5, ``:memory:`` <= 1.3), PostgreSQL (daemon + server CPU) /
SQLite-file daemon CPU (<= 1.5), PostgreSQL statements per conversation (<= 25), and the
sequential added latency (p50 <= 3 ms, p99 <= 10 ms). The Coze and Responses ratios come from
bench_coze.py and bench_responses.py.

``--only sqlite|sequential|postgres|failover`` (repeatable) picks parts, ``--quick`` (or
BENCH_QUICK=1) runs 50 clients only, 10 failover conversations and shorter sequential runs.
``--warm-up N`` has each daemon answer N rounds before it is measured (default 0: the
measured run includes a PostgreSQL daemon's opening of its pool's connections).
Without the PostgreSQL server binaries the PostgreSQL parts are skipped with a note.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import requests
from _daemons import (
    FAILOVER_RULES,
    Process,
    cpu_seconds,
    failover,
    postgres_pids,
    postgres_server,
    serve_has,
    statements,
    transactions,
)

from bridge import Bridge, manifest
from bridge.platforms._http import new_session
from bridge.platforms.appbuilder import AppBuilderPlatform

__all__ = ["daemon_client", "main"]

PER_CLIENT = 2
EMULATOR_PID: list[int] = []
"""The emulator process, once started (its CPU is part of each run's budget)."""
PARTS = ("sqlite", "sequential", "postgres", "failover")
WARM_UP = [0]
"""Rounds of PER_CLIENT conversations per client each daemon answers before it is measured
(``--warm-up``): without them, a PostgreSQL daemon's run also pays for opening its pool's
connections (one per worker: authentication on both sides) and preparing its statements."""
STATEMENTS: list[float] = []
"""PostgreSQL statements per conversation, once measured (for the targets table)."""


@dataclass
class Figures:
    """One row's figures, for the targets table."""

    direct_rate: float
    daemon_rate: float
    added_p99_ms: float
    direct_cpu_ms: float
    daemon_cpu_ms: float
    client_cpu_ms: float
    """This process's CPU per conversation while it plays the daemon's clients."""
    emulator_cpu_ms: float
    """The emulator's CPU per conversation during the daemon run."""
    database_cpu_ms: float
    """The PostgreSQL server's CPU per conversation (0 for SQLite)."""


@dataclass
class Run:
    """What one daemon run measured."""

    latencies: list[float]
    wall: float
    peaks: list[float]
    daemon_cpu: float
    database_cpu: float
    transactions: int
    client_cpu: float = 0.0
    emulator_cpu: float = 0.0


SCENARIO = {
    "settings": {"chunk_chars": 16},
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "{city}: {outputs.get_weather.temp} degrees",
        }
    ],
}
TOOLS = '''
from bridge import manifest


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> dict:
    """Weather.

    Args:
        city: City name.
    """
    return {"city": city, "temp": 18}
'''


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> dict[str, object]:
    """Weather.

    Args:
        city: City name.
    """
    return {"city": city, "temp": 18}


def _drive(clients: int, one: Callable[[], None]) -> tuple[list[float], float]:
    """Run `one` PER_CLIENT times in each of `clients` threads; per-call seconds and wall."""
    latencies: list[float] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)

    def client() -> None:
        start.wait()
        for _ in range(PER_CLIENT):
            began = time.perf_counter()
            try:
                one()
            except BaseException as exc:
                errors.append(exc)
                return
            with lock:
                latencies.append(time.perf_counter() - began)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} conversation(s) failed, first: {errors[0]!r}")
    return latencies, wall


def _percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _direct(emulator: dict[str, str], clients: int) -> tuple[list[float], float, float]:
    """Latencies, wall and this process's CPU seconds (every thread) of the direct run."""
    # As the daemon does (`bridge.daemon.app._platform`): one pooled connection per client.
    session = new_session(connections=clients)
    platform = AppBuilderPlatform(
        app_id=emulator["APPBUILDER_APP_ID"],
        token=emulator["APPBUILDER_TOKEN"],
        base_url=emulator["GATEWAY_URL_V2"],
        session=session,
    )
    with Bridge(platform, [get_weather], max_concurrency=4) as bridge:

        def one() -> None:
            result = bridge.ask("weather in Paris")
            assert result.answer == "Paris: 18 degrees", result.answer

        cpu = time.process_time()
        latencies, wall = _drive(clients, one)
        return latencies, wall, time.process_time() - cpu


def _daemon(
    emulator: dict[str, str],
    clients: int,
    folder: Path,
    db: str,
    replicas: int = 1,
    cross: bool = False,
    replica_ids: bool = False,
    server: Any = None,
) -> Run:
    """Latencies, wall, each replica's peak RSS (MiB) and CPU of `replicas` daemons on `db`
    (and of the PostgreSQL `server`'s processes, when given).

    Client i talks to replica i % replicas (client-side round robin); with `cross` it sends
    its messages to the next replica, not the one that created the conversation."""
    # The URL (and its password) goes by the environment: argv is public in the process list.
    env = {**emulator, "TOOLBRIDGE_DB": db}
    daemons: list[Process] = []
    # Counted from before the start: the replicas' start-up (migrations, a recovery scan) is
    # a few dozen transactions, next to hundreds of conversations.
    xacts = transactions(server, db) if server is not None else 0
    try:
        for n in range(replicas):
            args = ["serve", "--tools", str(folder / "tools.py"), "--port", "0"]
            args += ["--workers", str(clients), "--queue-limit", "0"]
            if replica_ids:
                args += ["--replica-id", f"bench-r{n + 1}"]
            daemons.append(Process(args, "listening on ", env))
        urls = [daemon.url for daemon in daemons]
        local = threading.local()
        counter = itertools.count()

        def one() -> None:
            session = getattr(local, "session", None)
            if session is None:
                session = local.session = requests.Session()
                local.index = next(counter)
            creator = urls[local.index % replicas]
            runner = urls[(local.index + cross) % replicas]
            try:
                created = session.post(creator + "/v1/conversations", json={}, timeout=120)
            except requests.ConnectionError:
                # With messages on the other replica, this kept-alive connection idled for a
                # whole run and the daemon (uvicorn: 5 s) may be closing it as it is reused;
                # an empty conversation created twice does no harm.
                created = session.post(creator + "/v1/conversations", json={}, timeout=120)
            cid = created.json()["conversation_id"]
            reply = session.post(
                f"{runner}/v1/conversations/{cid}/messages",
                json={"query": "weather in Paris"},
                timeout=120,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["answer"] == "Paris: 18 degrees"

        for _ in range(WARM_UP[0]):  # not measured: pools grown, statements prepared
            _drive(clients, one)
        pids = [daemon.proc.pid for daemon in daemons]
        database = postgres_pids(server) if server is not None else []
        cpu = cpu_seconds(pids), cpu_seconds(database)
        others = time.process_time(), cpu_seconds(EMULATOR_PID)
        latencies, wall = _drive(clients, one)
        others = time.process_time() - others[0], cpu_seconds(EMULATOR_PID) - others[1]
        # Backends opened during the run count too (the pools grow under load).
        database += [pid for pid in postgres_pids(server) if pid not in database] if server else []
        cpu = cpu_seconds(pids) - cpu[0], cpu_seconds(database) - cpu[1]
        peaks = [daemon.peak_mib() for daemon in daemons]
    finally:
        for daemon in daemons:
            daemon.stop()
    # The backends have exited with the daemons' pools: their statistics are in.
    xacts = transactions(server, db) - xacts if server is not None else 0
    return Run(latencies, wall, peaks, *cpu, xacts, *others)


@dataclass
class Sequential:
    """One client, one conversation at a time: per-conversation seconds and CPU seconds."""

    direct: list[float]
    daemon: list[float]
    direct_cpu: float
    daemon_cpu: float


def daemon_client(url: str, timeout: float = 60) -> Callable[[], None]:
    """One client of the daemon at `url` (its own connection): each call opens a conversation
    and asks "weather in Paris" in it (one tool round), checking the answer."""
    client = requests.Session()

    def one() -> None:
        created = client.post(url + "/v1/conversations", json={}, timeout=timeout)
        cid = created.json()["conversation_id"]
        reply = client.post(
            f"{url}/v1/conversations/{cid}/messages",
            json={"query": "weather in Paris"},
            timeout=timeout,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["answer"] == "Paris: 18 degrees"

    return one


def _sequential(
    emulator: dict[str, str], folder: Path, db: str, conversations: int, block: int = 20
) -> Sequential:
    """`conversations` conversations each way, `Bridge.ask` in this process and one client of
    a daemon on `db`, in alternating blocks of `block` (after a few of each to warm up)."""
    session = new_session(connections=1)
    platform = AppBuilderPlatform(
        app_id=emulator["APPBUILDER_APP_ID"],
        token=emulator["APPBUILDER_TOKEN"],
        base_url=emulator["GATEWAY_URL_V2"],
        session=session,
    )
    args = ["serve", "--tools", str(folder / "tools.py"), "--port", "0", "--workers", "4"]
    daemon = Process(args, "listening on ", {**emulator, "TOOLBRIDGE_DB": db})
    remote = daemon_client(daemon.url)

    result = Sequential([], [], 0.0, 0.0)
    try:
        with Bridge(platform, [get_weather], max_concurrency=4) as bridge:

            def local() -> None:
                answer = bridge.ask("weather in Paris").answer
                assert answer == "Paris: 18 degrees", answer

            for _ in range(5):
                local()
                remote()
            done = 0
            while done < conversations:
                size = min(block, conversations - done)
                cpu = time.process_time()
                for _ in range(size):
                    began = time.perf_counter()
                    local()
                    result.direct.append(time.perf_counter() - began)
                result.direct_cpu += time.process_time() - cpu
                cpu = cpu_seconds([daemon.proc.pid])
                for _ in range(size):
                    began = time.perf_counter()
                    remote()
                    result.daemon.append(time.perf_counter() - began)
                result.daemon_cpu += cpu_seconds([daemon.proc.pid]) - cpu
                done += size
    finally:
        daemon.stop()
    return result


def _row(
    emulator: dict[str, str],
    clients: int,
    label: str,
    run: Callable[[], Run],
    cpu_rows: list[str],
    figures: dict[tuple[int, str], Figures],
) -> None:
    direct, direct_wall, direct_cpu = _direct(emulator, clients)
    result = run()
    daemon, daemon_wall, peaks = result.latencies, result.wall, result.peaks
    d50, d99 = _percentile(direct, 50) * 1e3, _percentile(direct, 99) * 1e3
    s50, s99 = _percentile(daemon, 50) * 1e3, _percentile(daemon, 99) * 1e3
    rss = " + ".join(f"{peak:.0f}" for peak in peaks)
    print(
        f"| {clients} | {label} "
        f"| {len(direct) / direct_wall:.0f} | {len(daemon) / daemon_wall:.0f} "
        f"| {d50:.0f} / {d99:.0f} ms | {s50:.0f} / {s99:.0f} ms "
        f"| {s50 - d50:+.0f} / {s99 - d99:+.0f} ms | {rss} MiB |",
        flush=True,
    )
    n = len(daemon)
    pg = "PostgreSQL" in label
    database = f"{1e3 * result.database_cpu / n:.1f} ms" if pg else "-"
    xacts = f"{result.transactions / n:.1f}" if pg else "-"
    direct_ms, daemon_ms = 1e3 * direct_cpu / len(direct), 1e3 * result.daemon_cpu / n
    cpu_rows.append(
        f"| {clients} | {label} | {direct_ms:.1f} ms | {daemon_ms:.1f} ms "
        f"| {daemon_ms / direct_ms:.2f} | {database} | {xacts} "
        f"| {100 * (result.daemon_cpu + result.database_cpu) / (2 * daemon_wall):.0f} % |"
    )
    figures[(clients, label)] = Figures(
        len(direct) / direct_wall,
        n / daemon_wall,
        s99 - d99,
        direct_ms,
        daemon_ms,
        1e3 * result.client_cpu / n,
        1e3 * result.emulator_cpu / n,
        1e3 * result.database_cpu / n,
    )


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--only",
        action="append",
        choices=PARTS,
        help="Run only this part (repeat for more; default all: " + ", ".join(PARTS) + ").",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        default=os.environ.get("BENCH_QUICK", "") not in ("", "0"),
        help="50 clients only, fewer failover conversations (env BENCH_QUICK=1).",
    )
    parser.add_argument(
        "--warm-up",
        type=int,
        default=0,
        help="Rounds each daemon answers before it is measured (default 0).",
    )
    parser.add_argument("--failover-conversations", type=int, default=20)
    parser.add_argument("--lease-seconds", type=float, default=3.0)
    return parser.parse_args()


def main() -> int:
    """Print one table row per configuration, then the failover figures."""
    args = _args()
    # SIGTERM unwinds like an error, so the finally clauses stop the daemons, the emulator and
    # the PostgreSQL server (which runs in a session of its own and would outlive us).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parts = args.only or list(PARTS)
    WARM_UP[0] = max(0, args.warm_up)
    levels = (50,) if args.quick else (50, 200)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tools.py").write_text(TOOLS, encoding="utf-8")
        scenario = {**SCENARIO, "rules": [*SCENARIO["rules"], *FAILOVER_RULES]}
        (folder / "scenario.json").write_text(json.dumps(scenario), encoding="utf-8")
        emu = Process(
            ["emulator", "--port", "0", "--scenario", str(folder / "scenario.json")],
            "export GATEWAY_URL_V2=",
            {},
        )
        EMULATOR_PID[:] = [emu.proc.pid]
        try:
            emulator = {
                "GATEWAY_URL_V2": emu.url,
                "APPBUILDER_TOKEN": "emulator-token",
                "APPBUILDER_APP_ID": "emulator-app",
            }
            print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
                  f"{PER_CLIENT} conversations per client, one tool round each")  # fmt: skip
            if "sqlite" in parts or "postgres" in parts:
                print("| clients | journal | direct conv/s | daemon conv/s | direct p50 / p99 | "
                      "daemon p50 / p99 | added p50 / p99 | daemon peak RSS |")  # fmt: skip
                print("|---|---|---|---|---|---|---|---|")
            cpu_rows: list[str] = []
            figures: dict[tuple[int, str], Figures] = {}
            if "sqlite" in parts:
                configs = ((50, "file"), (50, ":memory:"), (200, "file"), (200, ":memory:"))
                for clients, db in configs:
                    if clients not in levels:
                        continue
                    path = str(folder / f"journal-{clients}.db") if db == "file" else db
                    label = "SQLite file" if db == "file" else db
                    run = partial(_daemon, emulator, clients, folder, path)
                    _row(emulator, clients, label, run, cpu_rows, figures)
            sequential: dict[str, Sequential] = {}
            if "sequential" in parts:
                _sequential_table(emulator, folder, 100 if args.quick else 300, sequential)
            if "postgres" in parts or "failover" in parts:
                _postgres(emulator, folder, parts, levels, args, cpu_rows, figures)
            else:
                _cpu_table(cpu_rows)
            _targets(figures)
            _cost_targets(figures, sequential)
        finally:
            emu.stop()
    return 0


def _postgres(
    emulator: dict[str, str],
    folder: Path,
    parts: list[str],
    levels: tuple[int, ...],
    args: argparse.Namespace,
    cpu_rows: list[str],
    figures: dict[tuple[int, str], Figures],
) -> None:
    replica_ids = serve_has("--replica-id")
    runs = [(c, n, cross) for c in levels for n, cross in ((1, False), (2, False), (2, True))]
    connections = 2 * (max(levels) + 4) + args.failover_conversations * 2 + 20
    with postgres_server(max_connections=connections) as server:
        if server is None:
            _cpu_table(cpu_rows)
            print(
                "PostgreSQL: skipped, no server binaries (install Debian's postgresql) or no"
                " psycopg (pip install -e '.[postgres]')"
            )
            return
        if "postgres" in parts:
            for number, (clients, replicas, cross) in enumerate(runs):
                dsn = server.create_database(f"bench_{number}")
                label = f"PostgreSQL, {replicas} replica{'s' if replicas > 1 else ''}"
                label += ", message on the other" if cross else ""
                run = partial(
                    _daemon, emulator, clients, folder, dsn, replicas, cross, replica_ids, server
                )
                _row(emulator, clients, label, run, cpu_rows, figures)
        _cpu_table(cpu_rows)
        if "postgres" in parts:
            total, kinds = statements(emulator, folder / "tools.py", server)
            STATEMENTS.append(total)
            print()
            print(f"PostgreSQL statements per conversation (one daemon): {total:.1f}")
            for kind, count in list(kinds.items())[:12]:
                print(f"  {count:5.1f}  {kind}")
        if "failover" in parts:
            lease = args.lease_seconds if serve_has("--lease-seconds") else None
            conversations = min(args.failover_conversations, 10 if args.quick else 1000)
            print()
            print("Failover: 2 replicas on one PostgreSQL database, kill -9 of one mid-run")
            if lease is None:
                print("  (serve has no --lease-seconds yet: the survivor will not take over)")
            result = failover(
                emulator,
                folder,
                server.create_database("bench_failover"),
                conversations,
                lease,
                replica_ids,
                timeout=max(30.0, 10 * (lease or 3.0) + 20),
            )
            for line in result.lines():
                print("  " + line, flush=True)


def _cpu_table(rows: list[str]) -> None:
    if not rows:
        return
    print()
    print("CPU per conversation during the run (the emulator and the clients share the cores;"
          " direct: this process, loop + its HTTP client, MemoryJournal)")  # fmt: skip
    print("| clients | journal | direct CPU | daemon CPU (all replicas) | daemon / direct "
          "| PostgreSQL server CPU | PostgreSQL transactions "
          "| busy cores (daemons + server, of 2) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(row, flush=True)
    rows.clear()


def _targets(figures: dict[tuple[int, str], Figures]) -> None:
    """The issue-14 figures of the daemon as ratios of this run, each with its target."""
    if not figures:
        return
    print()
    print("Issue 14 targets (daemon / direct in this run; direct journals in memory)")
    print("| figure | journal | value | target | met |")
    print("|---|---|---|---|---|")

    def line(figure: str, label: str, value: str, target: str, met: bool | None) -> None:
        shown = "-" if met is None else ("yes" if met else "no")
        print(f"| {figure} | {label} | {value} | {target} | {shown} |", flush=True)

    for (clients, label), f in figures.items():
        ratio = f.daemon_rate / f.direct_rate
        line(
            f"daemon conv/s / `Bridge.ask` conv/s, {clients} clients",
            label,
            f"{f.daemon_rate:.0f} / {f.direct_rate:.0f} = {ratio:.2f}",
            ">= 0.85",
            ratio >= 0.85 if clients in (50, 200) else None,
        )
    for (clients, label), f in figures.items():
        if clients == 50:
            line(
                "daemon added latency p99, 50 clients",
                label,
                f"{f.added_p99_ms:+.0f} ms",
                "<= +25 ms",
                f.added_p99_ms <= 25,
            )
    cores = os.cpu_count() or 1
    for (clients, label), f in figures.items():
        # At 0.85 x the direct rate, everything on this machine together may spend at most
        # cores / (0.85 x rate) per conversation; the emulator, the clients and the database
        # server take their share first. The daemon runs the loop itself (the direct CPU)
        # plus its own work.
        others = f.emulator_cpu_ms + f.client_cpu_ms + f.database_cpu_ms
        budget = 1e3 * cores / (0.85 * f.direct_rate) - others
        line(
            f"daemon CPU budget per conversation for 0.85 on {cores} cores, {clients} clients",
            label,
            f"{budget:.1f} ms (spent {f.daemon_cpu_ms:.1f}; the loop alone "
            f"{f.direct_cpu_ms:.1f}; emulator {f.emulator_cpu_ms:.1f}, "
            f"clients {f.client_cpu_ms:.1f}"
            + (f", database {f.database_cpu_ms:.1f}" if f.database_cpu_ms else "")
            + ")",
            "(the daemon's CPU over all its cores must fit)",
            None,
        )
    for (clients, label), f in figures.items():
        line(
            f"CPU per conversation, daemon / direct, {clients} clients",
            label,
            f"{f.daemon_cpu_ms:.1f} / {f.direct_cpu_ms:.1f} ms = "
            f"{f.daemon_cpu_ms / f.direct_cpu_ms:.2f}",
            "(no target; 1.00 = no overhead)",
            None,
        )


def _sequential_table(
    emulator: dict[str, str], folder: Path, conversations: int, out: dict[str, Sequential]
) -> None:
    print()
    print(f"One client, sequential ({conversations} conversations each way, alternating"
          " blocks): per-conversation wall time and CPU")  # fmt: skip
    print("| journal | direct p50 / p99 | daemon p50 / p99 | added p50 / p99 "
          "| direct CPU | daemon CPU | daemon / direct |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for label, db in (("SQLite file", str(folder / "sequential.db")), (":memory:", ":memory:")):
        run = out[label] = _sequential(emulator, folder, db, conversations)
        d50, d99 = _percentile(run.direct, 50) * 1e3, _percentile(run.direct, 99) * 1e3
        s50, s99 = _percentile(run.daemon, 50) * 1e3, _percentile(run.daemon, 99) * 1e3
        direct_ms = 1e3 * run.direct_cpu / len(run.direct)
        daemon_ms = 1e3 * run.daemon_cpu / len(run.daemon)
        print(
            f"| {label} | {d50:.1f} / {d99:.1f} ms | {s50:.1f} / {s99:.1f} ms "
            f"| {s50 - d50:+.1f} / {s99 - d99:+.1f} ms | {direct_ms:.1f} ms | {daemon_ms:.1f} ms "
            f"| {daemon_ms / direct_ms:.2f} |",
            flush=True,
        )


def _cost_targets(
    figures: dict[tuple[int, str], Figures], sequential: dict[str, Sequential]
) -> None:
    """Each target of the daemon's cost per conversation this run measured, PASS or FAIL."""
    rows: list[tuple[str, str, str, bool]] = []
    for label, target in (("SQLite file", 1.5), (":memory:", 1.3)):
        f = figures.get((50, label))
        if f is not None:
            ratio = f.daemon_cpu_ms / f.direct_cpu_ms
            rows.append((
                f"daemon CPU / in-process `Bridge.ask` CPU per conversation, {label}, 50 clients",
                f"{f.daemon_cpu_ms:.1f} / {f.direct_cpu_ms:.1f} ms = {ratio:.2f}",
                f"<= {target}",
                ratio <= target,
            ))  # fmt: skip
    base = figures.get((50, "SQLite file"))
    pg = figures.get((50, "PostgreSQL, 1 replica"))
    if base is not None and pg is not None:
        ratio = (pg.daemon_cpu_ms + pg.database_cpu_ms) / base.daemon_cpu_ms
        rows.append((
            "PostgreSQL: (daemon + server CPU) / SQLite-file daemon CPU, 50 clients",
            f"({pg.daemon_cpu_ms:.1f} + {pg.database_cpu_ms:.1f}) / {base.daemon_cpu_ms:.1f} ms"
            f" = {ratio:.2f}",
            "<= 1.5",
            ratio <= 1.5,
        ))  # fmt: skip
    if STATEMENTS:
        rows.append((
            "SQL statements per conversation on PostgreSQL",
            f"{STATEMENTS[0]:.1f}",
            "<= 25",
            STATEMENTS[0] <= 25,
        ))  # fmt: skip
    run = sequential.get("SQLite file")
    if run is not None:
        for q, target in ((50, 3.0), (99, 10.0)):
            added = (_percentile(run.daemon, q) - _percentile(run.direct, q)) * 1e3
            rows.append((
                f"one client, sequential: daemon latency - in-process, p{q}, SQLite file",
                f"{_percentile(run.daemon, q) * 1e3:.1f} - {_percentile(run.direct, q) * 1e3:.1f}"
                f" = {added:+.1f} ms",
                f"<= {target:g} ms",
                added <= target,
            ))  # fmt: skip
    if not rows:
        return
    print()
    print("Targets: the daemon's cost per conversation (this run; Coze and Responses: their"
          " own benchmarks)")  # fmt: skip
    print("| figure | value | target | |")
    print("|---|---|---|---|")
    for figure, value, target, met in rows:
        print(f"| {figure} | {value} | {target} | {'PASS' if met else 'FAIL'} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
