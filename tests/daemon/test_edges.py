"""The daemon's edges: shutdown past the grace, platform limits, bad API keys, HEAD probes.

Real daemon processes (SIGTERM for real), and the app in-process on a loopback port where a
test needs to reach inside (an OpenAI-compatible platform, the draining flag).
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from typer.testing import CliRunner

from bridge._serve import ServerHandle, serve_in_thread
from bridge.cli import app as cli
from bridge.daemon.app import create_app
from bridge.daemon.settings import load_settings
from bridge.emulator import Emulator
from bridge.journal import SQLiteJournal
from bridge.platforms.base import NO_LIMITS, LimitViolation, PlatformLimits, limits_of
from bridge.platforms.openai_chat import OpenAIChatPlatform
from tests.daemon.conftest import DaemonProcess, executions, start_daemon, wait_for
from tests.platforms.openai_fakes import Reply, ScriptedServer, text_stream


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each event of an SSE body (comments skipped)."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and ": " in line[:8]
        )
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


# --- shutdown past the grace ----------------------------------------------------------------------


def test_runs_past_the_grace_get_a_json_503_and_sse_failed_done(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    blocks = [tools_dir / "block-get_weather", tools_dir / "block-lookup"]
    for block in blocks:
        block.touch()
    db = tmp_path / "journal.db"
    daemon = start_daemon(emulator, tools_dir, db, "--grace", "1")
    answers: dict[str, Any] = {}

    def keep(name: str, fn: Any, *args: Any, **kwargs: Any) -> threading.Thread:
        thread = threading.Thread(target=lambda: answers.update({name: fn(*args, **kwargs)}))
        thread.start()
        return thread

    try:
        waiting = daemon.new_conversation()
        streamed = daemon.new_conversation()
        threads = [
            keep("json", daemon.ask, waiting, "weather in Paris"),
            keep("sse", daemon.ask, streamed, "lookup k1", stream=True),
        ]
        wait_for(
            lambda: {"get_weather Paris", "lookup k1"} <= set(executions(tools_dir)),
            "both tools to start",
        )
        follower = daemon.request("GET", f"/v1/conversations/{waiting}/events", stream=True)
        chunks = follower.iter_content(chunk_size=None, decode_unicode=True)
        first = next(chunks)  # the run's history so far: the follower is connected
        threads.append(keep("follower", lambda: first + "".join(chunks)))
        daemon.proc.send_signal(signal.SIGTERM)
        code = daemon.wait_exit()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        for block in blocks:
            block.unlink(missing_ok=True)
        daemon.stop()
    assert code == 0, daemon.log

    refused = answers["json"]
    assert refused.status_code == 503, refused.text
    assert refused.headers["content-type"] == "application/json"
    error = refused.json()["error"]
    assert error["code"] == "shutting_down"
    assert "the message is kept in the journal and is resumed by the next start" in error["message"]
    assert error["request_id"] == refused.headers["x-request-id"]

    for name in ("sse", "follower"):
        body = answers[name]
        events = sse_events(body if isinstance(body, str) else body.text)
        assert [e for e, _ in events[-2:]] == ["failed", "done"], (name, events)
        failed, done = events[-2][1], events[-1][1]
        assert failed["code"] == "shutting_down"
        assert done["status"] == "failed" and done["error"]["code"] == "shutting_down"
    assert "Traceback" not in daemon.log
    assert "Internal Server Error" not in daemon.log and "Cancel" not in daemon.log

    journal = SQLiteJournal(str(db))
    try:
        left = {cid: journal.messages(cid)[-1].status for cid in (waiting, streamed)}
    finally:
        journal.close()
    assert left == {waiting: "running", streamed: "running"}, "left for recovery, not failed"

    again = start_daemon(emulator, tools_dir, db)
    try:
        for cid in (waiting, streamed):
            wait_for(
                lambda cid=cid: (
                    again.request("GET", f"/v1/conversations/{cid}").json()["messages"][-1][
                        "status"
                    ]
                    != "running"
                ),
                "the message to be recovered",
            )
        assert again.ask(waiting, "weather in Tokyo").json()["answer"] == "Tokyo: 22 degrees"
    finally:
        again.stop()


# --- platform limits ------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "status"), [(5, 422), (6, 201), (64, 201), (65, 422)])
def test_appbuilder_end_user_id_length(daemon: DaemonProcess, size: int, status: int) -> None:
    response = daemon.request("POST", "/v1/conversations", json={"end_user_id": "u" * size})
    assert response.status_code == status, response.text
    if status == 422:
        error = response.json()["error"]
        assert error["code"] == "platform_limit"
        assert error["details"] == {
            "field": "end_user_id",
            "limit": "6 to 64 characters",
            "actual": size,
        }
        assert error["message"] == (
            f"end_user_id has {size} characters; the appbuilder platform accepts 6 to 64 characters"
        )


def test_appbuilder_query_length(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    too_long = daemon.ask(cid, "天" * 2001)
    assert too_long.status_code == 422, too_long.text
    error = too_long.json()["error"]
    assert error["code"] == "platform_limit"
    assert error["details"] == {
        "field": "query",
        "limit": "at most 2000 characters",
        "actual": 2001,
    }
    assert "query has 2001 characters" in error["message"]
    assert daemon.request("GET", f"/v1/conversations/{cid}").json()["messages"] == []
    at_limit = daemon.ask(cid, "weather in Paris " + "x" * (2000 - 17))
    assert at_limit.status_code == 200, at_limit.text


def test_platform_limits_rules() -> None:
    limits = PlatformLimits(max_query_chars=3, end_user_id_min_chars=2)
    assert limits.check(query="abc", end_user_id="ab") == []
    assert limits.check(query="abcd", end_user_id="a") == [
        LimitViolation("query", "at most 3 characters", 4),
        LimitViolation("end_user_id", "at least 2 characters", 1),
    ]
    assert NO_LIMITS.check(query="x" * 100_000, end_user_id="") == []
    assert limits_of(object()) == NO_LIMITS, "an adapter without limits has none"


@pytest.fixture(scope="module")
def openai_daemon(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[ScriptedServer, ServerHandle, Any]]:
    """The daemon app in-process against a scripted OpenAI-compatible server."""
    tools = tmp_path_factory.mktemp("edge-tools") / "edge_tools.py"
    tools.write_text(
        "from bridge import manifest\n\n"
        "@manifest(description='Say hello.')\n"
        "def hello(name: str) -> str:\n"
        "    return f'hello {name}'\n",
        encoding="utf-8",
    )
    with ScriptedServer().running() as llm:
        settings = load_settings(
            {
                "platform": "openai",
                "base_url": llm.base_url,
                "model": "m",
                "db": ":memory:",
                "tools": [str(tools)],  # /readyz wants tools
            },
            env={},
        )
        app = create_app(settings)
        with serve_in_thread(app) as handle:
            yield llm, handle, app


def test_openai_has_no_query_or_end_user_limits(
    openai_daemon: tuple[ScriptedServer, ServerHandle, Any],
) -> None:
    llm, handle, app = openai_daemon
    assert limits_of(app.state.service.platform) == NO_LIMITS
    assert limits_of(OpenAIChatPlatform(base_url=llm.base_url, model="m")) == NO_LIMITS
    created = requests.post(
        handle.base_url + "/v1/conversations", json={"end_user_id": "ab"}, timeout=30
    )
    assert created.status_code == 201, created.text
    cid = created.json()["conversation_id"]
    llm.script(Reply(stream=text_stream("long query read")))
    answer = requests.post(
        handle.base_url + f"/v1/conversations/{cid}/messages",
        json={"query": "q" * 5000},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["answer"] == "long query read"


# --- HEAD probes and readiness while draining -----------------------------------------------------


@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_head_answers_like_get(daemon: DaemonProcess, path: str) -> None:
    got = daemon.request("GET", path)
    head = daemon.request("HEAD", path)
    assert (head.status_code, got.status_code) == (200, 200)
    assert head.content == b"" and got.content
    assert head.headers["content-type"] == got.headers["content-type"] == "application/json"
    if path == "/healthz":
        assert head.headers["content-length"] == got.headers["content-length"]


def test_readyz_is_503_while_draining(
    openai_daemon: tuple[ScriptedServer, ServerHandle, Any],
) -> None:
    _, handle, app = openai_daemon
    assert requests.get(handle.base_url + "/readyz", timeout=30).status_code == 200
    app.state.service.begin_drain()  # what SIGTERM does first; the server itself keeps going
    got = requests.get(handle.base_url + "/readyz", timeout=30)
    head = requests.head(handle.base_url + "/readyz", timeout=30)
    assert got.status_code == head.status_code == 503
    assert got.json()["error"]["code"] == "shutting_down"
    assert head.content == b"" and head.headers["content-type"] == "application/json"
    assert requests.head(handle.base_url + "/healthz", timeout=30).status_code == 200


# --- API keys refused at start --------------------------------------------------------------------

KEY = "k" * 24


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--api-key", ""], {}, "empty or only whitespace; give a key of at least 16"),
        (["--api-key", "   "], {}, "empty or only whitespace"),
        (["--api-key", f" {KEY}"], {}, "has leading or trailing whitespace"),
        (["--api-key", f"{KEY}\n"], {}, "has leading or trailing whitespace"),
        (
            [],
            {"TOOLBRIDGE_API_KEY": ""},
            "or none at all to serve loopback without one (from TOOLBRIDGE_API_KEY)",
        ),
        ([], {"TOOLBRIDGE_API_KEY": " \t"}, "(from TOOLBRIDGE_API_KEY)"),
        ([], {"TOOLBRIDGE_API_KEY": f"{KEY} "}, "whitespace (a newline from a file"),
        # No client can send these in a header: the daemon would answer every request 401.
        (["--api-key", f"{KEY}\n{KEY}"], {}, "character 25 is U+000A"),
        (["--api-key", f"{KEY}\x01{KEY}"], {}, "character 25 is U+0001"),
        (["--api-key", f"{KEY}\u043a{KEY}"], {}, "only printable ASCII characters"),
    ],
)
def test_blank_or_padded_api_keys_are_refused_at_start(
    args: list[str], env: dict[str, str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TOOLBRIDGE_API_KEY", raising=False)
    monkeypatch.delenv("TOOLBRIDGE_CONFIG", raising=False)
    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--db", ":memory:", *args], env=env)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.stderr.split()), result.stderr
    assert KEY not in result.stderr
