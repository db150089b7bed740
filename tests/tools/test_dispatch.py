"""The Dispatcher: one ToolRun per call, whatever the agent sends and whatever the tool does."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from decimal import Decimal
from enum import Enum
from typing import Any, ClassVar
from uuid import UUID

import pytest
from pydantic import BaseModel

from bridge.errors import UsageError
from bridge.tools import ArgumentError, ConversationScope, Dispatcher, Toolbox, ToolContext
from bridge.types import ToolCall, ToolRun

WAIT = 10.0
"""A generous bound that only stops a broken test from hanging (never a timing assertion)."""


def call(name: str, arguments: dict[str, Any] | str | None = None, call_id: str = "c1") -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments={} if arguments is None else arguments)


def run_one(dispatcher: Dispatcher, name: str, arguments: Any = None, **kw: Any) -> ToolRun:
    [run] = dispatcher.run([call(name, arguments)], **kw)
    return run


@pytest.fixture
def toolbox() -> Toolbox:
    return Toolbox()


@pytest.fixture
def dispatcher(toolbox: Toolbox) -> Iterator[Dispatcher]:
    with Dispatcher(toolbox) as d:
        yield d


# --- the record -------------------------------------------------------------------------------


def test_a_call_gives_a_full_record(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    toolbox.add(add)
    [run] = dispatcher.run([call("add", {"a": 2, "b": 3}, call_id="x-1")])
    assert run.call_id == "x-1"
    assert run.name == "add"
    assert run.arguments == {"a": 2, "b": 3}
    assert run.output == "5"
    assert run.error is None
    assert run.started_at.tzinfo is timezone.utc
    assert run.duration_ms >= 0
    assert run.to_result().is_error is False


def test_runs_come_back_in_the_order_of_the_calls(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    toolbox.add(echo)
    calls = [call("echo", {"text": str(i)}, call_id=f"id-{i}") for i in range(20)]
    calls.insert(5, call("missing", call_id="id-missing"))
    runs = dispatcher.run(calls)
    assert [r.call_id for r in runs] == [c.call_id for c in calls]
    assert [r.output for r in runs if r.error is None] == [str(i) for i in range(20)]


def test_an_empty_batch_is_an_empty_list(dispatcher: Dispatcher) -> None:
    assert dispatcher.run([]) == []
    assert asyncio.run(dispatcher.arun([])) == []


def test_calls_must_be_tool_calls(dispatcher: Dispatcher) -> None:
    with pytest.raises(UsageError, match=r"calls must be bridge\.ToolCall objects, got dict"):
        dispatcher.run([{"name": "x"}])  # type: ignore[list-item]


# --- arguments ----------------------------------------------------------------------------------


def _register_weather(toolbox: Toolbox) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def weather(city: str, days: int = 1, units: list[str] | None = None) -> str:
        """Forecast.

        Args:
            city: City name.
            days: How many days.
            units: Units to show.
        """
        seen.append({"city": city, "days": days, "units": units})
        return f"{city}:{days}:{units}"

    toolbox.add(weather)
    return seen


def test_json_string_arguments_are_parsed(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    _register_weather(toolbox)
    run = run_one(dispatcher, "weather", json.dumps({"city": "Paris", "days": 2}))
    assert (run.error, run.output) == (None, "Paris:2:None")
    assert run.arguments == '{"city": "Paris", "days": 2}'  # the record keeps what was sent


def test_empty_string_arguments_mean_no_arguments(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    toolbox.add(ping)
    assert run_one(dispatcher, "ping", "  ").output == "pong"


def test_arguments_are_coerced_in_lax_mode(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    seen = _register_weather(toolbox)
    run = run_one(dispatcher, "weather", {"city": "Oslo", "days": "3", "units": '["C", "mm"]'})
    assert run.error is None, run.output
    assert seen == [{"city": "Oslo", "days": 3, "units": ["C", "mm"]}]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ("{city: Paris}", "the arguments are not valid JSON (Expecting property name"),
        ("not json", "the arguments are not valid JSON (Expecting value: line 1 column 1"),
        ('["Paris"]', "the arguments must be a JSON object, got a JSON array"),
        ('"Paris"', "the arguments must be a JSON object, got a JSON string"),
        ("42", "the arguments must be a JSON object, got a JSON number"),
        ("null", "the arguments must be a JSON object, got a JSON null"),
        ("true", "the arguments must be a JSON object, got a JSON boolean"),
        ({}, "city: missing required argument (expected a string)"),
        ({"city": "Oslo", "days": "many"}, "days: should be a valid integer"),
        ({"city": "Oslo", "country": "NO"}, "unknown argument 'country'"),
    ],
)
def test_bad_arguments_name_the_problem_and_show_the_schema(
    toolbox: Toolbox, dispatcher: Dispatcher, arguments: Any, problem: str
) -> None:
    seen = _register_weather(toolbox)
    run = run_one(dispatcher, "weather", arguments)
    assert run.error == "invalid_arguments"
    assert run.output.startswith("Invalid arguments for tool 'weather'; it was not run.\n- ")
    assert problem in run.output
    schema = toolbox.get("weather").parameters  # type: ignore[union-attr]
    compact = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    assert run.output.endswith(f"Expected arguments (JSON Schema): {compact}")
    assert seen == []  # the tool was not called
    assert run.to_result().is_error is True


def test_every_problem_is_listed(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    _register_weather(toolbox)
    run = run_one(dispatcher, "weather", {"days": "x", "extra": 1})
    problems = [line for line in run.output.splitlines() if line.startswith("- ")]
    assert len(problems) >= 2
    assert any("city" in p for p in problems) and any("days" in p for p in problems)


def test_unknown_tool_lists_the_available_tools(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    _register_weather(toolbox)

    def ping() -> str:
        """Ping."""
        return "pong"

    toolbox.add(ping)
    run = run_one(dispatcher, "get_wether", {"city": "Oslo"})
    assert run.error == "unknown_tool"
    assert run.output == "Unknown tool 'get_wether'. Available tools: weather, ping."


def test_unknown_tool_in_an_empty_toolbox(dispatcher: Dispatcher) -> None:
    run = run_one(dispatcher, "anything")
    assert (run.error, run.output) == (
        "unknown_tool",
        "Unknown tool 'anything'. No tools are available.",
    )


def test_a_disabled_tool_is_unknown(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    _register_weather(toolbox)
    toolbox.disable("weather")
    run = run_one(dispatcher, "weather", {"city": "Oslo"})
    assert run.error == "unknown_tool"
    toolbox.enable("weather")
    assert run_one(dispatcher, "weather", {"city": "Oslo"}).error is None


# --- before / after -----------------------------------------------------------------------------


def test_before_rewrites_the_raw_arguments_before_validation(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    raw_seen: list[dict[str, Any]] = []

    def rename(raw: dict[str, Any]) -> dict[str, Any]:
        raw_seen.append(dict(raw))
        if "town" in raw:
            raw["city"] = raw.pop("town")
        return raw

    def weather(city: str, days: int = 1) -> str:
        """Forecast."""
        return f"{city}:{days}"

    toolbox.add(weather, before=rename)
    run = run_one(dispatcher, "weather", '{"town": "Lyon", "days": "2"}')
    assert (run.error, run.output) == (None, "Lyon:2")
    assert raw_seen == [{"town": "Lyon", "days": "2"}]  # raw: not yet coerced
    sent = {"town": "Nice"}
    run = run_one(dispatcher, "weather", sent)
    assert (run.output, run.arguments, sent) == ("Nice:1", {"town": "Nice"}, {"town": "Nice"})


def test_before_raising_argument_error_is_invalid_arguments(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    def refuse(raw: dict[str, Any]) -> dict[str, Any]:
        raise ArgumentError(["city: must be in Europe (got 'Lima')"])

    def weather(city: str) -> str:
        """Forecast."""
        raise AssertionError("not called")

    toolbox.add(weather, before=refuse)
    run = run_one(dispatcher, "weather", {"city": "Lima"})
    assert run.error == "invalid_arguments"
    assert "- city: must be in Europe (got 'Lima')" in run.output


def test_before_raising_anything_else_is_a_tool_error(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    def broken(raw: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("zone")

    def weather(city: str) -> str:
        """Forecast."""
        raise AssertionError("not called")

    toolbox.add(weather, before=broken)
    run = run_one(dispatcher, "weather", {"city": "Lima"})
    assert (run.error, run.output) == (
        "tool_error",
        "The before hook of tool 'weather' failed: KeyError: 'zone'",
    )


def test_after_transforms_the_result_before_serialisation(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    def rows() -> list[dict[str, int]]:
        """Rows."""
        return [{"n": 1}, {"n": 2}]

    async def arows() -> list[dict[str, int]]:
        """Rows, async."""
        return [{"n": 3}]

    def summarise(result: list[dict[str, int]]) -> dict[str, Any]:
        return {"count": len(result), "first": result[0]}

    toolbox.add(rows, after=summarise)
    toolbox.add(arows, after=summarise)
    assert run_one(dispatcher, "rows").output == '{"count": 2, "first": {"n": 1}}'
    assert run_one(dispatcher, "arows").output == '{"count": 1, "first": {"n": 3}}'


# --- results ------------------------------------------------------------------------------------


class Colour(Enum):
    RED = "red"


class City(BaseModel):
    name: str
    founded: datetime


@dataclasses.dataclass
class Point:
    x: int
    label: str


class Plain:
    def __str__(self) -> str:
        return "<plain object>"


WHEN = datetime(2024, 5, 1, 12, 30, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ("já as is\n", "já as is\n"),
        (None, ""),
        ({"city": "Zürich", "temp": 21.5}, '{"city": "Zürich", "temp": 21.5}'),
        ([1, "二", None, True], '[1, "二", null, true]'),
        (("a", 1), '["a", 1]'),
        (City(name="Köln", founded=WHEN), '{"name": "Köln", "founded": "2024-05-01T12:30:00Z"}'),
        (Point(x=1, label="ü"), '{"x": 1, "label": "ü"}'),
        (
            {
                "when": WHEN,
                "id": UUID("12345678-1234-5678-1234-567812345678"),
                "price": Decimal("1.50"),
                "colour": Colour.RED,
                "where": Point(x=2, label="p"),
            },
            '{"when": "2024-05-01T12:30:00Z", "id": "12345678-1234-5678-1234-567812345678", '
            '"price": "1.50", "colour": "red", "where": {"x": 2, "label": "p"}}',
        ),
        ({"odd": Plain()}, '{"odd": "<plain object>"}'),
        (42, "42"),
        (2.5, "2.5"),
        (Plain(), "<plain object>"),
    ],
    ids=lambda v: type(v).__name__,
)
def test_results_are_serialised(
    toolbox: Toolbox, dispatcher: Dispatcher, result: Any, expected: str
) -> None:
    def produce() -> Any:
        """Produce the result."""
        return result

    toolbox.add(produce)
    run = run_one(dispatcher, "produce")
    assert (run.error, run.output) == (None, expected)


def test_long_outputs_are_cut_with_a_marker_that_says_how_much(toolbox: Toolbox) -> None:
    def big() -> str:
        """Big."""
        return "x" * 1000

    def fits() -> str:
        """Exactly at the limit."""
        return "y" * 200

    toolbox.add(big)
    toolbox.add(fits)
    with Dispatcher(toolbox, max_output_chars=200) as dispatcher:
        output = run_one(dispatcher, "big").output
        assert run_one(dispatcher, "fits").output == "y" * 200
    assert len(output) <= 200
    kept = output.index("\n[")
    assert output[:kept] == "x" * kept
    assert output[kept:] == f"\n[... output truncated: {1000 - kept} of 1000 characters cut ...]"


def test_a_cut_never_keeps_the_start_of_a_secret(
    toolbox: Toolbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long output cut where a registered secret begins keeps none of it: what is kept goes
    on to the journal and the daemon's clients, where masking needs the whole secret."""
    from bridge import errors

    secret = "long-secret-" + "0123456789abcdef" * 8
    monkeypatch.setattr(errors, "_extra_secrets", {secret})

    def padded(n: int) -> str:
        """Padding, then the secret (a file a read tool returns)."""
        return "A" * n + secret

    toolbox.add(padded)
    with Dispatcher(toolbox, max_output_chars=200) as dispatcher:
        outputs = [run_one(dispatcher, "padded", {"n": n}).output for n in range(61, 200)]
    for output in outputs:
        assert len(output) <= 200
        kept = output.index("\n[")
        assert set(output[:kept]) == {"A"}, output[:kept]


def test_a_cut_keeps_no_part_of_a_secret_that_another_one_overlaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A whole secret just before the cut whose last characters begin another registered
    secret is kept whole, and one the cut falls inside is dropped whole."""
    from bridge import errors
    from bridge.tools.output import truncate

    first = "first-secret-" + "0123456789" * 3 + "zq"
    second = "zq" + "abcdefghij" * 3
    monkeypatch.setattr(errors, "_extra_secrets", {first, second})
    for pad in range(0, 120):
        text = "A" * pad + first + "B" * 300
        out = truncate(text, 150)
        kept = out[: out.index("\n[")]
        assert first in kept or first[:1] not in kept[pad:], (pad, kept)
        assert errors.redact(kept).count("[secure]") == kept.count(first)
        assert first[:8] not in errors.redact(kept), (pad, kept)


def test_no_output_limit(toolbox: Toolbox) -> None:
    def big() -> str:
        """Big."""
        return "x" * 50_000

    toolbox.add(big)
    with Dispatcher(toolbox, max_output_chars=None) as dispatcher:
        assert run_one(dispatcher, "big").output == "x" * 50_000


# --- failures -----------------------------------------------------------------------------------


def _register_failing(toolbox: Toolbox) -> None:
    def explode(reason: str) -> str:
        """Fail."""
        raise ValueError(f"cannot do {reason}")

    async def aexplode() -> str:
        """Fail, async."""
        raise LookupError

    toolbox.add(explode)
    toolbox.add(aexplode)


def test_errors_message_gives_type_and_message_without_traceback(
    toolbox: Toolbox, caplog: pytest.LogCaptureFixture
) -> None:
    _register_failing(toolbox)
    caplog.set_level(logging.DEBUG, logger="bridge.tools.dispatch")
    with Dispatcher(toolbox, errors="message") as dispatcher:
        run = run_one(dispatcher, "explode", {"reason": "that"})
        arun = run_one(dispatcher, "aexplode")
    assert (run.error, run.output) == ("tool_error", "ValueError: cannot do that")
    assert (arun.error, arun.output) == ("tool_error", "LookupError")
    logged = [r for r in caplog.records if r.name == "bridge.tools.dispatch" and r.exc_info]
    assert len(logged) == 2  # the traceback goes to the log, not to the model
    assert {r.levelno for r in logged} == {logging.DEBUG}  # a traceback is for -v only
    failures = [r for r in caplog.records if getattr(r, "tool_failure", False) and not r.exc_info]
    assert [r.levelno for r in failures] == [logging.WARNING] * 2  # one line per failure
    assert "Traceback" in caplog.text and "Traceback" not in run.output


def test_errors_message_masks_secrets(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    def connect() -> str:
        """Connect."""
        raise PermissionError("login failed with api_key=sk-123456789 for bob")

    toolbox.add(connect)
    output = run_one(dispatcher, "connect").output
    assert "sk-123456789" not in output
    assert output == "PermissionError: login failed with api_key=[secure] for bob"


def test_errors_hidden_gives_a_fixed_text(
    toolbox: Toolbox, caplog: pytest.LogCaptureFixture
) -> None:
    _register_failing(toolbox)
    with Dispatcher(toolbox, errors="hidden") as dispatcher:
        run = run_one(dispatcher, "explode", {"reason": "secret stuff"})
    assert (run.error, run.output) == ("tool_error", "The tool failed; details were logged.")
    assert "secret stuff" in caplog.text  # ... and the details really were logged


def test_errors_raise_re_raises_from_run_and_arun(
    toolbox: Toolbox, caplog: pytest.LogCaptureFixture
) -> None:
    _register_failing(toolbox)
    caplog.set_level(logging.DEBUG, logger="bridge.tools.dispatch")
    with Dispatcher(toolbox, errors="raise") as dispatcher:
        with pytest.raises(ValueError, match="cannot do this"):
            dispatcher.run([call("explode", {"reason": "this"})])
        with pytest.raises(LookupError):
            asyncio.run(dispatcher.arun([call("aexplode")]))
        # Outputs that are not tool errors are still outputs.
        assert run_one(dispatcher, "nope").error == "unknown_tool"
    assert any(r.exc_info for r in caplog.records if r.name == "bridge.tools.dispatch")


def test_errors_raise_cancels_the_rest_of_the_batch(toolbox: Toolbox) -> None:
    _register_failing(toolbox)
    cancelled = threading.Event()

    def slow(ctx: ToolContext) -> str:
        """Wait until cancelled."""
        ctx.cancelled.wait(WAIT)
        if ctx.cancelled.is_set():
            cancelled.set()
        return "done"

    toolbox.add(slow)
    with Dispatcher(toolbox, errors="raise") as dispatcher, pytest.raises(ValueError):
        dispatcher.run([call("slow", call_id="a"), call("explode", {"reason": "x"}, "b")])
    assert cancelled.wait(WAIT)


# --- concurrency --------------------------------------------------------------------------------


def test_sync_calls_of_a_batch_overlap(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    # The barrier only opens when all 8 calls are inside the tool at the same time.
    barrier = threading.Barrier(8, timeout=WAIT)

    def meet(i: int) -> int:
        """Meet."""
        barrier.wait()
        return i

    toolbox.add(meet)
    runs = dispatcher.run([call("meet", {"i": i}, call_id=str(i)) for i in range(8)])
    assert [(r.error, r.output) for r in runs] == [(None, str(i)) for i in range(8)]


def test_async_calls_of_a_batch_overlap(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    arrived: list[int] = []
    everyone: list[asyncio.Event] = []

    async def meet(i: int) -> int:
        """Meet, async."""
        if not everyone:
            everyone.append(asyncio.Event())
        arrived.append(i)
        if len(arrived) == 8:
            everyone[0].set()
        await asyncio.wait_for(everyone[0].wait(), WAIT)
        return i

    toolbox.add(meet)
    runs = dispatcher.run([call("meet", {"i": i}, call_id=str(i)) for i in range(8)])
    assert [(r.error, r.output) for r in runs] == [(None, str(i)) for i in range(8)]


def test_sync_and_async_calls_overlap_in_arun(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    barrier = threading.Barrier(4, timeout=WAIT)

    def meet() -> str:
        """Meet."""
        barrier.wait()
        return "sync"

    async def ameet() -> str:
        """Meet from the loop, without blocking it."""
        await asyncio.to_thread(barrier.wait)
        return "async"

    toolbox.add(meet)
    toolbox.add(ameet)
    calls = [call("meet", call_id="1"), call("ameet", call_id="2")] * 2
    runs = asyncio.run(dispatcher.arun(calls))
    assert [r.output for r in runs] == ["sync", "async", "sync", "async"]


@pytest.mark.parametrize("bound", [1, 3])
def test_max_concurrency_bounds_a_batch(toolbox: Toolbox, bound: int) -> None:
    lock = threading.Lock()
    now = {"running": 0, "most": 0}
    # Calls go through in groups of `bound`: the barrier proves `bound` run at once...
    barrier = threading.Barrier(bound, timeout=WAIT)

    def work() -> str:
        """Work."""
        with lock:
            now["running"] += 1
            now["most"] = max(now["most"], now["running"])
        barrier.wait()
        with lock:
            now["running"] -= 1
        return "ok"

    toolbox.add(work)
    with Dispatcher(toolbox, max_concurrency=bound) as dispatcher:
        runs = dispatcher.run([call("work", call_id=str(i)) for i in range(3 * bound)])
    assert all(r.error is None for r in runs), [r.output for r in runs]
    assert now["most"] == bound  # ... and the count proves no more ever did


def test_arun_does_not_block_the_callers_loop(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    # The sync tool can only finish if a coroutine on the caller's loop gets to run meanwhile.
    released = threading.Event()

    def wait_for_loop() -> str:
        """Wait."""
        return "released" if released.wait(WAIT) else "loop was blocked"

    toolbox.add(wait_for_loop)

    async def main() -> list[ToolRun]:
        task = asyncio.ensure_future(dispatcher.arun([call("wait_for_loop")]))
        await asyncio.sleep(0)
        released.set()
        return await task

    [run] = asyncio.run(main())
    assert run.output == "released"


def test_run_works_inside_a_running_event_loop(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    async def double(n: int) -> int:
        """Double."""
        return 2 * n

    toolbox.add(double)

    async def main() -> str:
        return run_one(dispatcher, "double", {"n": 21}).output

    assert asyncio.run(main()) == "42"


def test_run_works_from_many_threads_at_once(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    def square(n: int) -> int:
        """Square."""
        return n * n

    toolbox.add(square)
    results: dict[int, str] = {}

    def worker(n: int) -> None:
        results[n] = run_one(dispatcher, "square", {"n": n}).output

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert results == {n: str(n * n) for n in range(6)}


def test_run_from_an_async_tool_of_the_same_dispatcher_is_refused(toolbox: Toolbox) -> None:
    holder: list[Dispatcher] = []

    async def nested() -> str:
        """Call the dispatcher from inside."""
        return holder[0].run([call("nested")])[0].output

    toolbox.add(nested)
    with Dispatcher(toolbox) as dispatcher:
        holder.append(dispatcher)
        run = run_one(dispatcher, "nested")
    assert run.error == "tool_error"
    assert "use `await dispatcher.arun(...)` there" in run.output


# --- timeouts -----------------------------------------------------------------------------------


def test_a_timed_out_sync_tool_is_abandoned_and_cancelled(toolbox: Toolbox) -> None:
    release = threading.Event()
    saw_cancel: list[bool] = []

    def stuck(ctx: ToolContext) -> str:
        """Hang until released."""
        release.wait(WAIT)
        saw_cancel.append(ctx.cancelled.is_set())
        return "too late"

    def quick() -> str:
        """Quick."""
        return "quick"

    toolbox.add(stuck, timeout=0.05)
    toolbox.add(quick)
    try:
        with Dispatcher(toolbox, max_concurrency=2) as dispatcher:
            # More hung calls than the concurrency bound, over several batches: nothing starves.
            for batch in range(3):
                runs = dispatcher.run(
                    [call("stuck", call_id=f"{batch}-a"), call("stuck", call_id=f"{batch}-b")]
                )
                for run in runs:
                    assert run.error == "timeout"
                    assert run.output == (
                        "The tool 'stuck' timed out after 0.05 seconds and was abandoned; "
                        "it returned no result."
                    )
            assert run_one(dispatcher, "quick").output == "quick"
    finally:
        release.set()


def test_the_default_timeout_applies_to_tools_without_their_own(toolbox: Toolbox) -> None:
    release = threading.Event()

    def stuck() -> str:
        """Hang."""
        release.wait(WAIT)
        return "late"

    toolbox.add(stuck)
    try:
        with Dispatcher(toolbox, default_timeout=0.05) as dispatcher:
            run = run_one(dispatcher, "stuck")
        assert run.error == "timeout" and "after 0.05 seconds" in run.output
    finally:
        release.set()


def test_a_timed_out_async_tool_is_cancelled(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    cancelled = threading.Event()
    flags: list[bool] = []

    async def slow(ctx: ToolContext) -> str:
        """Sleep long."""
        try:
            await asyncio.sleep(WAIT)
        except asyncio.CancelledError:
            flags.append(ctx.cancelled.is_set())
            cancelled.set()
            raise
        return "late"

    toolbox.add(slow, timeout=0.05)
    run = run_one(dispatcher, "slow")
    assert (run.error, run.output) == (
        "timeout",
        "The tool 'slow' timed out after 0.05 seconds and was abandoned; it returned no result.",
    )
    assert cancelled.wait(WAIT)
    assert flags == [True]


def test_an_async_tool_that_ignores_cancellation_does_not_hold_the_batch(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    release = threading.Event()

    async def stubborn() -> str:
        """Refuse to stop."""
        while not release.is_set():
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                continue
        return "late"

    toolbox.add(stubborn, timeout=0.05)
    try:
        assert run_one(dispatcher, "stubborn").error == "timeout"
    finally:
        release.set()


def test_a_sync_tool_returning_an_awaitable_is_awaited(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    async def later(n: int) -> int:
        return n + 1

    def looks_sync(n: int) -> Any:
        """Return a coroutine."""
        return later(n)

    toolbox.add(looks_sync, after=lambda r: r * 10)
    assert run_one(dispatcher, "looks_sync", {"n": 1}).output == "20"


# --- ToolContext --------------------------------------------------------------------------------


def _ctx_tools(toolbox: Toolbox, seen: list[ToolContext]) -> None:
    def first(ctx: ToolContext, a: int) -> int:
        """Context first."""
        seen.append(ctx)
        return a

    def middle(a: int, ctx: ToolContext, b: int = 0) -> int:
        """Context in the middle."""
        seen.append(ctx)
        return a + b

    async def last(a: int, ctx: ToolContext) -> int:
        """Context last, async."""
        seen.append(ctx)
        return a

    for fn in (first, middle, last):
        toolbox.add(fn)


@pytest.mark.parametrize("name", ["first", "middle", "last"])
def test_the_context_is_injected_in_any_position(
    toolbox: Toolbox, dispatcher: Dispatcher, name: str
) -> None:
    seen: list[ToolContext] = []
    _ctx_tools(toolbox, seen)
    assert "ctx" not in toolbox.get(name).parameters["properties"]  # type: ignore[union-attr]
    scope = ConversationScope("conv-9", end_user_id="user-3")
    [run] = dispatcher.run([call(name, {"a": 5}, call_id="call-7")], scope=scope)
    assert (run.error, run.output) == (None, "5")
    [ctx] = seen
    assert isinstance(ctx, ToolContext)
    assert (ctx.conversation_id, ctx.call_id, ctx.end_user_id) == ("conv-9", "call-7", "user-3")
    assert ctx.tool_name == name
    assert ctx.logger.name == f"bridge.tool.{name}"
    assert not ctx.cancelled.is_set()


def test_the_model_cannot_pass_the_context(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    _ctx_tools(toolbox, [])
    run = run_one(dispatcher, "first", {"a": 1, "ctx": "forged"})
    assert run.error == "invalid_arguments" and "unknown argument 'ctx'" in run.output


def test_state_is_shared_across_batches_of_one_conversation(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    def remember(item: str, ctx: ToolContext) -> list[str]:
        """Remember an item."""
        items: list[str] = ctx.state.setdefault("items", [])
        items.append(item)
        return items

    toolbox.add(remember)
    one, two = ConversationScope("one"), ConversationScope("two")
    assert run_one(dispatcher, "remember", {"item": "a"}, scope=one).output == '["a"]'
    assert run_one(dispatcher, "remember", {"item": "b"}, scope=one).output == '["a", "b"]'
    assert run_one(dispatcher, "remember", {"item": "z"}, scope=two).output == '["z"]'
    # Without a scope each batch is its own one-off conversation.
    assert run_one(dispatcher, "remember", {"item": "x"}).output == '["x"]'
    assert run_one(dispatcher, "remember", {"item": "y"}).output == '["y"]'


class Connection:
    opened: ClassVar[list[Connection]] = []

    def __init__(self) -> None:
        self.closed = False
        Connection.opened.append(self)

    def close(self) -> None:
        self.closed = True


def test_resources_live_as_long_as_the_conversation(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    Connection.opened.clear()

    def query(ctx: ToolContext) -> int:
        """Use the conversation's connection."""
        return id(ctx.resource(Connection, pool_size=2))

    toolbox.add(query)
    one, two = ConversationScope("one"), ConversationScope("two")
    first = dispatcher.run([call("query", call_id=f"q{i}") for i in range(4)], scope=one)
    again = run_one(dispatcher, "query", scope=one)
    other = run_one(dispatcher, "query", scope=two)
    assert {r.output for r in first} == {again.output}  # one per conversation, even in parallel
    assert other.output != again.output
    assert len(Connection.opened) == 2
    one.close()
    assert [c.closed for c in Connection.opened] == [True, False]
    two.close()
    assert all(c.closed for c in Connection.opened)


def test_a_one_off_batch_releases_its_resources_at_its_end(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    Connection.opened.clear()

    def query(ctx: ToolContext) -> str:
        """Use a connection."""
        ctx.resource(Connection, pool_size=2)
        return "ok"

    toolbox.add(query)
    run_one(dispatcher, "query")
    assert len(Connection.opened) == 1 and Connection.opened[0].closed


def test_pool_exhaustion_is_a_tool_error_that_names_the_pool_size(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    def make_session() -> Connection:
        return Connection()

    def browse(ctx: ToolContext) -> str:
        """Browse."""
        ctx.resource(make_session, pool_size=1, timeout=0.05)
        return "ok"

    toolbox.add(browse)
    with ConversationScope("holder") as holder, ConversationScope("late") as late:
        assert run_one(dispatcher, "browse", scope=holder).output == "ok"
        run = run_one(dispatcher, "browse", scope=late)
    assert run.error == "tool_error"
    assert run.output.startswith("PoolExhaustedError: no resource from ")
    assert "pool_size=1" in run.output


def test_closing_a_conversation_waits_for_abandoned_calls_before_releasing(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    Connection.opened.clear()
    release = threading.Event()

    def hold(ctx: ToolContext) -> str:
        """Use the connection past the timeout."""
        ctx.resource(Connection, pool_size=2)
        release.wait(WAIT)
        return "late"

    toolbox.add(hold, timeout=0.05)
    scope = ConversationScope("one")
    try:
        assert run_one(dispatcher, "hold", scope=scope).error == "timeout"
        scope.close()
        [conn] = Connection.opened
        assert not conn.closed  # the abandoned call still uses it
    finally:
        release.set()
    deadline = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if conn.closed:
            break
        deadline.wait(0.01)
    assert conn.closed


# --- callbacks ----------------------------------------------------------------------------------


def test_callbacks_run_in_the_calling_thread_in_order(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    toolbox.add(echo)
    events: list[tuple[str, str, str]] = []
    me = threading.current_thread().name
    runs = dispatcher.run(
        [call("echo", {"text": "a"}, "1"), call("nope", call_id="2")],
        on_start=lambda c: events.append(("start", c.call_id, threading.current_thread().name)),
        on_finish=lambda r: events.append(("finish", r.call_id, threading.current_thread().name)),
    )
    assert {thread for _, _, thread in events} == {me}
    for call_id in ("1", "2"):
        kinds = [kind for kind, cid, _ in events if cid == call_id]
        assert kinds == ["start", "finish"]
    assert len(runs) == 2


def test_arun_callbacks_run_on_the_callers_loop(toolbox: Toolbox, dispatcher: Dispatcher) -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    toolbox.add(echo)
    loops: list[asyncio.AbstractEventLoop] = []
    finished: list[ToolRun] = []

    async def main() -> asyncio.AbstractEventLoop:
        await dispatcher.arun(
            [call("echo", {"text": "a"})],
            on_start=lambda _: loops.append(asyncio.get_running_loop()),
            on_finish=finished.append,
        )
        return asyncio.get_running_loop()

    loop = asyncio.run(main())
    assert loops == [loop]
    assert [r.output for r in finished] == ["a"]


@pytest.mark.parametrize("use_arun", [False, True])
def test_a_failing_callback_is_logged_and_loses_nothing(
    toolbox: Toolbox, dispatcher: Dispatcher, caplog: pytest.LogCaptureFixture, use_arun: bool
) -> None:
    def echo(text: str) -> str:
        """Echo."""
        return text

    toolbox.add(echo)

    def broken(_: Any) -> None:
        raise RuntimeError("ui bug")

    calls = [call("echo", {"text": "a"})]
    if use_arun:
        runs = asyncio.run(dispatcher.arun(calls, on_start=broken, on_finish=broken))
    else:
        runs = dispatcher.run(calls, on_start=broken, on_finish=broken)
    assert [r.output for r in runs] == ["a"]
    failures = [r for r in caplog.records if r.getMessage().startswith("progress callback")]
    assert len(failures) == 2
    assert all(r.exc_info and "ui bug" in str(r.exc_info[1]) for r in failures)


# --- reject, options, lifecycle ----------------------------------------------------------------


def test_reject_builds_a_record_without_running_anything(
    toolbox: Toolbox, dispatcher: Dispatcher
) -> None:
    ran: list[bool] = []

    def delete_all() -> str:
        """Dangerous."""
        ran.append(True)
        return "deleted"

    toolbox.add(delete_all, confirm=True)
    run = dispatcher.reject(call("delete_all", {"really": True}, "d1"))
    assert (run.call_id, run.name, run.arguments) == ("d1", "delete_all", {"really": True})
    assert run.error == "rejected"
    assert run.output == "The tool call was not run: rejected by the user"
    assert run.duration_ms == 0.0
    assert dispatcher.reject(call("delete_all"), "too risky").output.endswith("too risky")
    assert ran == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_concurrency": 0}, "max_concurrency must be an integer >= 1, got 0"),
        ({"max_concurrency": -2}, "max_concurrency must be an integer >= 1, got -2"),
        ({"max_concurrency": 2.5}, "max_concurrency must be an integer >= 1, got 2.5"),
        ({"max_concurrency": True}, "max_concurrency must be an integer >= 1, got True"),
        ({"default_timeout": 0}, "default_timeout must be a positive, finite number"),
        ({"default_timeout": -1.0}, "default_timeout must be a positive, finite number"),
        ({"default_timeout": float("inf")}, "default_timeout must be a positive, finite number"),
        ({"default_timeout": "60"}, "default_timeout must be a positive, finite number"),
        ({"errors": "bogus"}, "errors must be one of 'message', 'hidden', 'raise', got 'bogus'"),
        ({"max_output_chars": 10}, "max_output_chars must be an integer >= 100 (or None"),
        ({"max_output_chars": 1.5e4}, "max_output_chars must be an integer >= 100"),
    ],
)
def test_bad_options_are_usage_errors(
    toolbox: Toolbox, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError) as info:
        Dispatcher(toolbox, **options)
    assert message in str(info.value)


def test_a_toolbox_is_required() -> None:
    with pytest.raises(UsageError, match=r"toolbox must be a bridge\.Toolbox"):
        Dispatcher([len])  # type: ignore[arg-type]


def test_a_closed_dispatcher_refuses_to_run(toolbox: Toolbox) -> None:
    dispatcher = Dispatcher(toolbox)
    assert "max_concurrency=8" in repr(dispatcher)
    dispatcher.close()
    dispatcher.close()  # idempotent
    with pytest.raises(UsageError, match="this Dispatcher is closed"):
        dispatcher.run([call("x")])


def test_a_tool_logs_through_its_context_logger(
    toolbox: Toolbox, dispatcher: Dispatcher, caplog: pytest.LogCaptureFixture
) -> None:
    def chatty(ctx: ToolContext) -> str:
        """Log something."""
        ctx.logger.warning("hello from %s", ctx.call_id)
        return "ok"

    toolbox.add(chatty)
    with caplog.at_level(logging.WARNING, logger="bridge.tool"):
        run_one(dispatcher, "chatty")
    assert [
        (r.name, r.getMessage()) for r in caplog.records if r.name.startswith("bridge.tool.")
    ] == [("bridge.tool.chatty", "hello from c1")]


# --- iter_run: progress as events, on both paths ---------------------------------------------


@pytest.mark.parametrize("mixed", [False, True], ids=["sync-only", "sync-and-async"])
def test_iter_run_yields_progress_and_returns_the_runs(toolbox: Toolbox, mixed: bool) -> None:
    from bridge.types import ToolCallFinished, ToolCallStarted

    def double(x: int) -> int:
        return 2 * x

    async def triple(x: int) -> int:
        return 3 * x

    toolbox.add(double)
    toolbox.add(triple)
    calls = [call("double", {"x": 1}, "a"), call("double", {"x": "2"}, "b")]
    if mixed:  # an async tool sends the batch through the loop thread
        calls.append(call("triple", {"x": 3}, "c"))
    with Dispatcher(toolbox) as dispatcher:
        updates = dispatcher.iter_run(calls)
        events: list[Any] = []
        while True:
            try:
                events.append(next(updates))
            except StopIteration as done:
                runs = done.value
                break
    started = [e.call.call_id for e in events if isinstance(e, ToolCallStarted)]
    finished = {e.run.call_id: e.run.output for e in events if isinstance(e, ToolCallFinished)}
    assert sorted(started) == sorted(c.call_id for c in calls)
    assert [r.call_id for r in runs] == [c.call_id for c in calls]
    assert finished == {r.call_id: r.output for r in runs}
    assert [r.output for r in runs][:2] == ["2", "4"]


def test_closing_iter_run_early_cancels_the_running_calls(toolbox: Toolbox) -> None:
    from bridge.types import ToolCallStarted

    seen: list[ToolContext] = []
    entered = threading.Event()

    def slow(ctx: ToolContext) -> str:
        seen.append(ctx)
        entered.set()
        ctx.cancelled.wait(30)
        return "stopped"

    toolbox.add(slow)
    with Dispatcher(toolbox) as dispatcher:
        updates = dispatcher.iter_run([call("slow", {}, "s1")])
        assert isinstance(next(updates), ToolCallStarted)
        assert entered.wait(30)
        updates.close()
        assert seen[0].cancelled.is_set()


def test_a_sync_batch_respects_max_concurrency_and_timeouts(toolbox: Toolbox) -> None:
    import time as _time

    lock = threading.Lock()
    state = {"now": 0, "peak": 0}
    release = threading.Event()

    def busy(n: int) -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        release.wait(0.05)
        with lock:
            state["now"] -= 1
        return n

    def stuck() -> str:
        _time.sleep(5)
        return "late"

    toolbox.add(busy)
    toolbox.add(stuck, timeout=0.2)
    with Dispatcher(toolbox, max_concurrency=2) as dispatcher:
        runs = dispatcher.run(
            [call("busy", {"n": i}, f"b{i}") for i in range(6)] + [call("stuck", {}, "st")]
        )
    assert state["peak"] <= 2
    assert [r.output for r in runs[:6]] == [str(i) for i in range(6)]
    assert runs[6].error == "timeout"
    assert "timed out after 0.2 seconds" in runs[6].output


def test_a_tool_failure_is_an_output_with_a_warning_not_a_traceback(
    toolbox: Toolbox, caplog: pytest.LogCaptureFixture
) -> None:
    from bridge.tools import ToolError

    def find(name: str) -> str:
        raise ToolError(f"no employee called {name}")

    def buggy(name: str) -> str:
        raise KeyError(name)

    toolbox.add(find)
    toolbox.add(buggy)
    with caplog.at_level(logging.WARNING, logger="bridge.tools"), Dispatcher(toolbox) as d:
        expected, bug = d.run(
            [call("find", {"name": "Zoe"}, "f"), call("buggy", {"name": "x"}, "b")]
        )
    assert (expected.error, expected.output) == (
        "tool_error",
        "ToolError: no employee called Zoe",
    )
    assert bug.error == "tool_error"
    by_call = {
        r.getMessage().split("call ")[1][:1]: r
        for r in caplog.records
        if getattr(r, "tool_failure", False)
    }
    # Both one warning line naming tool, call and error; a traceback only at DEBUG (-v).
    assert by_call["f"].levelno == logging.WARNING and by_call["f"].exc_info is None
    assert by_call["b"].levelno == logging.WARNING and by_call["b"].exc_info is None
    assert "KeyError: 'x'" in by_call["b"].getMessage()
    assert not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_before_run_is_told_of_each_call_right_before_it_runs(kind: str) -> None:
    """The loop journals "started" there: a call whose arguments fail never starts, and a
    hook that fails keeps its call from running."""
    ran: list[str] = []
    told: list[str] = []

    if kind == "sync":

        def work(n: int) -> int:
            ran.append(f"work {n}")
            return n

    else:

        async def work(n: int) -> int:  # type: ignore[misc]
            ran.append(f"work {n}")
            return n

    def before_run(c: ToolCall) -> None:
        assert f"work {c.arguments}" not in ran, "told before the function runs"
        told.append(c.call_id)
        if c.call_id == "refused":
            raise RuntimeError("the journal is gone")

    box = Toolbox([work])
    with Dispatcher(box) as dispatcher:
        batch = [call("work", {"n": 1}, "a"), call("work", {"n": "x"}, "bad")]
        runs = list_runs(dispatcher.iter_run(batch, before_run=before_run))
        assert told == ["a"] and ran == ["work 1"]
        assert runs[1].error == "invalid_arguments"
        with pytest.raises(RuntimeError, match="journal is gone"):
            list_runs(
                dispatcher.iter_run([call("work", {"n": 2}, "refused")], before_run=before_run)
            )
        assert ran == ["work 1"], "a call whose hook failed never ran"


def list_runs(updates: Any) -> list[ToolRun]:
    while True:
        try:
            next(updates)
        except StopIteration as done:
            return list(done.value)
