"""Tool choice (a name, or `{name, input}`) and the platform's own tools, end to end.

Through `Bridge`/`Conversation` against the emulator (the forced tool and its input reach the
request, and the emulated agent calls that tool with that input), the daemon's message API,
the CLI's `--tool-choice`/`--tool-input`, and every bad input.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from bridge import (
    AppBuilderPlatform,
    Bridge,
    OpenAIChatPlatform,
    ToolChoice,
    UsageError,
    manifest,
)
from bridge.cli import app
from bridge.emulator import Emulator
from bridge.platforms.appbuilder import tool_choice_for
from bridge.platforms.base import parse_tool_choice, platform_tools_for
from bridge.platforms.openai_chat.models import tool_fields
from tests.daemon.conftest import DaemonProcess

CALLS: list[tuple[str, dict[str, Any]]] = []


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    CALLS.append(("get_weather", {"city": city}))
    return f"{city}: 18 degrees"


@manifest(description="Local time in a time zone.")
def get_time(timezone: str = "UTC") -> str:
    CALLS.append(("get_time", {"timezone": timezone}))
    return f"12:00 in {timezone}"


TOOLS_FILE = """
from bridge import manifest

@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    return f"{city}: 18 degrees"

@manifest(description="Local time in a time zone.")
def get_time(timezone: str = "UTC") -> str:
    return f"12:00 in {timezone}"
"""


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator() as emu:
        yield emu


@pytest.fixture()
def emu(emulator: Emulator) -> Emulator:
    emulator.clear_requests()
    CALLS.clear()
    return emulator


def _platform(emu: Emulator) -> AppBuilderPlatform:
    return AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )


def _runs(emu: Emulator) -> list[dict[str, Any]]:
    """The bodies of the run requests that carried a query (not the tool outputs)."""
    return [
        r.json
        for r in emu.requests
        if r.path.endswith("/conversation/runs") and isinstance(r.json, dict) and r.json["query"]
    ]


# --- parsing: every accepted form, every refused one ---------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, None),
        ("get_weather", ToolChoice(name="get_weather")),
        (ToolChoice(name="get_weather"), ToolChoice(name="get_weather")),
        ({"name": "get_weather"}, ToolChoice(name="get_weather")),
        ({"name": "get_weather", "input": None}, ToolChoice(name="get_weather")),
        (
            {"name": "get_weather", "input": {"city": "Rome"}},
            ToolChoice(name="get_weather", input={"city": "Rome"}),
        ),
        (
            {"type": "function", "function": {"name": "get_weather", "input": {"city": "Rome"}}},
            ToolChoice(name="get_weather", input={"city": "Rome"}),
        ),
        ({"type": "auto"}, "auto"),
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
    ],
)
def test_accepted_forms(given: object, expected: object) -> None:
    assert parse_tool_choice(given) == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "tool_choice is an empty string; expected a tool name"),
        ("   ", "tool_choice is an empty string"),
        (42, "tool_choice must be a tool name, one of auto, none, required"),
        (["get_weather"], "got list"),
        ({"tool": "get_weather"}, "unknown key(s) tool; expected {'name': ..., 'input'"),
        ({"name": "get_weather", "arguments": {}}, "unknown key(s) arguments"),
        ({}, "tool_choice['name'] must be a non-empty tool name; got None"),
        ({"name": ""}, "tool_choice['name'] must be a non-empty tool name; got ''"),
        ({"name": 7}, "must be a non-empty tool name; got 7"),
        ({"name": "get_weather", "input": "Rome"}, "tool_choice['input'] must be a dict"),
        ({"name": "get_weather", "input": ["Rome"]}, "got list"),
        ({"name": "get_weather", "input": {1: "Rome"}}, "keys must be argument names"),
        ({"type": "function"}, "tool_choice['function'] must be {'name': ..., 'input'"),
        ({"type": "required"}, "in AppBuilder's form must be"),
        (
            {"type": "function", "function": {"name": ""}},
            "tool_choice['function']['name'] must be a non-empty tool name",
        ),
    ],
)
def test_refused_forms_say_what_is_expected(given: object, message: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_tool_choice(given)
    assert message in str(caught.value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["name", "input", "type", "function", "x"]), inner, max_size=3
        )
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(JSON)
def test_any_value_is_a_choice_or_a_usage_error(value: object) -> None:
    """Whatever a caller or an API client sends: a neutral choice, or a clear UsageError."""
    try:
        choice = parse_tool_choice(value)
    except UsageError as exc:
        message = str(exc)
        assert message.startswith("tool_choice"), message
        assert "got" in message or "expected" in message, message
        return
    assert (
        choice is None or choice in ("auto", "none", "required") or isinstance(choice, ToolChoice)
    )


def test_a_tool_choice_model_is_strict() -> None:
    with pytest.raises(ValueError, match="name"):
        ToolChoice(name="")
    with pytest.raises(ValueError, match="extra"):
        ToolChoice.model_validate({"name": "a", "other": 1})


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        (None, None),
        ("auto", None),
        ("get_weather", {"type": "function", "function": {"name": "get_weather", "input": {}}}),
        (
            ToolChoice(name="get_weather", input={"city": "Rome"}),
            {"type": "function", "function": {"name": "get_weather", "input": {"city": "Rome"}}},
        ),
    ],
)
def test_appbuilder_wire_form(choice: ToolChoice | str | None, wire: object) -> None:
    sent = tool_choice_for(choice)
    assert (None if sent is None else sent.model_dump(mode="json")) == wire


@pytest.mark.parametrize("mode", ["none", "required"])
def test_appbuilder_refuses_openai_modes(mode: str) -> None:
    with pytest.raises(UsageError, match=f"'{mode}' is not available on AppBuilder"):
        tool_choice_for(mode)


# --- through Bridge, against the emulator --------------------------------------------------------


def test_the_forced_tool_and_its_input_reach_the_agent(emu: Emulator) -> None:
    choice = {"name": "get_weather", "input": {"city": "Rome"}}
    with Bridge(_platform(emu), [get_weather, get_time], tool_choice=choice) as bridge:
        result = bridge.ask("what time is it in Tokyo?")
    [body] = _runs(emu)
    assert body["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather", "input": {"city": "Rome"}},
    }
    assert CALLS == [("get_weather", {"city": "Rome"})], "the planner obeyed the forced input"
    assert [(run.name, run.arguments) for run in result.tool_runs] == [
        ("get_weather", {"city": "Rome"})
    ]
    assert "Rome: 18 degrees" in result.answer


def test_ask_overrides_the_bridge_default(emu: Emulator) -> None:
    with Bridge(_platform(emu), [get_weather, get_time], tool_choice="get_weather") as bridge:
        conversation = bridge.conversation()
        conversation.ask(
            "hello", tool_choice=ToolChoice(name="get_time", input={"timezone": "CET"})
        )
        conversation.ask("weather in Paris")
    first, second = _runs(emu)
    assert first["tool_choice"]["function"] == {"name": "get_time", "input": {"timezone": "CET"}}
    assert second["tool_choice"]["function"] == {"name": "get_weather", "input": {}}
    assert CALLS[0] == ("get_time", {"timezone": "CET"})


def test_stream_takes_the_dict_form(emu: Emulator) -> None:
    with Bridge(_platform(emu), [get_weather, get_time]) as bridge:
        conversation = bridge.conversation()
        events = list(
            conversation.stream(
                "hi", tool_choice={"name": "get_time", "input": {"timezone": "UTC"}}
            )
        )
    assert events, "the run produced events"
    assert CALLS == [("get_time", {"timezone": "UTC"})]


def test_auto_sends_null(emu: Emulator) -> None:
    with Bridge(_platform(emu), [get_weather], tool_choice="auto") as bridge:
        bridge.ask("weather in Paris")
    [body] = _runs(emu)
    assert body["tool_choice"] is None


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ("no_such_tool", "tool_choice 'no_such_tool' is not a loaded tool; loaded tools: "),
        ({"name": "nope", "input": {}}, "'nope' is not a loaded tool"),
        ({"name": "get_weather", "inputs": {}}, "unknown key(s) inputs"),
        (3.5, "got float"),
        ({"name": "get_weather", "input": "Rome"}, "must be a dict of the tool's arguments"),
    ],
)
def test_bad_choices_are_usage_errors_before_anything_is_sent(
    emu: Emulator, choice: object, message: str
) -> None:
    with pytest.raises(UsageError) as at_construction:
        Bridge(_platform(emu), [get_weather, get_time], tool_choice=choice)
    assert message in str(at_construction.value)
    with Bridge(_platform(emu), [get_weather, get_time]) as bridge:
        conversation = bridge.conversation()
        with pytest.raises(UsageError) as at_ask:
            conversation.ask("weather in Paris", tool_choice=choice)
    assert message in str(at_ask.value)
    assert not _runs(emu), "nothing reached the platform"


def test_a_mode_appbuilder_lacks_is_refused_at_ask(emu: Emulator) -> None:
    with (
        Bridge(_platform(emu), [get_weather], tool_choice="required") as bridge,
        pytest.raises(UsageError, match="'required' is not available on AppBuilder"),
    ):
        bridge.ask("weather in Paris")
    assert not _runs(emu)


# --- platform tools ------------------------------------------------------------------------------


def test_platform_tools_go_out_next_to_the_local_tools(emu: Emulator) -> None:
    with Bridge(
        _platform(emu),
        [get_weather],
        platform_tools=["code_interpreter", {"type": "file_retrieval"}],
    ) as bridge:
        result = bridge.ask("what is the weather in Paris?")
    [body] = _runs(emu)
    assert [tool.get("type") for tool in body["tools"]] == [
        "function",
        "code_interpreter",
        "file_retrieval",
    ]
    assert body["tools"][1:] == [{"type": "code_interpreter"}, {"type": "file_retrieval"}]
    assert CALLS == [("get_weather", {"city": "Paris"})], "the emulator still plans with them"
    assert result.tool_runs[0].error is None


def test_one_platform_tool_may_be_given_bare(emu: Emulator) -> None:
    with Bridge(_platform(emu), [get_weather], platform_tools="code_interpreter") as bridge:
        assert bridge.platform_tools == [{"type": "code_interpreter"}]


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        (["web_search"], "'web_search' is not a tool type of the appbuilder platform; "),
        (["function"], "local tools go in tools="),
        ([{"name": "code_interpreter"}], "must be a tool type name such as 'code_interpreter'"),
        ([7], "platform_tools[0] must be a tool type name"),
    ],
)
def test_unknown_platform_tools_are_refused(emu: Emulator, tools: list[Any], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        Bridge(_platform(emu), [get_weather], platform_tools=tools)
    assert message in str(caught.value)
    assert "code_interpreter, file_retrieval" in str(caught.value) or "[0]" in str(caught.value)


def test_openai_has_no_platform_tools() -> None:
    platform = OpenAIChatPlatform("http://127.0.0.1:9/v1", "m")
    with pytest.raises(UsageError, match="the openai platform has no platform tools of its own"):
        Bridge(platform, [get_weather], platform_tools=["code_interpreter"])
    assert platform_tools_for(platform, []) == []
    platform.close()


def test_openai_refuses_a_forced_input_at_ask_and_accepts_a_name() -> None:
    platform = OpenAIChatPlatform("http://127.0.0.1:9/v1", "m")
    with Bridge(platform, [get_weather], tool_choice={"name": "get_weather"}) as bridge:
        conversation = bridge.conversation()
        with pytest.raises(UsageError, match="can force a tool but not its arguments"):
            conversation.ask("hi", tool_choice={"name": "get_weather", "input": {"city": "Rome"}})
    assert tool_fields([], None) == {}


# --- the daemon ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def daemon(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    folder = tmp_path_factory.mktemp("tool-choice")
    (folder / "tc_tools.py").write_text(TOOLS_FILE, encoding="utf-8")
    argv = ["--tools", str(folder / "tc_tools.py"), "--port", "0", "--db", str(folder / "j.db")]
    proc = DaemonProcess(argv, env=emulator.env())
    try:
        yield proc
    finally:
        proc.stop()


def test_daemon_takes_name_and_object(daemon: DaemonProcess, emu: Emulator) -> None:
    cid = daemon.new_conversation()
    by_name = daemon.ask(cid, "hello", tool_choice="get_time")
    assert by_name.status_code == 200, by_name.text
    assert [run["name"] for run in by_name.json()["tool_runs"]] == ["get_time"]
    forced = {"name": "get_weather", "input": {"city": "Oslo"}}
    by_object = daemon.ask(cid, "hello again", tool_choice=forced)
    assert by_object.status_code == 200, by_object.text
    [run] = by_object.json()["tool_runs"]
    assert (run["name"], run["arguments"], run["output"]) == (
        "get_weather",
        {"city": "Oslo"},
        "Oslo: 18 degrees",
    )
    bodies = _runs(emu)
    assert bodies[-1]["tool_choice"]["function"] == {
        "name": "get_weather",
        "input": {"city": "Oslo"},
    }


@pytest.mark.parametrize(
    ("choice", "code", "message"),
    [
        ("nope", "unknown_tool", "tool_choice 'nope' is not a loaded tool: get_weather, get_time"),
        ({"name": "nope", "input": {}}, "unknown_tool", "'nope' is not a loaded tool"),
        ({"name": "get_time", "input": "UTC"}, "invalid_request", "must be a dict"),
        ({"tool": "get_time"}, "invalid_request", "unknown key(s) tool"),
        (12, "invalid_request", "tool_choice must be a tool name"),
        ("", "invalid_request", "tool_choice is an empty string"),
    ],
)
def test_daemon_refuses_bad_choices_with_422(
    daemon: DaemonProcess, choice: object, code: str, message: str
) -> None:
    cid = daemon.new_conversation()
    response = daemon.ask(cid, "hello", tool_choice=choice)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert message in error["message"]


# --- the CLI -------------------------------------------------------------------------------------


def _cli(emu: Emulator, tmp_path: Path, *args: str) -> Any:
    tools = tmp_path / "cli_tools.py"
    tools.write_text(TOOLS_FILE, encoding="utf-8")
    return CliRunner().invoke(
        app, ["run", "hello", "-t", str(tools), "--json", *args], env=emu.env()
    )


def test_cli_forces_a_tool_with_its_input(emu: Emulator, tmp_path: Path) -> None:
    result = _cli(emu, tmp_path, "--tool-choice", "get_weather", "--tool-input", '{"city": "Lima"}')
    assert result.exit_code == 0, result.output
    [body] = _runs(emu)
    assert body["tool_choice"]["function"] == {"name": "get_weather", "input": {"city": "Lima"}}
    assert '"Lima: 18 degrees"' in result.stdout


def test_cli_forces_a_tool_by_name(emu: Emulator, tmp_path: Path) -> None:
    result = _cli(emu, tmp_path, "--tool-choice", "get_time")
    assert result.exit_code == 0, result.output
    [body] = _runs(emu)
    assert body["tool_choice"]["function"] == {"name": "get_time", "input": {}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tool-input", "{}"], "--tool-input needs --tool-choice NAME"),
        (["--tool-choice", "get_time", "--tool-input", "{oops"], "--tool-input is not valid JSON"),
        (["--tool-choice", "get_time", "--tool-input", "[1]"], "must be a JSON object"),
        (["--tool-choice", "auto", "--tool-input", "{}"], "not the mode 'auto'"),
        (["--tool-choice", "nope"], "--tool-choice 'nope' is not a loaded tool"),
        (["--tool-choice", ""], "--tool-choice is an empty string"),
    ],
)
def test_cli_bad_flags_exit_2(emu: Emulator, tmp_path: Path, args: list[str], message: str) -> None:
    result = _cli(emu, tmp_path, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not _runs(emu)


def test_nothing_secret_is_logged(emu: Emulator, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with Bridge(_platform(emu), [get_weather], tool_choice="get_weather") as bridge:
        bridge.ask("weather in Paris")
    assert emu.token not in caplog.text
