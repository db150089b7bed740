"""Streams that never end, on every platform of the registry: a server that sends only
``: ping`` keep-alives, one that streams text deltas without end, one that streams tool-call
arguments (or tool calls) without end. Each run must stop at its configured bound with an error
that names the limit and the setting that raises it, having read no more than the bound.

The server is a real loopback HTTP server speaking each platform's wire; every stream it sends
is capped (a number of frames, a stop flag at teardown), so a test can never hang. The limits
come from the environment (``TOOLBRIDGE_RUN_TIMEOUT``...), as the CLI and the daemon pass them.

A platform added to the registry fails here until it has a wire in `endless_fakes.WIRES` and
declares the limits.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, TypeVar

import pytest
from endless_fakes import CAP, PING_CAP, TRICKLE_CAP, WIRES, EndlessServer

from bridge import Bridge, MemoryJournal, Toolbox
from bridge.errors import StreamLimitError, StreamTimeoutError
from bridge.platforms.base import Platform
from bridge.platforms.registry import LIMIT_SETTINGS, PLATFORMS

LIMIT = 64 * 1024
"""The answer and arguments bound the tests set (characters)."""
MAX_CALLS = 8
E = TypeVar("E", bound=Exception)
_PLATFORM_VARIABLES = ("APPBUILDER_", "GATEWAY_", "OPENAI_", "COZE_", "TOOLBRIDGE_")
"""The environment a `toolbridge run` subprocess does not inherit (only the flags count)."""


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


def _stopped(name: str, mode: str, error: type[E], cap: int = CAP) -> E:
    """The error that stops a run of `name` against an endless `mode` stream; the client must
    have stopped reading before the server's cap."""
    with EndlessServer(name, mode).running() as server:
        platform = _open(name, server.url)
        try:
            with pytest.raises(error) as caught:
                _run(platform)
        finally:
            platform.close()
        assert server.sent < cap, f"the client read the {mode} frames until the server stopped"
    return caught.value


def _text_of(item: Any) -> str:
    """The answer text an item of `received` holds (an event, or an AppBuilder chunk)."""
    return str(getattr(item, "text", None) or getattr(item, "answer", None) or "")


@pytest.fixture(params=list(PLATFORMS))
def name(request: pytest.FixtureRequest) -> str:
    platform: str = request.param
    assert platform in WIRES, (
        f"add the {platform} wire to endless_fakes.WIRES: its streams must be bounded"
    )
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
    message = str(_stopped(name, "keepalive", StreamTimeoutError, PING_CAP))
    assert "total time limit of 1 s (run_timeout)" in message
    assert "--run-timeout or TOOLBRIDGE_RUN_TIMEOUT" in message


@pytest.mark.parametrize("mode", ["slowheaders", "slowbody"])
def test_a_trickling_answer_does_not_extend_the_runs_total_time(
    name: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Response headers, or a body that is not an event stream, a byte at a time: each byte
    # restarts the idle timeout, so only the total limit (counted from the request) stops it.
    monkeypatch.setenv("TOOLBRIDGE_RUN_TIMEOUT", "1")
    message = str(_stopped(name, mode, StreamTimeoutError, TRICKLE_CAP))
    assert "total time limit of 1 s (run_timeout)" in message
    assert "--run-timeout or TOOLBRIDGE_RUN_TIMEOUT" in message


def test_a_trickling_conversation_request_of_coze_stops_at_the_runs_total_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Coze's JSON requests of a run (conversation/create here) are bounded by run_timeout too.
    monkeypatch.setenv("TOOLBRIDGE_RUN_TIMEOUT", "1")
    with EndlessServer("coze", "slowjson").running() as server:
        platform = _open("coze", server.url)
        try:
            with pytest.raises(StreamTimeoutError) as caught:
                platform.create_conversation()
        finally:
            platform.close()
        assert server.sent < TRICKLE_CAP
    message = str(caught.value)
    assert "/v1/conversation/create exceeded the run's total time limit of 1 s (run_timeout)" in (
        message
    )


def test_endless_text_stops_at_the_answer_bound(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_ANSWER_CHARS", str(LIMIT))
    error = _stopped(name, "text", StreamLimitError)
    message = str(error)
    assert f"answer text past {LIMIT} characters (max_answer_chars)" in message
    assert "--max-answer-chars or TOOLBRIDGE_MAX_ANSWER_CHARS" in message
    # What was kept is bounded by the limit, not by what the server sent.
    kept = sum(len(_text_of(item)) for item in error.received)
    assert 0 < kept <= LIMIT


def test_endless_tool_call_arguments_stop_at_their_bound(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_ARGUMENTS_CHARS", str(LIMIT))
    message = str(_stopped(name, "arguments", StreamLimitError))
    assert f"tool-call arguments past {LIMIT} characters (max_arguments_chars)" in message
    assert "--max-arguments-chars or TOOLBRIDGE_MAX_ARGUMENTS_CHARS" in message


def test_endless_tool_calls_stop_at_their_bound(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLBRIDGE_MAX_TOOL_CALLS", str(MAX_CALLS))
    message = str(_stopped(name, "calls", StreamLimitError))
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
    # (the run has no --tools: its one warning line says so before the error)
    lines = [line for line in done.stderr.strip().splitlines() if "no --tools" not in line]
    assert len(lines) == 1 and all(part in lines[0] for part in said), done.stderr
    assert "Traceback" not in done.stderr
