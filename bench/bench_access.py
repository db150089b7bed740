"""What the door costs per tool call: a Cedar policy decision and two audit appends (the
policy's decision and the call's outcome), against a two-turn tool conversation's CPU.

Each variant runs `Bridge.ask` on one embedded AppBuilder emulator (a conversation with one
tool call), journaled as the daemon journals it, in its own subprocess measuring its own
process CPU (every thread: the journal's writer included); the variants take turns for
several rounds so machine noise hits all alike:

- ``plain``: a journal, no policy, no audit (as before the door existed);
- ``door``: the same, plus a Cedar policy (`examples/policies/demo.cedar`) and the audit
  record in the same journal, as a named caller.

Both on a SQLite file journal (the daemon's default) and on an in-memory journal (the cheapest
conversation, so the largest share). Then the daemon (``toolbridge serve`` on a SQLite file
journal, one client sending conversations one after another): without credentials (nobody is
asked, nothing recorded) against a caller file and the policy (every request authenticated,
every call decided, the message, the decision and the outcome recorded), counting the daemon
process's CPU per conversation. Then, alone in one process: the CPU of one policy decision and
of one audit append.

Target: the door adds under 5 % of a conversation's CPU. Run: `.venv/bin/python
bench/bench_access.py` (or `make bench`); `--conversations N`, `--rounds N`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _two_turns import EXPECTED, QUERY, SCENARIO, thread_timed, weather_tool

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "examples" / "policies" / "demo.cedar"
TARGET = 0.05
WARMUP = 5


def _worker(spec: dict[str, Any]) -> dict[str, float]:
    from bridge import AppBuilderPlatform, Bridge
    from bridge.access import AuditLog, Principal
    from bridge.access.policy import Policy
    from bridge.journal import MemoryJournal, SQLiteJournal

    get_weather = weather_tool()

    spent = _account() if spec.get("account") else None
    journal = SQLiteJournal(spec["db"]) if spec["db"] else MemoryJournal()
    door: dict[str, Any] = {}
    if spec["door"]:
        door = {
            "policy": Policy.from_file(POLICY),
            "audit": AuditLog(journal),
            "caller": Principal("alice", roles=frozenset({"staff"})),
        }
    platform = AppBuilderPlatform(
        app_id=spec["app_id"], token=spec["token"], base_url=spec["base_url"]
    )
    with Bridge(platform, [get_weather], journal=journal, **door) as bridge:
        for n in range(WARMUP):
            bridge.ask(QUERY.format(city=f"W{n}"))
        start = time.process_time()
        for n in range(spec["n"]):
            # The same city every time, or a new one (a call no decision is remembered for).
            city = f"C{n}" if spec["distinct"] else "Paris"
            answer = bridge.ask(QUERY.format(city=city)).answer
            if answer != EXPECTED.format(city=city):
                raise SystemExit(f"unexpected answer: {answer!r}")
        cpu = (time.process_time() - start) / spec["n"]
    journal.close()
    per = {key: value / (spec["n"] + WARMUP) for key, value in (spent or {}).items()}
    return {"cpu": cpu, **per}


def _account() -> dict[str, float]:
    """Thread CPU spent in each part of the door, whichever thread runs it (the loop's, the
    dispatcher's, the journal's writer): what the end-to-end difference is made of."""
    from bridge.access.audit import AuditLog
    from bridge.access.policy import Policy
    from bridge.journal._sql import SQLJournal

    spent: dict[str, float] = {"decide": 0.0, "entry": 0.0, "link": 0.0}

    thread_timed(spent, Policy, "decide", "decide")
    thread_timed(spent, AuditLog, "_body", "entry")  # masking, hashing the arguments
    # the chain: tail, entry hash, insert (on the writer's thread)
    thread_timed(spent, SQLJournal, "_link", "link")
    return spent


def _micro(n: int, db: str) -> dict[str, float]:
    """CPU of one decision and of one audit append on a SQLite journal, alone."""
    from bridge.access import AuditEvent, AuditLog, CallFacts, Principal
    from bridge.access.policy import Policy
    from bridge.journal import SQLiteJournal

    policy = Policy.from_file(POLICY)
    alice = Principal("alice", roles=frozenset({"staff"}))
    facts = CallFacts(tool="book_meeting_room", arguments={"city": "北京", "attendee": "张伟"})
    for _ in range(50):
        policy.decide(alice, facts)
    start = time.process_time()
    for _ in range(n):
        policy.decide(alice, facts)
    decide = (time.process_time() - start) / n
    start = time.process_time()
    for i in range(n):  # new arguments every time: nothing remembered
        policy.decide(alice, CallFacts(tool="book_meeting_room", arguments={"city": f"c{i}"}))
    fresh = (time.process_time() - start) / n
    journal = SQLiteJournal(db)
    audit = AuditLog(journal)
    event = AuditEvent(
        kind="tool",
        outcome="ok",
        caller="alice",
        via="key",
        conversation_id="c",
        call_id="call",
        tool="get_weather",
        arguments={"city": "Paris"},
    )
    for _ in range(20):
        audit.record(event)
    start = time.process_time()
    for _ in range(n):
        audit.record(event)
    append = (time.process_time() - start) / n
    journal.close()
    return {"decide": decide, "fresh": fresh, "append": append}


CALLERS = """\
[roles.staff]
permissions = ["converse"]
tools = ["*"]

[callers.alice]
key = "${BENCH_ALICE_KEY}"
roles = ["staff"]
"""
KEY = "bench-alice-key-0123456789"
TOOLS = """\
from bridge import manifest


@manifest(description="Current weather of a city")
def get_weather(city: str) -> str:
    \"\"\"Weather.

    Args:
        city: City name
    \"\"\"
    return "sunny, 21 C"
"""


def _daemon_rounds(emulator: Any, folder: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """Daemon CPU per conversation, plain and behind the door, taking turns."""
    import requests
    from _daemons import Process, cpu_seconds

    (folder / "tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "callers.toml").write_text(CALLERS, encoding="utf-8")
    env = {
        "GATEWAY_URL_V2": emulator.base_url,
        "APPBUILDER_TOKEN": emulator.token,
        "APPBUILDER_APP_ID": emulator.app_id,
        "BENCH_ALICE_KEY": KEY,
    }
    cpu: dict[str, list[float]] = {"plain": [], "door": []}
    for turn in range(args.rounds):
        for variant in ("plain", "door"):
            command = ["serve", "--tools", str(folder / "tools.py"), "--port", "0"]
            command += ["--db", str(folder / f"daemon-{variant}-{turn}.db")]
            headers = {}
            if variant == "door":
                command += ["--callers", str(folder / "callers.toml"), "--policy", str(POLICY)]
                headers = {"Authorization": f"Bearer {KEY}"}
            daemon = Process(command, "listening on ", env)
            try:
                session = requests.Session()
                session.headers.update(headers)

                for n in range(WARMUP):
                    _daemon_conversation(session, daemon.url, f"W{n}")
                start = cpu_seconds([daemon.proc.pid])
                for n in range(args.conversations):
                    _daemon_conversation(session, daemon.url, f"C{n}")
                cpu[variant].append((cpu_seconds([daemon.proc.pid]) - start) / args.conversations)
            finally:
                daemon.stop()
    return cpu


def _report(label: str, cpu: dict[str, list[float]]) -> bool:
    """Print one variant pair's medians and the door's share; whether it meets the target."""
    shares = [d / p - 1 for d, p in zip(cpu["door"], cpu["plain"], strict=True)]
    share = statistics.median(shares)
    ok = share < TARGET
    print(
        f"  {label}: plain {statistics.median(cpu['plain']) * 1000:.2f} ms, behind the door "
        f"{statistics.median(cpu['door']) * 1000:.2f} ms: {100 * share:+.1f} % "
        f"(target < {100 * TARGET:.0f} %: {'met' if ok else 'NOT met'}); rounds "
        f"{100 * min(shares):+.1f} to {100 * max(shares):+.1f} %"
    )
    return ok


def _daemon_conversation(session: Any, url: str, city: str) -> None:
    created = session.post(url + "/v1/conversations", json={}, timeout=60)
    created.raise_for_status()
    cid = created.json()["conversation_id"]
    reply = session.post(
        f"{url}/v1/conversations/{cid}/messages",
        json={"query": QUERY.format(city=city)},
        timeout=60,
    )
    reply.raise_for_status()
    if reply.json()["answer"] != EXPECTED.format(city=city):
        raise SystemExit(f"unexpected answer: {reply.json()}")


def _run_all(spec: dict[str, Any]) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _run(spec: dict[str, Any]) -> float:
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["cpu"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--only", action="append", choices=("library", "daemon"), help="Parts to run (all)."
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--micro", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.only = args.only or ["library", "daemon"]
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return 0
    if args.micro:
        print(json.dumps(_micro(args.micro, args.db)))
        return 0
    sys.path.insert(0, str(ROOT))
    from bridge.emulator import Emulator

    print(
        f"the door per tool call: {args.rounds} alternating rounds of {args.conversations} "
        "two-turn conversations per variant; process CPU per conversation (median of rounds)"
    )
    met = True
    with Emulator(scenario=SCENARIO, faults="") as emulator, tempfile.TemporaryDirectory() as tmp:
        base = {
            "app_id": emulator.app_id,
            "token": emulator.token,
            "base_url": emulator.base_url,
            "n": args.conversations,
        }
        parts = (
            ("sqlite", True, "Bridge.ask, SQLite file journal, new arguments every call"),
            ("sqlite", False, "Bridge.ask, SQLite file journal, the same call every time"),
            ("memory", True, "Bridge.ask, in-memory journal, new arguments every call"),
        )
        for store, distinct, label in parts if "library" in args.only else ():
            cpu: dict[str, list[float]] = {"plain": [], "door": []}
            for turn in range(args.rounds):
                for variant in ("plain", "door"):
                    db = str(Path(tmp) / f"{store}-{variant}-{turn}-{distinct}.db")
                    spec = {**base, "distinct": distinct, "door": variant == "door"}
                    cpu[variant].append(_run({**spec, "db": db if store == "sqlite" else ""}))
            met = _report(label, cpu) and met
        if "daemon" in args.only:
            label = "daemon process, SQLite file journal, new arguments every call"
            met = _report(label, _daemon_rounds(emulator, Path(tmp), args)) and met
        done = subprocess.run(
            [sys.executable, __file__, "--micro", "2000", "--db", str(Path(tmp) / "micro.db")],
            capture_output=True,
            text=True,
            timeout=900,
            check=True,
        )
        micro = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"  alone: one policy decision {micro['fresh'] * 1e6:.0f} µs CPU (remembered: "
            f"{micro['decide'] * 1e6:.0f} µs), one audit append on its own (SQLite, its own "
            f"commit) {micro['append'] * 1e6:.0f} µs CPU"
        )
        if "library" in args.only:
            spec = {**base, "distinct": True, "door": True, "account": True}
            parts = _run_all({**spec, "db": str(Path(tmp) / "account.db")})
            print(
                "  in a conversation (SQLite file, new arguments; thread CPU per conversation): "
                f"policy decision {parts['decide'] * 1e6:.0f} µs, audit entries (message, "
                f"decision, outcome) prepared {parts['entry'] * 1e6:.0f} µs and chained and "
                f"inserted {parts['link'] * 1e6:.0f} µs; of {parts['cpu'] * 1e3:.2f} ms"
            )
    del met  # a benchmark reports; it never fails a build on a figure
    return 0


if __name__ == "__main__":
    sys.exit(main())
