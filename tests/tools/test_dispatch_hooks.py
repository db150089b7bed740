"""Hooks (sync or async), strict matching, direct calls, ToolRun.value and tuple-form arguments.

Issue 11, point 3: an async `after` used to post "<coroutine object ...>", an async `before`
gave a misleading invalid_arguments, neither was refused at registration; unknown arguments
were refused even for a `**kwargs` function; a single call needed a hand-built ToolCall.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import UsageError
from bridge.tools import ArgumentError, Dispatcher, Toolbox, ToolContext, manifest
from bridge.tools._tuple_args import looks_like_tuple, tuple_arguments
from bridge.tools.output import HIDDEN_ERROR
from bridge.types import ToolCall, ToolRun

WAIT = 10.0
"""A generous bound that only stops a broken test from hanging (never a timing assertion)."""


def weather(city: str, days: int = 1) -> dict[str, Any]:
    """Forecast for a city."""
    return {"city": city, "days": days}


async def aweather(city: str, days: int = 1) -> dict[str, Any]:
    """Forecast for a city, async."""
    await asyncio.sleep(0)
    return {"city": city, "days": days}


async def async_after(result: dict[str, Any]) -> str:
    await asyncio.sleep(0)
    return f"{result['city']} for {result['days']} day(s)"


async def async_before(raw: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(0)
    if "town" in raw:
        raw["city"] = raw.pop("town")
    return raw


class AsyncCallable:
    """A hook object whose __call__ is a coroutine function."""

    async def __call__(self, raw: dict[str, Any]) -> dict[str, Any]:
        return {**raw, "days": 3}


Runner = Callable[[Toolbox, str, Any], ToolRun]


def _via_run(toolbox: Toolbox, name: str, arguments: Any) -> ToolRun:
    with Dispatcher(toolbox) as dispatcher:
        [run] = dispatcher.run([ToolCall(call_id="c1", name=name, arguments=arguments)])
    return run


def _via_arun(toolbox: Toolbox, name: str, arguments: Any) -> ToolRun:
    async def go() -> ToolRun:
        with Dispatcher(toolbox) as dispatcher:
            [run] = await dispatcher.arun([ToolCall(call_id="c1", name=name, arguments=arguments)])
        return run

    return asyncio.run(go())


def _via_call(toolbox: Toolbox, name: str, arguments: Any) -> ToolRun:
    return toolbox.call(name, arguments)


def _via_acall(toolbox: Toolbox, name: str, arguments: Any) -> ToolRun:
    return asyncio.run(toolbox.acall(name, arguments))


RUNNERS = {"run": _via_run, "arun": _via_arun, "call": _via_call, "acall": _via_acall}


@pytest.fixture(params=list(RUNNERS))
def runner(request: pytest.FixtureRequest) -> Runner:
    return RUNNERS[request.param]


# --- hooks ------------------------------------------------------------------------------------


@pytest.mark.parametrize("tool", [weather, aweather])
def test_an_async_after_is_awaited(runner: Runner, tool: Callable[..., Any]) -> None:
    toolbox = Toolbox()
    toolbox.add(tool, name="w", after=async_after)
    run = runner(toolbox, "w", {"city": "Lyon", "days": "2"})
    assert (run.error, run.output) == (None, "Lyon for 2 day(s)")
    assert run.value == "Lyon for 2 day(s)"
    assert "coroutine" not in run.output


@pytest.mark.parametrize("tool", [weather, aweather])
def test_an_async_before_is_awaited(runner: Runner, tool: Callable[..., Any]) -> None:
    toolbox = Toolbox()
    toolbox.add(tool, name="w", before=async_before)
    run = runner(toolbox, "w", {"town": "Nice"})
    assert (run.error, run.value) == (None, {"city": "Nice", "days": 1})
    assert run.arguments == {"town": "Nice"}  # the record shows what the agent sent


def test_hooks_may_be_objects_with_an_async_call_or_return_awaitables(runner: Runner) -> None:
    async def later(value: Any) -> Any:
        return value

    toolbox = Toolbox()
    toolbox.add(weather, before=AsyncCallable(), after=lambda result: later(result["days"]))
    run = runner(toolbox, "weather", {"city": "Oslo"})
    assert (run.error, run.output, run.value) == (None, "3", 3)


def test_a_failing_before_names_the_hook(runner: Runner) -> None:
    async def broken(raw: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("zone")

    toolbox = Toolbox()
    toolbox.add(weather, before=broken)
    run = runner(toolbox, "weather", {"city": "Lima"})
    assert (run.error, run.output) == (
        "tool_error",
        "The before hook of tool 'weather' failed: KeyError: 'zone'",
    )
    assert run.value is None


@pytest.mark.parametrize("is_async", [False, True])
def test_a_failing_after_names_the_hook(runner: Runner, is_async: bool) -> None:
    def sync_broken(result: Any) -> Any:
        raise ValueError("no summary")

    async def async_broken(result: Any) -> Any:
        raise ValueError("no summary")

    toolbox = Toolbox()
    toolbox.add(weather, after=async_broken if is_async else sync_broken)
    toolbox.add(aweather, after=async_broken if is_async else sync_broken)
    for name in ("weather", "aweather"):
        run = runner(toolbox, name, {"city": "Lima"})
        assert (run.error, run.output) == (
            "tool_error",
            f"The after hook of tool {name!r} failed: ValueError: no summary",
        )


def test_an_async_before_raising_argument_error_is_invalid_arguments(runner: Runner) -> None:
    async def refuse(raw: dict[str, Any]) -> dict[str, Any]:
        raise ArgumentError(["city: must be in Europe (got 'Lima')"])

    toolbox = Toolbox()
    toolbox.add(weather, before=refuse)
    run = runner(toolbox, "weather", {"city": "Lima"})
    assert run.error == "invalid_arguments"
    assert "- city: must be in Europe (got 'Lima')" in run.output


def test_a_before_that_returns_no_dict_is_a_tool_error_saying_so(runner: Runner) -> None:
    toolbox = Toolbox()
    toolbox.add(weather, before=lambda raw: list(raw))
    run = runner(toolbox, "weather", {"city": "Lima"})
    assert run.error == "tool_error"
    assert "before hook of tool 'weather' failed" in run.output
    assert "it returned list; a before hook must return the arguments as a dict" in run.output


def test_hook_failures_follow_the_errors_mode() -> None:
    def broken(result: Any) -> Any:
        raise ValueError("secret detail")

    toolbox = Toolbox()
    toolbox.add(weather, after=broken)
    assert toolbox.call("weather", {"city": "x"}, errors="hidden").output == HIDDEN_ERROR
    with pytest.raises(ValueError, match="secret detail"):
        toolbox.call("weather", {"city": "x"}, errors="raise")


@pytest.mark.parametrize("hook", ["before", "after"])
@pytest.mark.parametrize("is_async", [False, True])
def test_hooks_run_inside_the_calls_timeout(runner: Runner, hook: str, is_async: bool) -> None:
    release = threading.Event()

    def slow_sync(value: Any) -> Any:
        release.wait(WAIT)
        return value

    async def slow_async(value: Any) -> Any:
        await asyncio.sleep(WAIT)
        return value

    toolbox = Toolbox()
    slow = slow_async if is_async else slow_sync
    toolbox.add(weather, timeout=0.05, **{hook: slow})
    try:
        run = runner(toolbox, "weather", {"city": "x"})
    finally:
        release.set()
    assert run.error == "timeout"
    assert "timed out after 0.05 seconds" in run.output


# --- hooks refused at registration ------------------------------------------------------------


def _two(a: Any, b: Any) -> Any:
    return a


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"before": "upper"}, r"before must be a callable .*takes one argument.*got 'upper'"),
        ({"after": 42}, r"after must be a callable .*got 42"),
        ({"before": _two}, r"before must be a callable .*_two\(a: 'Any', b: 'Any'\)"),
        ({"after": lambda: None}, r"after must be a callable .*<lambda>\(\) cannot be called"),
        ({"strict": "no"}, r"strict must be True or False \(got 'no'\)"),
    ],
)
def test_bad_hooks_and_options_are_refused_when_added(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message) as refused:
        Toolbox().add(weather, **options)
    assert "weather" in str(refused.value)  # names the tool


def test_bad_hooks_in_the_decorator_are_refused_when_added() -> None:
    @manifest(after=_two)
    def report(text: str) -> str:
        """Report."""
        return text

    with pytest.raises(UsageError, match=r"report .*after must be a callable"):
        Toolbox().add(report)


def test_hooks_with_defaults_or_varargs_and_builtins_are_accepted() -> None:
    def flexible(value: Any, extra: int = 0, *rest: Any) -> Any:
        return value

    toolbox = Toolbox()
    toolbox.add(weather, before=flexible, after=str)
    toolbox.add(aweather, after=json.dumps)
    assert toolbox.call("weather", {"city": "a"}).output == "{'city': 'a', 'days': 1}"


# --- strict -------------------------------------------------------------------------------------


def search(query: str, limit: int = 5, **filters: Any) -> dict[str, Any]:
    """Search with any filters."""
    return {"query": query, "limit": limit, "filters": filters}


def test_strict_is_on_by_default_and_refuses_unknown_arguments() -> None:
    toolbox = Toolbox([search])
    run = toolbox.call("search", {"query": "q", "lang": "fr"})
    assert run.error == "invalid_arguments"
    assert "unknown argument 'lang': accepted arguments are query, limit" in run.output
    assert "additionalProperties" not in toolbox.get("search").parameters  # type: ignore[union-attr]


def test_strict_off_passes_unknown_arguments_to_kwargs(runner: Runner) -> None:
    toolbox = Toolbox()
    toolbox.add(search, strict=False)
    run = runner(toolbox, "search", {"query": "q", "limit": "2", "lang": "fr", "n": [1]})
    assert run.error is None
    # Declared arguments are validated (and coerced); the others pass as given.
    assert run.value == {"query": "q", "limit": 2, "filters": {"lang": "fr", "n": [1]}}
    missing = runner(toolbox, "search", {"lang": "fr"})
    assert missing.error == "invalid_arguments" and "query: missing" in missing.output


def test_strict_off_from_the_decorator_and_its_schema() -> None:
    @manifest(strict=False)
    def tag(name: str, **labels: str) -> str:
        """Tag something."""
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))

    toolbox = Toolbox([tag])
    [spec] = list(toolbox)
    assert spec.options.strict is False
    assert spec.parameters["additionalProperties"] is True
    assert toolbox.manifests("openai")[0]["function"]["parameters"]["additionalProperties"]
    assert toolbox.call("tag", {"name": "x", "b": "2", "a": "1"}).output == "a=1,b=2"
    with pytest.raises(UsageError, match="free-form object"):
        toolbox.manifests("openai-strict")


def test_strict_off_without_kwargs_is_refused() -> None:
    with pytest.raises(UsageError, match=r"strict=False .*has no \*\*kwargs parameter"):
        Toolbox().add(weather, strict=False)


# strict=False: names the bridge fills (the ToolContext) or Python binds (self, cls, a partial's
# values) are never passed to **kwargs: the model can neither fill them nor make the call fail
# with "got multiple values".


@manifest(strict=False)
def _with_context(a: int, ctx: ToolContext, **extra: Any) -> dict[str, Any]:
    """Report what arrived."""
    return {"ctx": type(ctx).__name__, "extra": sorted(extra)}


class _Kit:
    @manifest(strict=False)
    def method(self, a: int, context: ToolContext, **extra: Any) -> dict[str, Any]:
        """Report what arrived."""
        return {"self": type(self).__name__, "extra": sorted(extra)}

    @manifest(strict=False)
    @classmethod
    def klass(cls, a: int, **extra: Any) -> dict[str, Any]:
        """Report what arrived."""
        return {"cls": cls.__name__, "extra": sorted(extra)}


def _partial_tool(secret: str, a: int, **extra: Any) -> dict[str, Any]:
    """Report what arrived."""
    return {"secret": secret, "extra": sorted(extra)}


RESERVED_CASES = [
    (_with_context, "ctx"),
    (_Kit().method, "self"),
    (_Kit().method, "context"),
    (_Kit.klass, "cls"),
    (functools.partial(_partial_tool, "kept"), "secret"),
]


@pytest.mark.parametrize(("tool", "reserved"), RESERVED_CASES)
def test_strict_off_refuses_names_the_bridge_fills(tool: Callable[..., Any], reserved: str) -> None:
    toolbox = Toolbox()
    [spec] = toolbox.add(tool, strict=False)
    run = toolbox.call(spec.name, {"a": 1, reserved: "from the model", "other": 2})
    assert run.error == "invalid_arguments", run.output
    assert f"unknown argument '{reserved}'" in run.output
    fine = toolbox.call(spec.name, {"a": 1, "other": 2, "_private": 3})
    assert fine.error is None and json.loads(fine.output)["extra"] == ["_private", "other"]


@settings(max_examples=100, deadline=None)
@given(
    keys=st.sets(
        st.one_of(
            st.sampled_from(["ctx", "self", "cls", "context", "_", "__class__", "extra", "a"]),
            st.text(max_size=12),
        ),
        max_size=6,
    )
)
def test_strict_off_never_lets_the_model_fill_the_context(keys: set[str]) -> None:
    toolbox = Toolbox()
    toolbox.add(_with_context, strict=False)
    run = toolbox.call("_with_context", {"a": 1, **{key: "x" for key in keys if key != "a"}})
    if "ctx" in keys:
        assert run.error == "invalid_arguments" and "unknown argument 'ctx'" in run.output
    else:
        assert run.error is None, run.output
        assert json.loads(run.output) == {"ctx": "ToolContext", "extra": sorted(keys - {"a"})}


# --- direct calls -------------------------------------------------------------------------------


def _tools() -> Toolbox:
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    def boom() -> None:
        """Fail."""
        raise RuntimeError("it broke")

    def stuck() -> None:
        """Never return in time."""
        threading.Event().wait(0.5)

    toolbox = Toolbox([add, boom])
    toolbox.add(stuck, timeout=0.05)
    return toolbox


@pytest.mark.parametrize(
    ("name", "arguments", "error"),
    [
        ("add", {"a": 1, "b": "2"}, None),
        ("add", '{"a": 1, "b": 2}', None),
        ("add", "(1, 2)", None),
        ("missing", {}, "unknown_tool"),
        ("add", {"a": "one"}, "invalid_arguments"),
        ("add", "not json", "invalid_arguments"),
        ("boom", None, "tool_error"),
        ("stuck", None, "timeout"),
    ],
)
def test_a_direct_call_is_a_dispatched_call(name: str, arguments: Any, error: str | None) -> None:
    toolbox = _tools()
    dispatched = _via_run(toolbox, name, {} if arguments is None else arguments)
    for direct in (toolbox.call(name, arguments), asyncio.run(toolbox.acall(name, arguments))):
        assert (direct.error, direct.output) == (dispatched.error, dispatched.output)
        assert direct.error == error
        assert direct.call_id.startswith("direct-")
        assert direct.name == name


def test_a_direct_call_refuses_arguments_of_another_type() -> None:
    toolbox = _tools()
    with pytest.raises(UsageError, match=r"arguments must be a mapping .* got list"):
        toolbox.call("add", [1, 2])
    with pytest.raises(UsageError, match="timeout must be a positive"):
        toolbox.call("add", {"a": 1, "b": 2}, timeout=0)
    with pytest.raises(UsageError, match="errors must be one of"):
        toolbox.call("add", {"a": 1, "b": 2}, errors="loud")  # type: ignore[arg-type]


def test_a_direct_call_takes_its_own_call_id_and_the_tool_sees_it() -> None:

    def whoami(ctx: ToolContext) -> str:
        """The call id."""
        return ctx.call_id

    toolbox = Toolbox([whoami])
    assert toolbox.call("whoami", call_id="mine").output == "mine"
    assert toolbox.call("whoami").output.startswith("direct-")


# --- ToolRun.value --------------------------------------------------------------------------------


def test_value_is_the_raw_result_and_is_never_serialised() -> None:
    result = {"rows": [1, 2]}

    def rows() -> dict[str, Any]:
        """Rows."""
        return result

    run = Toolbox([rows]).call("rows")
    assert run.value is result
    assert run.output == '{"rows": [1, 2]}'
    assert "value" not in run.model_dump() and "value" not in run.model_dump_json()
    assert "value" not in repr(run)


def test_value_is_none_when_the_call_did_not_return() -> None:
    toolbox = _tools()
    for name, arguments in (("boom", None), ("stuck", None), ("add", {}), ("missing", None)):
        assert toolbox.call(name, arguments).value is None


# --- tuple-form arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(1, 2)", {"a": 1, "b": 2}),
        ("  (1,)  ", {"a": 1}),
        ("(1)", {"a": 1}),
        ("()", {}),
        ('("x", [1, -2.5], {"k": null}, true)', {"a": "x", "b": [1, -2.5], "c": {"k": None}}),
    ],
)
def test_tuple_arguments_map_onto_parameters_in_order(text: str, expected: dict[str, Any]) -> None:
    names = ["a", "b", "c"]
    if text.startswith('("x"'):
        assert tuple_arguments(text, names) == (
            "the call has 4 positional arguments, but the tool takes at most 3 (a, b, c)"
        )
        text = text.replace(", true)", ")")
    assert looks_like_tuple(text)
    assert tuple_arguments(text, names) == expected


@pytest.mark.parametrize(
    "text",
    [
        "(__import__('os').system('false'),)",
        "(open('/etc/passwd'),)",
        "(1 + 1,)",
        "(x,)",
        "(lambda: 1,)",
        "({**{}},)",
        "([i for i in range(9**9)],)",
    ],
)
def test_tuple_arguments_are_never_evaluated(text: str) -> None:
    assert "is not a literal" in str(tuple_arguments(text, ["a"]))


def test_a_tuple_call_through_the_dispatcher() -> None:
    toolbox = _tools()
    assert toolbox.call("add", "(2, '3')").output == "5"
    run = toolbox.call("add", "(1, 2, 3)")
    assert run.error == "invalid_arguments"
    assert "the call has 3 positional arguments, but the tool takes at most 2 (a, b)" in run.output
    assert toolbox.call("add", "(1,").error == "invalid_arguments"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_parenthesised_text_gives_a_dict_or_a_sentence(body: str) -> None:
    result = tuple_arguments(f"({body})", ["a", "b"])
    assert isinstance(result, (dict, str))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(),
            st.text(max_size=20),
            st.booleans(),
            st.none(),
            st.floats(allow_nan=False, allow_infinity=False),
        ),
        max_size=3,
    )
)
def test_literal_tuples_round_trip(values: list[Any]) -> None:
    text = "(" + ", ".join(repr(v) for v in values) + ("," if len(values) == 1 else "") + ")"
    assert tuple_arguments(text, ["a", "b", "c"]) == dict(zip("abc", values, strict=False))


def test_strict_off_is_refused_for_a_kind_that_cannot_take_undeclared_arguments() -> None:
    from pydantic import BaseModel

    class Lookup(BaseModel):
        """Look something up."""

        key: str

        def run(self) -> str:
            return self.key

    with pytest.raises(UsageError, match=r"strict=False .*cannot receive them"):
        Toolbox().add(Lookup, strict=False)


def test_a_model_tool_that_allows_extra_fields_receives_them_also_with_strict_off() -> None:
    from pydantic import BaseModel, ConfigDict

    class Note(BaseModel):
        """Take a note."""

        model_config = ConfigDict(extra="allow")
        text: str

        def run(self) -> dict[str, Any]:
            return self.model_dump()

    for strict in (True, False):
        toolbox = Toolbox()
        toolbox.add(Note, strict=strict)
        assert toolbox.call("note", {"text": "a", "tag": "x"}).value == {"text": "a", "tag": "x"}


# --- confirm=True through a direct call ----------------------------------------------------------


def test_a_direct_call_of_a_confirm_tool_runs_only_with_a_person_s_yes() -> None:
    ran: list[str] = []

    @manifest(confirm=True)
    def delete(path: str) -> str:
        ran.append(path)
        return f"deleted {path}"

    toolbox = Toolbox([delete])
    asked: list[ToolCall] = []

    def no(call: ToolCall) -> bool:
        asked.append(call)
        return False

    nobody = toolbox.call("delete", {"path": "/etc"})
    assert nobody.error == "rejected" and "approve=" in nobody.output
    declined = toolbox.call("delete", {"path": "/etc"}, approve=no)
    assert declined.error == "rejected" and asked[0].arguments == {"path": "/etc"}
    assert asyncio.run(toolbox.acall("delete", {"path": "/etc"})).error == "rejected"
    assert ran == []  # nothing ran without a yes

    def broken(call: ToolCall) -> bool:
        raise RuntimeError("the terminal went away")

    assert toolbox.call("delete", {"path": "/x"}, approve=broken).error == "rejected"
    assert toolbox.call("delete", {"path": "/tmp/a"}, approve=lambda call: True).output == (
        "deleted /tmp/a"
    )
    yes = asyncio.run(toolbox.acall("delete", {"path": "/tmp/b"}, approve=lambda call: True))
    assert yes.value == "deleted /tmp/b" and ran == ["/tmp/a", "/tmp/b"]


# --- numbers and nesting JSON has no room for ----------------------------------------------------


def _number_tool(x: float = 0.0, n: int = 0, data: Any = None) -> str:
    """Echo x."""
    return repr(x)


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ('{"x": NaN}', "NaN is not a JSON number"),
        ('{"x": -Infinity}', "-Infinity is not a JSON number"),
        ('{"x": 1e999999}', "1e999999 does not fit in a double"),
        ('{"n": ' + "9" * 5_000 + "}", "an integer of more than"),  # crashed the call
        ('{"data": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),  # crashed it
        ("(1e999999,)", "not a literal"),
        ("(-1e999999,)", "not a literal"),
        ("(1j,)", "not a literal"),
        ("(" + "9" * 5_000 + ",)", "cannot be read"),
    ],
)
def test_arguments_json_cannot_carry_are_invalid_not_a_crash(arguments: str, needle: str) -> None:
    run = Toolbox([_number_tool]).call("_number_tool", arguments)
    assert run.error == "invalid_arguments", run.output
    assert needle in run.output


NUMBERS = st.sampled_from(
    ["1", "-1", "0.5", "1e999999", "-1e999999", "NaN", "Infinity", "9" * 4_400, "1j", "true"]
)


@settings(max_examples=200, deadline=None)
@given(
    number=NUMBERS,
    depth=st.integers(0, 3_000),
    key=st.sampled_from(["x", "data"]),
    form=st.sampled_from(["json", "tuple"]),
)
def test_any_arguments_text_is_a_result_or_a_readable_problem(
    number: str, depth: int, key: str, form: str
) -> None:
    value = "[" * depth + number + "]" * depth
    text = f'{{"{key}": {value}}}' if form == "json" else f"(0, 0, {value})"
    run = Toolbox([_strict_json_tool]).call("_strict_json_tool", text)
    # The tool dumps what it got with allow_nan=False: an infinity reaching it is a tool_error.
    assert run.error in (None, "invalid_arguments"), run.output


def _strict_json_tool(x: Any = 0, n: int = 0, data: Any = None) -> str:
    """Echo what arrived as strict JSON."""
    return json.dumps({"x": x, "data": data}, allow_nan=False)
