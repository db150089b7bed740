"""Streams that never end, on every platform of the registry: a server that sends only
``: ping`` keep-alives, one that streams text deltas without end, one that streams tool-call
arguments (or tool calls) without end. Each run must stop at its configured bound with an error
that names the limit and the setting that raises it, having read no more than the bound.

The server is a real loopback HTTP server speaking each platform's wire; every stream it sends
is capped (a number of frames, a stop flag at teardown), so a test can never hang. The limits
come from the environment (``TOOLBRIDGE_RUN_TIMEOUT``...), as the CLI and the daemon pass them.

A platform added to the registry fails here until it has a wire below and declares the limits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, MemoryJournal, Toolbox
from bridge.errors import StreamLimitError, StreamTimeoutError
from bridge.platforms.base import Platform
from bridge.platforms.registry import LIMIT_SETTINGS, PLATFORMS

CAP = 50_000
"""Frames a stream sends at most (text: ~1 KiB each, so ~50 MiB): far past every bound below."""
PING_CAP = 1_000
"""Keep-alives a stream sends at most, one every `PING_EVERY` seconds (~20 s in all)."""
PING_EVERY = 0.02
PIECE = "x" * 1024
LIMIT = 64 * 1024
"""The answer and arguments bound the tests set (characters)."""
MAX_CALLS = 8

_PLATFORM_VARIABLES = ("APPBUILDER_", "GATEWAY_", "OPENAI_", "COZE_", "TOOLBRIDGE_")
"""The environment a `toolbridge run` subprocess does not inherit (only the flags count)."""

Frames = Callable[[int], str] | None
"""Frame number -> one server-sent event (with its blank line); None: the head is the whole
stream (mode ``answer``, a normal run)."""


def _data(payload: dict[str, Any], event: str | None = None) -> str:
    head = f"event:{event}\n" if event else ""
    return f"{head}data:{json.dumps(payload)}\n\n"


# --- each platform's wire: what starts a stream, and the frames of each endless stream ---------


def _openai_frames(mode: str) -> tuple[list[str], Frames]:
    def chunk(delta: dict[str, Any]) -> str:
        return _data(
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta}],
            }
        )

    if mode == "answer":
        done = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        return [chunk({"content": "fine"}), _data(done), "data: [DONE]\n\n"], None
    if mode == "text":
        return [], lambda n: chunk({"content": PIECE})
    if mode == "arguments":
        first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
        return [chunk({"tool_calls": [first]})], lambda n: chunk(
            {"tool_calls": [{"index": 0, "function": {"arguments": PIECE}}]}
        )
    return [], lambda n: chunk(
        {
            "tool_calls": [
                {
                    "index": n,
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": "f", "arguments": "{}"},
                }
            ]
        }
    )


def _responses_frames(mode: str) -> tuple[list[str], Frames]:
    created = _data(
        {
            "type": "response.created",
            "response": {"id": "resp_1", "object": "response", "status": "in_progress"},
        }
    )

    def added(n: int) -> str:
        item = {"id": f"fc_{n}", "type": "function_call", "call_id": f"call_{n}", "name": "f"}
        return _data({"type": "response.output_item.added", "output_index": n, "item": item})

    if mode == "text":
        return [created], lambda n: _data(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": PIECE,
            }
        )
    if mode == "arguments":
        return [created, added(0)], lambda n: _data(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_0",
                "output_index": 0,
                "delta": PIECE,
            }
        )
    return [created], added


def _appbuilder_frames(mode: str) -> tuple[list[str], Frames]:
    def chunk(answer: str, events: list[dict[str, Any]]) -> str:
        return _data(
            {
                "request_id": "r1",
                "conversation_id": "conv-1",
                "message_id": "m1",
                "answer": answer,
                "is_completion": False,
                "content": events,
            }
        )

    def call(n: int, arguments: str) -> str:
        tool_call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "f", "arguments": arguments},
        }
        event = {
            "event_code": 0,
            "event_status": "interrupt",
            "event_type": "Interrupt",
            "content_type": "function_call",
            "outputs": {},
            "tool_calls": [tool_call],
        }
        return chunk("", [event])

    if mode == "text":
        return [], lambda n: chunk(PIECE, [])
    if mode == "arguments":
        return [], lambda n: call(n, json.dumps({"text": PIECE}))
    return [], lambda n: call(n, "{}")


def _coze_frames(mode: str) -> tuple[list[str], Frames]:
    chat = {"id": "ch1", "conversation_id": "7001", "bot_id": "1"}
    created = _data({**chat, "status": "created"}, "conversation.chat.created")

    def action(n: int, arguments: str) -> str:
        calls = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "f", "arguments": arguments},
            }
        ]
        required = {"type": "submit_tool_outputs", "submit_tool_outputs": {"tool_calls": calls}}
        return _data(
            {**chat, "status": "requires_action", "required_action": required},
            "conversation.chat.requires_action",
        )

    message = {
        "id": "m1",
        "conversation_id": "7001",
        "chat_id": "ch1",
        "role": "assistant",
        "type": "answer",
        "content": PIECE,
        "content_type": "text",
    }
    if mode == "answer":
        return [
            created,
            _data({**message, "content": "fine"}, "conversation.message.delta"),
            _data({**chat, "status": "completed"}, "conversation.chat.completed"),
            _data({}, "done"),
        ], None
    if mode == "text":
        return [created], lambda n: _data(message, "conversation.message.delta")
    if mode == "arguments":
        return [created], lambda n: action(n, json.dumps({"text": PIECE}))
    return [created], lambda n: action(n, "{}")


WIRES: dict[str, Callable[[str], tuple[list[str], Frames]]] = {
    "appbuilder": _appbuilder_frames,
    "openai": _openai_frames,
    "coze": _coze_frames,
    "responses": _responses_frames,
}
"""Each registry platform's endless streams; a new platform must add its own."""

_JSON_ANSWERS = {
    "/v2/app/conversation": {"request_id": "r0", "conversation_id": "conv-1"},
    "/v1/conversation/create": {"code": 0, "msg": "", "data": {"id": "7001"}},
    "/v3/chat/cancel": {"code": 0, "msg": "", "data": {"id": "ch1", "conversation_id": "7001"}},
}
_STREAMS = ("/v2/app/conversation/runs", "/v3/chat", "/v1/chat/completions", "/v1/responses")


class EndlessServer:
    """A loopback server answering each platform's stream request with an endless stream.

    `mode` is ``keepalive`` (only ``: ping`` comments), ``text``, ``arguments`` or ``calls``;
    `sent` counts the frames the last stream sent before the client hung up or the cap.
    """

    def __init__(self, platform: str, mode: str) -> None:
        self.platform = platform
        self.mode = mode
        self.sent = 0
        self.streams = 0
        self.paths: list[str] = []
        """The paths of the requests received, in order."""
        self.stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @contextmanager
    def running(self) -> Iterator[EndlessServer]:
        thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join(timeout=10)

    def frames(self) -> Iterator[str]:
        """The frames of one stream, capped."""
        if self.mode == "keepalive":
            head, _ = WIRES[self.platform]("text")
            yield from head[:1]
            for _ in range(PING_CAP):
                if self.stop.wait(PING_EVERY):
                    return
                yield ": ping\n\n"
            return
        head, frame = WIRES[self.platform](self.mode)
        yield from head
        for n in range(CAP if frame is not None else 0):
            if self.stop.is_set():
                return
            yield frame(n)  # type: ignore[misc]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?", 1)[0]
                server.paths.append(path)
                if path in _JSON_ANSWERS:
                    body = json.dumps(_JSON_ANSWERS[path]).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if path not in _STREAMS:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                server.streams += 1
                server.sent = 0
                try:
                    for frame in server.frames():
                        self.wfile.write(frame.encode())
                        self.wfile.flush()
                        server.sent += 1
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what the bounds are for

        return Handler


def _open(name: str, url: str) -> Platform:
    options: dict[str, dict[str, Any]] = {
        "appbuilder": {
            "token": "bce-v3/ALTAK-limits/0123456789abcdef",
            "app_id": "00000000-0000-0000-0000-000000000001",
            "base_url": url,
        },
        "openai": {"base_url": url + "/v1", "model": "m"},
        "coze": {"token": "pat_limits_0123456789", "bot_id": "1", "base_url": url},
        "responses": {"base_url": url + "/v1", "model": "m"},
    }
    return PLATFORMS[name].create(**options[name], max_retries=0)


def _run(platform: Platform) -> list[Any]:
    conversation = platform.create_conversation()
    return list(platform.start(conversation, "go on forever", tools=[]))


def _text_of(item: Any) -> str:
    """The answer text an item of `received` holds (an event, or an AppBuilder chunk)."""
    return str(getattr(item, "text", None) or getattr(item, "answer", None) or "")


@pytest.fixture(params=list(PLATFORMS))
def name(request: pytest.FixtureRequest) -> str:
    platform: str = request.param
    assert platform in WIRES, f"add the {platform} wire to WIRES: its streams must be bounded"
    return platform


def test_every_platform_declares_the_stream_limits() -> None:
    limits = {"run_timeout", "max_answer_chars", "max_arguments_chars", "max_tool_calls"}
    assert {setting.option for setting in LIMIT_SETTINGS} == limits
    for entry in PLATFORMS.values():
        assert limits <= set(entry.options), f"{entry.name} lacks the stream limits"


def test_keepalives_do_not_extend_the_runs_total_time(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLBRIDGE_RUN_TIMEOUT", "1")
    with EndlessServer(name, "keepalive").running() as server:
        platform = _open(name, server.url)
        try:
            with pytest.raises(StreamTimeoutError) as caught:
                _run(platform)
        finally:
            platform.close()
        assert server.sent < PING_CAP, "the client read the keep-alives until the server stopped"
    message = str(caught.value)
    assert "total time limit of 1 s (run_timeout)" in message
    assert "--run-timeout or TOOLBRIDGE_RUN_TIMEOUT" in message


def test_endless_text_stops_at_the_answer_bound(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_ANSWER_CHARS", str(LIMIT))
    with EndlessServer(name, "text").running() as server:
        platform = _open(name, server.url)
        try:
            with pytest.raises(StreamLimitError) as caught:
                _run(platform)
        finally:
            platform.close()
        assert server.sent < CAP
    message = str(caught.value)
    assert f"answer text past {LIMIT} characters (max_answer_chars)" in message
    assert "--max-answer-chars or TOOLBRIDGE_MAX_ANSWER_CHARS" in message
    # What was kept is bounded by the limit, not by what the server sent.
    kept = sum(len(_text_of(item)) for item in caught.value.received)
    assert 0 < kept <= LIMIT


def test_endless_tool_call_arguments_stop_at_their_bound(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_ARGUMENTS_CHARS", str(LIMIT))
    with EndlessServer(name, "arguments").running() as server:
        platform = _open(name, server.url)
        try:
            with pytest.raises(StreamLimitError) as caught:
                _run(platform)
        finally:
            platform.close()
        assert server.sent < CAP
    message = str(caught.value)
    assert f"tool-call arguments past {LIMIT} characters (max_arguments_chars)" in message
    assert "--max-arguments-chars or TOOLBRIDGE_MAX_ARGUMENTS_CHARS" in message


def test_endless_tool_calls_stop_at_their_bound(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_TOOL_CALLS", str(MAX_CALLS))
    with EndlessServer(name, "calls").running() as server:
        platform = _open(name, server.url)
        try:
            with pytest.raises(StreamLimitError) as caught:
                _run(platform)
        finally:
            platform.close()
        assert server.sent < CAP
    message = str(caught.value)
    assert f"more than {MAX_CALLS} tool calls (max_tool_calls)" in message
    assert "--max-tool-calls or TOOLBRIDGE_MAX_TOOL_CALLS" in message


def test_a_limit_given_as_an_option_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_ANSWER_CHARS", str(CAP * 2048))
    with EndlessServer("openai", "text").running() as server:
        platform = PLATFORMS["openai"].create(
            base_url=server.url + "/v1", model="m", max_answer_chars=str(LIMIT)
        )
        with platform, pytest.raises(StreamLimitError, match="max_answer_chars"):
            _run(platform)


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("TOOLBRIDGE_RUN_TIMEOUT", "soon", "'soon' is not a number of seconds > 0"),
        ("TOOLBRIDGE_RUN_TIMEOUT", "0", "'0' is not a number of seconds > 0"),
        ("TOOLBRIDGE_MAX_TOOL_CALLS", "1.5", "'1.5' is not an integer >= 1"),
        ("TOOLBRIDGE_MAX_ANSWER_CHARS", "-1", "'-1' is not an integer >= 1"),
    ],
)
def test_a_malformed_limit_is_refused_naming_it(
    name: str, variable: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.errors import ConfigurationError

    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        _open(name, "http://127.0.0.1:9")
    assert expected in str(caught.value) and variable in str(caught.value)


def echo(text: str) -> str:
    """Echo the text.

    Args:
        text: What to echo.
    """
    return text


@pytest.mark.parametrize("platform_name", ["openai", "coze"])
def test_the_loop_fails_the_message_and_the_conversation_goes_on(
    platform_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_ANSWER_CHARS", str(LIMIT))
    with EndlessServer(platform_name, "text").running() as server:
        journal = MemoryJournal()
        bridge = Bridge(_open(platform_name, server.url), Toolbox([echo]), journal=journal)
        with bridge, bridge.conversation() as conv:
            with pytest.raises(StreamLimitError):
                conv.ask("talk forever")
            failed = journal.messages(conv.id)[-1]
            assert failed.status == "failed"
            assert "(max_answer_chars)" in (failed.error_message or "")
            server.mode = "answer"
            assert conv.ask("and now briefly").answer == "fine"
        assert [m.status for m in journal.messages(conv.id)] == ["failed", "finished"]
    if platform_name == "coze":  # the stopped chat was cancelled, not left running
        assert "/v3/chat/cancel" in server.paths


_FLAGS: dict[str, list[str]] = {
    "appbuilder": [
        "--token",
        "bce-v3/ALTAK-limits/0123456789abcdef",
        "--app-id",
        "00000000-0000-0000-0000-000000000001",
    ],
    "openai": ["--model", "m"],
    "coze": ["--token", "pat_limits_0123456789", "--bot-id", "1"],
    "responses": ["--model", "m"],
}


@pytest.mark.parametrize(
    ("mode", "flags", "code", "said"),
    [
        (
            "keepalive",
            ["--run-timeout", "1"],
            4,
            (
                "total time limit of 1 s (run_timeout)",
                "raise it with --run-timeout or TOOLBRIDGE_RUN_TIMEOUT",
            ),
        ),
        (
            "text",
            ["--max-answer-chars", str(LIMIT)],
            1,
            (
                f"past {LIMIT} characters (max_answer_chars), so it was not read further",
                "raise it with --max-answer-chars or TOOLBRIDGE_MAX_ANSWER_CHARS",
            ),
        ),
    ],
)
def test_toolbridge_run_stops_at_the_flags_limit(
    name: str, mode: str, flags: list[str], code: int, said: tuple[str, ...], tmp_path: Path
) -> None:
    base = {"openai": "/v1", "responses": "/v1"}.get(name, "")
    env = {k: v for k, v in os.environ.items() if not k.startswith(_PLATFORM_VARIABLES)}
    with EndlessServer(name, mode).running() as server:
        command = [sys.executable, "-m", "bridge", "run", "go on forever", "--platform", name]
        command += ["--base-url", server.url + base, *_FLAGS[name], *flags]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
        assert server.sent < (PING_CAP if mode == "keepalive" else CAP)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and all(part in lines[0] for part in said), done.stderr
    assert "Traceback" not in done.stderr
