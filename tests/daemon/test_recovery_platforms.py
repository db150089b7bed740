"""A conversation survives `kill -9` of the daemon on every platform, with its history.

One conversation per test: message 1 runs a tool and is answered; message 2 asks for
`charge 3` and the daemon is killed right after a journal step of that round ("received":
the call never ran; "submitting": it ran, its output was about to be posted). A second daemon
on the same journal must finish message 2 (the call run exactly once, its output delivered),
then answer message 3 in the same platform conversation, the platform seeing the whole
history: the OpenAI-compatible server is sent every message again (the history lived in the
first daemon's memory and came back from the journal), the emulators keep it server-side.

Parametrised over the platforms: those with an emulator protocol (`PROTOCOLS`) run against
it; the OpenAI-compatible one against a scripted server. A platform the daemon does not take
yet (`toolbridge serve --platform`) is skipped with the reason.

The second test keeps the first daemon running and lets a second process on the same
(PostgreSQL: a SQLite file has one owning daemon) journal continue the conversation, then hands
it back: each takes the other's turns.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bridge.daemon.settings import DaemonSettings
from bridge.emulator import Emulator
from bridge.emulator.protocols import PROTOCOLS
from tests.daemon.conftest import TOOLS, DaemonProcess, executions, wait_for
from tests.daemon.inprocess import InProcessDaemon, marker_of
from tests.daemon.test_crash_matrix import _in_background
from tests.platforms.openai_fakes import Reply, ScriptedServer, text_stream, tool_call_stream
from tests.support.postgres import PostgresServer

PLATFORMS = ("openai", "appbuilder", "coze", "responses")


def _rule(match: str, tool: str, arguments: dict[str, str], answer: str) -> dict[str, Any]:
    return {"match": match, "steps": [{"tool": tool, "arguments": arguments}], "answer": answer}


SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 4},
    "rules": [
        _rule(r"charge (?P<n>\d+)", "charge", {"amount": "{n}"}, "result: {outputs.charge}"),
        _rule(r"lookup (?P<k>\w+)", "lookup", {"key": "{k}"}, "result: {outputs.lookup}"),
    ],
}
COZE_BOT: dict[str, Any] = {
    # The Coze bot's local plugin (Coze takes no tool list per request); only the coze
    # protocol reads this section.
    "coze": {
        "plugins": [
            {
                "name": "charge",
                "parameters": {
                    "type": "object",
                    "properties": {"amount": {"type": "integer"}},
                    "required": ["amount"],
                },
            },
            {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"key": {"type": "string"}},
                    "required": ["key"],
                },
            },
        ]
    },
}


@dataclass
class Backend:
    """The platform's far side for one test: an emulator, or the scripted OpenAI server."""

    platform: str
    argv: list[str]
    env: dict[str, str]
    emulator: Emulator | None = None
    llm: ScriptedServer | None = None
    script: Callable[[list[Reply]], None] = field(default=lambda replies: None)
    """Answers for the OpenAI server's next requests (the emulators plan their own)."""


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    name: str = request.param
    _skip_unless_served(name)
    with ExitStack() as stack:
        if name == "openai":
            llm = stack.enter_context(ScriptedServer().running())
            argv = ["--platform", "openai", "--base-url", llm.base_url, "--model", "m"]
            yield Backend(name, argv, {}, llm=llm, script=lambda replies: llm.script(*replies))
            return
        scenario = {**SCENARIO, **COZE_BOT} if name == "coze" else SCENARIO
        emulator = stack.enter_context(Emulator(protocol=name, scenario=scenario))
        argv = [] if name == "appbuilder" else ["--platform", name]
        yield Backend(name, argv, emulator.env(), emulator=emulator)


def _skip_unless_served(name: str) -> None:
    if name != "openai" and name not in PROTOCOLS:
        pytest.skip(f"no emulator protocol {name!r} yet (bridge/emulator/protocols.py)")
    try:
        DaemonSettings(platform=name)  # type: ignore[arg-type]
    except ValidationError:
        pytest.skip(f"the daemon does not take --platform {name} yet")


def _daemon(
    backend: Backend,
    tmp_path: Path,
    env: dict[str, str] | None = None,
    *,
    db: str | None = None,
    replica: str | None = None,
) -> DaemonProcess:
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    argv = ["--tools", str(tools / "daemon_tools.py"), "--port", "0"]
    argv += ["--db", db or str(tmp_path / "journal.db"), *backend.argv]
    argv += ["--replica-id", replica] if replica else []
    return DaemonProcess(argv, env={**backend.env, "TB_TOOLS_DIR": str(tools), **(env or {})})


def _ask(daemon: DaemonProcess, cid: str, query: str) -> str:
    reply = daemon.ask(cid, query)
    assert reply.status_code == 200, reply.text + "\n" + daemon.log
    return str(reply.json()["answer"])


def _detail(daemon: DaemonProcess, cid: str) -> dict[str, Any]:
    detail: dict[str, Any] = daemon.request("GET", f"/v1/conversations/{cid}").json()
    return detail


def _check_history(backend: Backend, cid: str, queries: list[str]) -> None:
    """The platform saw every query of the conversation, in one platform conversation."""
    if backend.llm is not None:
        # Stateless: the last request carries the whole history.
        sent = backend.llm.bodies[-1]["messages"]
        assert [m["content"] for m in sent if m["role"] == "user"] == queries, sent
        outputs = [m["content"] for m in sent if m["role"] == "tool"]
        assert "value of k1" in outputs[0] and "charged 3" in outputs[1], outputs
        return
    emulator = backend.emulator
    assert emulator is not None
    if backend.platform == "responses":
        # The conversation is a chain of stored responses: the last question continues it
        # (the requests after it carry function_call_output items).
        posts = [r.json for r in emulator.requests if r.path.endswith("/responses") and r.json]
        asked = [p for p in posts if p["input"][-1].get("type") == "message"]
        assert asked[-1]["input"][-1]["content"] == queries[-1], asked[-1]
        assert asked[-1].get("previous_response_id"), asked[-1]
        return
    asked = [m.query for m in emulator.conversation(cid).messages]
    assert asked == queries, asked


# Answers of the scripted OpenAI server, by message (the emulators plan their own).
LOOKUP_K1 = [Reply(stream=tool_call_stream("call_k1", "lookup", {"key": "k1"}))]
LOOKUP_K1 += [Reply(stream=text_stream("result: value of k1"))]
CHARGE_3 = [Reply(stream=tool_call_stream("call_c3", "charge", {"amount": 3}))]
CHARGED = [Reply(stream=text_stream("result: charged 3"))]
LOOKUP_K2 = [Reply(stream=tool_call_stream("call_k2", "lookup", {"key": "k2"}))]
LOOKUP_K2 += [Reply(stream=text_stream("result: value of k2"))]


STEPS = ("received", "started", "finished", "submitting", "submitted")
"""The journal steps of a tool call, each a failpoint the daemon is stopped at."""


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., InProcessDaemon]]:
    """Start in-process daemons on a backend; each is stopped (or buried) after the test."""
    started: list[InProcessDaemon] = []

    def start(backend: Backend, tmp_path: Path, failpoint: str | None = None) -> InProcessDaemon:
        tools = tmp_path / "tools"
        tools.mkdir(exist_ok=True)
        (tools / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
        argv = ["--tools", str(tools / "daemon_tools.py"), "--db", str(tmp_path / "journal.db")]
        env = {**backend.env, "TB_TOOLS_DIR": str(tools)}
        daemon = InProcessDaemon(
            [*argv, *backend.argv], env=env, monkeypatch=monkeypatch, failpoint=failpoint
        )
        started.append(daemon)
        return daemon

    yield start
    for daemon in reversed(started):
        daemon.bury()


def _crash_cases() -> list[Any]:
    return [
        pytest.param(platform, step, id=f"{platform}-{step}")
        for platform in PLATFORMS
        for step in STEPS
    ]


@pytest.mark.parametrize(("backend", "step"), _crash_cases(), indirect=["backend"])
def test_a_crash_mid_conversation_then_the_conversation_goes_on(
    backend: Backend,
    step: str,
    tmp_path: Path,
    in_process: Callable[..., InProcessDaemon],
) -> None:
    """Stopped dead right after each journal step of message 2's call, in process (the
    daemon's failpoint, then no more journal writes); a real `kill -9` at each of these steps
    is `test_crash_matrix.py`'s, on AppBuilder."""
    backend.script(LOOKUP_K1)
    first = in_process(backend, tmp_path)
    cid = first.new_conversation()
    assert _ask(first, cid, "lookup k1") == "result: value of k1"
    first.stop()

    backend.script(CHARGE_3)
    failpoint, marker = marker_of(tmp_path, step)
    killed = in_process(backend, tmp_path, failpoint)
    worker = _in_background(lambda: killed.ask(cid, "charge 3"))
    wait_for(lambda: marker.exists() or not worker.is_alive(), f"the {step!r} step")
    assert marker.exists(), killed.log
    killed.crash()
    ran = step in ("finished", "submitting", "submitted")  # "started" is held before it runs
    assert executions(tmp_path / "tools").count("charge 3") == ran

    # Once the platform took the output ("submitted"), its answer went to a stream nobody
    # read: the message ends interrupted and the platform has nothing more to say about it.
    answered = step != "submitted"
    backend.script([*CHARGED, *LOOKUP_K2] if answered else LOOKUP_K2)
    second = in_process(backend, tmp_path)

    def ended() -> bool:
        return all(m["status"] != "running" for m in _detail(second, cid)["messages"])

    wait_for(ended, "the interrupted message to end", timeout=60)
    interrupted = _detail(second, cid)["messages"][1]
    if step == "submitted":
        assert (interrupted["status"], interrupted["error_code"]) == ("failed", "interrupted")
    elif step == "started":
        # Not idempotent and maybe run: never run again, the platform is told it was cut.
        assert interrupted["status"] == "finished", interrupted
    else:
        assert (interrupted["status"], interrupted["answer"]) == (
            "finished",
            "result: charged 3",
        ), interrupted
    assert _ask(second, cid, "lookup k2") == "result: value of k2", second.log
    detail = _detail(second, cid)
    second.stop()
    # Run once in all, or never when it may have run ("started": it had not, here).
    assert executions(tmp_path / "tools").count("charge 3") == (step != "started")
    # A Responses chain cannot go on from the response that asked for the outputs once they
    # went with another request (the one whose answer nobody read): a new chain takes over.
    replaced = (backend.platform, step) == ("responses", "submitted")
    assert len(detail["platform_conversations"]) == 1 + replaced, detail["platform_conversations"]
    assert [m["status"] for m in detail["messages"]][::2] == ["finished"] * 2
    if step not in ("started", "submitted"):
        _check_history(backend, cid, ["lookup k1", "charge 3", "lookup k2"])
    elif (backend.platform, step) == ("openai", "submitted"):
        # A client-side history holds the outputs once submitted: the next question follows
        # them, the answer that was lost being the only gap.
        assert backend.llm is not None
        sent = backend.llm.bodies[-1]["messages"]
        outputs = [m["content"] for m in sent if m["role"] == "tool"]
        assert any("charged 3" in output for output in outputs), sent


@pytest.mark.parametrize("backend", PLATFORMS, indirect=True)
def test_a_second_daemon_on_the_same_journal_continues_the_conversation(
    backend: Backend, tmp_path: Path, postgres: PostgresServer
) -> None:
    # Two live daemons share a journal only on PostgreSQL (a SQLite file has one owner).
    dsn = postgres.create_database(f"p_{uuid.uuid4().hex[:12]}")
    first = _daemon(backend, tmp_path, db=dsn, replica="first")
    second = _daemon(backend, tmp_path, db=dsn, replica="second")
    try:
        backend.script(LOOKUP_K1)
        cid = first.new_conversation()
        assert _ask(first, cid, "lookup k1") == "result: value of k1"
        backend.script([*CHARGE_3, *CHARGED])
        assert _ask(second, cid, "charge 3") == "result: charged 3"
        backend.script(LOOKUP_K2)
        # Back to the first: it held an older history of its own, and takes the second's.
        assert _ask(first, cid, "lookup k2") == "result: value of k2"
        detail = _detail(second, cid)
    finally:
        first.stop()
        second.stop()
    assert len(detail["platform_conversations"]) == 1, detail["platform_conversations"]
    _check_history(backend, cid, ["lookup k1", "charge 3", "lookup k2"])
