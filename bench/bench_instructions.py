"""The daemon's cost per conversation in instructions: a figure the machine's load cannot move.

CPU seconds per conversation move by +-30 % between runs on a shared 2-core machine (see
docs/benchmarks.md), which hides any cut smaller than that. valgrind's callgrind counts the
instructions a process executes instead: the same binary, inputs and environment give the same
count to a few parts in a thousand, whatever else runs.

The workload is `bench_daemon`'s: one conversation is "weather in Paris" on the AppBuilder
emulator (query -> one tool call -> submit -> answer). Each configuration runs under callgrind
with instrumentation off; after 20 warm-up conversations it is turned on (``callgrind_control
-i on``), N conversations are counted, then it is turned off and the counts dumped. The
emulator and the daemon's HTTP client run outside valgrind, so only the measured process counts.

- direct: `Bridge.ask` in one process, journal in memory (`MemoryJournal`, `Bridge`'s default):
  the loop alone, what the daemon's ratios divide by;
- direct, SQLite: the same with a `SQLiteJournal` on ``:memory:``: what journaling in SQL adds;
- daemon: ``toolbridge serve`` (``--workers 4``), the client posting ``/v1/conversations`` then
  ``/messages``, journal ``:memory:`` and a SQLite file (WAL, ``synchronous=FULL``);
- HTTP floor: a bare ASGI app on the same uvicorn answering the same two requests with fixed
  bodies: what serving two requests costs at the least;
- Responses: `bench_responses`' conversation (a question, a ``function_call``, its output, the
  answer) three ways, each counted in its own process: `Bridge.ask`, the adapter driven by hand,
  and the hand-written `requests` loop (the floor of the Responses target).

Instructions are the process's own, in user space, on every thread: a system call's work in
the kernel (an fsync, a socket write) is not counted, so the SQLite file's fsyncs are missing
from its figure (they are in `bench_daemon`'s CPU seconds). Without valgrind the benchmark says
so and exits 0.

Run: ``.venv/bin/python bench/bench_instructions.py [--conversations N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _daemons import Process
from _harness import count_instructions

__all__ = ["main"]

WARMUP = 20
HERE = Path(__file__).resolve()


def _callgrind(out: Path) -> list[str]:
    return [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        f"--callgrind-out-file={out}.%p",
    ]


def _instructions(out: Path) -> int:
    """The instructions counted between ``-i on`` and the dump, over every thread."""
    total = 0
    for part in out.parent.glob(f"{out.name}.*"):
        # Dumps on request are part 1 (``<out>.<pid>.1-<thread>``); the files at exit are empty.
        if not re.search(r"\.\d+\.1-\d+$", part.name):
            continue
        found = re.search(r"^totals:\s*(\d+)", part.read_text(errors="replace"), re.M)
        total += int(found.group(1)) if found else 0
    return total


# --- the measured processes ---------------------------------------------------------------------


def _direct_worker(url: str, journal_kind: str, conversations: int) -> None:
    """In the process under valgrind: `Bridge.ask`, counting itself."""
    from bench_daemon import get_weather

    from bridge import Bridge
    from bridge.platforms._http import new_session
    from bridge.platforms.appbuilder import AppBuilderPlatform

    journal = None
    if journal_kind == "sqlite":
        from bridge.journal.sqlite import SQLiteJournal

        journal = SQLiteJournal(":memory:")
    platform = AppBuilderPlatform(
        app_id="emulator-app",
        token="emulator-token",
        base_url=url,
        session=new_session(connections=1),
    )
    with Bridge(platform, [get_weather], max_concurrency=4, journal=journal) as bridge:

        def one() -> None:
            answer = bridge.ask("weather in Paris").answer
            assert answer == "Paris: 18 degrees", answer

        count_instructions(WARMUP, conversations, one)


async def _bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Two fixed JSON answers: the least a server of the daemon's two requests does."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/v1/conversations":
        status, answer = 201, {"conversation_id": "0" * 36}
    else:
        json.loads(body)
        status, answer = 200, {"answer": "Paris: 18 degrees", "message_id": 1}
    out = json.dumps(answer).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": out})


def _bare_worker() -> None:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(_bare_app, log_level="warning", access_log=False, lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


# --- the driver ----------------------------------------------------------------------------------


def _served(
    out: Path, command: list[str], env: dict[str, str], conversations: int, script: str = ""
) -> float:
    """Count a server process under valgrind while this process is its client: ``toolbridge
    <command>``, or with `script`, ``python <script> <command>``."""
    from bench_daemon import daemon_client

    real = sys.executable
    wrapper = out.parent / "under-valgrind"
    # `Process` runs `sys.executable -m bridge <command>`: a script replaces "-m bridge".
    if script:
        run = f'shift 2\nexec {" ".join(_callgrind(out))} {real} {script} "$@"'
    else:
        run = f'exec {" ".join(_callgrind(out))} {real} "$@"'
    wrapper.write_text(f"#!/bin/sh\n{run}\n", encoding="utf-8")
    wrapper.chmod(0o755)
    sys.executable = str(wrapper)  # `Process` runs `sys.executable -m bridge ...`
    try:
        server = Process(command, "listening on ", env)
    finally:
        sys.executable = real
    try:
        client = daemon_client(server.url, timeout=120)  # valgrind is slow
        count_instructions(WARMUP, conversations, client, pid=server.proc.pid)
    finally:
        server.stop()
    return _instructions(out) / conversations


def _direct(out: Path, url: str, journal: str, conversations: int) -> float:
    args = [sys.executable, str(HERE), "--worker", "direct", "--url", url]
    args += ["--journal", journal, "--conversations", str(conversations)]
    subprocess.run([*_callgrind(out), *args], check=True, capture_output=True)
    return _instructions(out) / conversations


def _responses(folder: Path, conversations: int) -> dict[str, float]:
    """`bench_responses`' three clients of one Responses emulator (in this process), each
    counted under valgrind: `Bridge.ask`, the adapter driven by hand, the hand-written loop."""
    import bench_responses

    from bridge.emulator import Emulator

    figures: dict[str, float] = {}
    with Emulator(protocol="responses", scenario=bench_responses.SCENARIO, faults="") as emu:
        env = emu.env()
        spec = {
            "base_url": env["OPENAI_BASE_URL"],
            "api_key": env["OPENAI_API_KEY"],
            "model": env["OPENAI_MODEL"],
            "query": bench_responses.QUERY,
            "tool": bench_responses.TOOL,
            "expected": bench_responses.EXPECTED,
            "n": conversations,
            "warmup": WARMUP,
            "clock": "instructions",
        }
        script = str(HERE.parent / "bench_responses.py")
        for kind in ("bridge", "adapter", "requests"):
            out = folder / f"responses-{kind}"
            args = [sys.executable, script, "--worker", kind, "--spec", json.dumps(spec)]
            subprocess.run([*_callgrind(out), *args], check=True, capture_output=True)
            figures[kind] = _instructions(out) / conversations
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40)
    parser.add_argument("--worker", choices=("direct", "bare"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--journal", default="memory", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "direct":
        _direct_worker(args.url, args.journal, args.conversations)
        return 0
    if args.worker == "bare":
        _bare_worker()
        return 0
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is not installed: no instruction counts (apt-get install valgrind)")
        return 0
    import bench_daemon

    n = args.conversations
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tools.py").write_text(bench_daemon.TOOLS, encoding="utf-8")
        scenario = folder / "scenario.json"
        scenario.write_text(json.dumps(bench_daemon.SCENARIO), encoding="utf-8")
        emulator = Process(
            ["emulator", "--port", "0", "--scenario", str(scenario)], "export GATEWAY_URL_V2=", {}
        )
        env = {
            "GATEWAY_URL_V2": emulator.url,
            "APPBUILDER_TOKEN": "emulator-token",
            "APPBUILDER_APP_ID": "emulator-app",
        }
        serve = ["serve", "--tools", str(folder / "tools.py"), "--port", "0", "--workers", "4"]
        try:
            figures = {
                "direct": _direct(folder / "direct", emulator.url, "memory", n),
                "direct, SQLite": _direct(folder / "direct-sqlite", emulator.url, "sqlite", n),
                "daemon, :memory:": _served(
                    folder / "daemon-memory", serve, {**env, "TOOLBRIDGE_DB": ":memory:"}, n
                ),
                "daemon, SQLite file": _served(
                    folder / "daemon-file",
                    serve,
                    {**env, "TOOLBRIDGE_DB": str(folder / "journal.db")},
                    n,
                ),
            }
            figures["HTTP floor (bare uvicorn)"] = _served(
                folder / "bare", ["--worker", "bare"], {}, n, script=str(HERE)
            )
        finally:
            emulator.stop()
        responses = _responses(folder, n)
    direct = figures["direct"]
    print(
        f"Python {sys.version.split()[0]}, {n} conversations per configuration after {WARMUP} "
        "warm-ups, instructions counted by callgrind (user space, every thread)"
    )
    print("| configuration | instructions per conversation | / direct |")
    print("|---|---|---|")
    for name, value in figures.items():
        print(f"| {name} | {value / 1e6:.2f} M | {value / direct:.2f} |")
    print()
    print("Targets (instructions; CPU seconds: bench_daemon)")
    print("| figure | value | target | |")
    print("|---|---|---|---|")
    for name, target in (("daemon, SQLite file", 1.5), ("daemon, :memory:", 1.3)):
        ratio = figures[name] / direct
        verdict = "PASS" if ratio <= target else "FAIL"
        print(f"| {name} / direct | {ratio:.2f} | <= {target} | {verdict} |")
    floor = responses["requests"]
    ratio = responses["bridge"] / floor
    print(
        f"| Responses: `Bridge.ask` / hand-written `requests` loop "
        f"({responses['bridge'] / 1e6:.2f} M / {floor / 1e6:.2f} M; the adapter driven by hand "
        f"{responses['adapter'] / floor:.2f}) | {ratio:.2f} | <= 1.1 | "
        f"{'PASS' if ratio <= 1.1 else 'FAIL'} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
