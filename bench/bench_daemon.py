"""The daemon under load: throughput, added latency over the loop alone, peak RSS.

Workload: C concurrent clients; each opens a conversation and asks one question that takes one
tool round ("weather in Paris": query -> interrupt -> local tool -> submit -> answer), twice.
The same workload runs two ways against one emulator process (``toolbridge emulator``):

- direct: `Bridge` in this process, one thread per client (the loop alone);
- daemon: ``toolbridge serve`` as its own process (``--workers C``), clients over HTTP
  (``POST /v1/conversations`` then ``POST .../messages``), journal in a SQLite file (and,
  for comparison, ``--db :memory:``).

Added latency = daemon percentile - direct percentile of the per-conversation wall time.
Peak RSS is the daemon process's VmHWM from /proc. Timings go to stdout; nothing is asserted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import requests
from requests.adapters import HTTPAdapter

from bridge import Bridge, manifest
from bridge.platforms.appbuilder import AppBuilderPlatform

__all__ = ["main"]

PER_CLIENT = 2
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


def _start(argv: list[str], marker: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        argv,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if marker in line:
            url = line.split(marker, 1)[1].split()[0].strip().strip('"')
            # Keep reading, or a chatty process blocks on a full pipe.
            threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
            return proc, url
    raise RuntimeError(f"{argv[3]} did not start")


def _drain(stream: object) -> None:
    for _ in stream:  # type: ignore[attr-defined]
        pass


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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


def _direct(emulator: dict[str, str], clients: int) -> tuple[list[float], float]:
    session = requests.Session()
    session.mount("http://", HTTPAdapter(pool_maxsize=clients))
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

        return _drive(clients, one)


def _daemon(
    emulator: dict[str, str], clients: int, folder: Path, db: str
) -> tuple[list[float], float, float]:
    argv = [sys.executable, "-m", "bridge", "serve", "--tools", str(folder / "tools.py")]
    argv += ["--port", "0", "--db", db, "--workers", str(clients), "--queue-limit", "0"]
    proc, url = _start(argv, "listening on ", emulator)
    local = threading.local()

    def one() -> None:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        created = session.post(url + "/v1/conversations", json={}, timeout=120)
        cid = created.json()["conversation_id"]
        reply = session.post(
            f"{url}/v1/conversations/{cid}/messages",
            json={"query": "weather in Paris"},
            timeout=120,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["answer"] == "Paris: 18 degrees"

    try:
        latencies, wall = _drive(clients, one)
        status = Path(f"/proc/{proc.pid}/status").read_text(encoding="utf-8")
        peak_kib = next(int(line.split()[1]) for line in status.splitlines() if "VmHWM" in line)
    finally:
        _stop(proc)
    return latencies, wall, peak_kib / 1024


def main() -> int:
    """Print one table row per concurrency level."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "tools.py").write_text(TOOLS, encoding="utf-8")
        (folder / "scenario.json").write_text(json.dumps(SCENARIO), encoding="utf-8")
        argv = [sys.executable, "-m", "bridge", "emulator", "--port", "0"]
        emu, gateway = _start(
            [*argv, "--scenario", str(folder / "scenario.json")], "export GATEWAY_URL_V2=", {}
        )
        try:
            emulator = {
                "GATEWAY_URL_V2": gateway,
                "APPBUILDER_TOKEN": "emulator-token",
                "APPBUILDER_APP_ID": "emulator-app",
            }
            print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
                  f"{PER_CLIENT} conversations per client, one tool round each")  # fmt: skip
            print("| clients | journal | direct conv/s | daemon conv/s | direct p50 / p99 | "
                  "daemon p50 / p99 | added p50 / p99 | daemon peak RSS |")  # fmt: skip
            print("|---|---|---|---|---|---|---|---|")
            for clients, db in ((50, "file"), (200, "file"), (200, ":memory:")):
                direct, direct_wall = _direct(emulator, clients)
                path = str(folder / f"journal-{clients}.db") if db == "file" else db
                daemon, daemon_wall, rss = _daemon(emulator, clients, folder, path)
                n = len(direct)
                d50, d99 = _percentile(direct, 50) * 1e3, _percentile(direct, 99) * 1e3
                s50, s99 = _percentile(daemon, 50) * 1e3, _percentile(daemon, 99) * 1e3
                print(
                    f"| {clients} | {'SQLite file' if db == 'file' else db} "
                    f"| {n / direct_wall:.0f} | {len(daemon) / daemon_wall:.0f} "
                    f"| {d50:.0f} / {d99:.0f} ms | {s50:.0f} / {s99:.0f} ms "
                    f"| {s50 - d50:+.0f} / {s99 - d99:+.0f} ms | {rss:.0f} MiB |",
                    flush=True,
                )
        finally:
            _stop(emu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
