"""ToolContext and ConversationScope: shared state, per-conversation resources, bounded pools."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from bridge.errors import UsageError
from bridge.tools.context import ConversationScope, PoolExhaustedError, ToolContext
from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolbox import Toolbox
from bridge.types import ToolCall

WAIT = 10.0
"""A generous bound that only stops a broken test from hanging."""


class Conn:
    """A resource with `close()`, counting what happens to it."""

    made: list[Conn]

    def __init__(self) -> None:
        self.closed = False
        self.closed_in: str | None = None

    def close(self) -> None:
        self.closed = True
        self.closed_in = threading.current_thread().name


def conn_factory() -> tuple[Any, list[Conn]]:
    """A fresh factory (so a fresh pool) and the list of what it made."""
    made: list[Conn] = []

    def make_conn() -> Conn:
        conn = Conn()
        made.append(conn)
        return conn

    return make_conn, made


@pytest.fixture
def dispatcher() -> Iterator[Dispatcher]:
    with Dispatcher(Toolbox()) as d:
        yield d


# --- ToolContext --------------------------------------------------------------------------------


def test_context_carries_the_conversation_the_call_and_a_tool_logger() -> None:
    scope = ConversationScope("conv-1", end_user_id="user-7")
    cancelled = threading.Event()
    ctx = ToolContext(call_id="call-1", tool_name="lookup", scope=scope, cancelled=cancelled)
    assert ctx.conversation_id == "conv-1"
    assert ctx.end_user_id == "user-7"
    assert ctx.call_id == "call-1"
    assert ctx.tool_name == "lookup"
    assert ctx.cancelled is cancelled
    assert isinstance(ctx.logger, logging.Logger)
    assert ctx.logger.name == "bridge.tool.lookup"
    assert ctx.state is scope.state
    assert "lookup" in repr(ctx) and "conv-1" in repr(ctx)


def test_context_made_by_hand_gets_its_own_scope_and_cancel_event() -> None:
    ctx = ToolContext(call_id="c", tool_name="t")
    assert ctx.conversation_id is None
    assert ctx.end_user_id is None
    assert not ctx.cancelled.is_set()
    ctx.state["k"] = 1
    assert ctx.scope.state == {"k": 1}


def test_state_is_shared_by_the_calls_of_a_conversation_only() -> None:
    one, two = ConversationScope("one"), ConversationScope("two")
    ToolContext(call_id="a", tool_name="t", scope=one).state["seen"] = ["a"]
    ToolContext(call_id="b", tool_name="t", scope=one).state["seen"].append("b")
    assert one.state == {"seen": ["a", "b"]}
    assert ToolContext(call_id="c", tool_name="t", scope=two).state == {}


# --- resources ------------------------------------------------------------------------------------


def test_same_conversation_gets_the_same_resource_and_others_their_own() -> None:
    make_conn, made = conn_factory()
    one, two = ConversationScope("one"), ConversationScope("two")
    first = ToolContext(call_id="a", tool_name="t", scope=one).resource(make_conn, pool_size=2)
    again = ToolContext(call_id="b", tool_name="t", scope=one).resource(make_conn, pool_size=2)
    other = ToolContext(call_id="c", tool_name="t", scope=two).resource(make_conn, pool_size=2)
    assert first is again
    assert other is not first
    assert made == [first, other]
    one.close()
    two.close()


def test_closing_the_scope_closes_its_resources_and_frees_the_slot() -> None:
    make_conn, made = conn_factory()
    with ConversationScope("one") as one:
        conn = one.resource(make_conn, pool_size=1)
        assert not conn.closed
    assert conn.closed
    assert one.closed
    # The single slot is free again: another conversation gets a fresh resource at once.
    with ConversationScope("two") as two:
        fresh = two.resource(make_conn, pool_size=1, timeout=0)
    assert fresh is not conn
    assert made == [conn, fresh]


def test_close_is_idempotent() -> None:
    make_conn, _ = conn_factory()
    scope = ConversationScope("one")
    conn = scope.resource(make_conn, pool_size=1)
    scope.close()
    conn.closed = False
    scope.close()
    assert not conn.closed  # not closed twice
    assert "closed" in repr(scope)


def test_an_exhausted_pool_waits_then_names_the_pool_size() -> None:
    make_conn, _ = conn_factory()
    holder, waiter = ConversationScope("holder"), ConversationScope("waiter")
    holder.resource(make_conn, pool_size=1)
    with pytest.raises(PoolExhaustedError) as info:
        waiter.resource(make_conn, pool_size=1, timeout=0.05)
    message = str(info.value)
    assert "pool_size=1" in message
    assert "make_conn" in message
    assert "0.05 s" in message
    assert isinstance(info.value, TimeoutError)
    holder.close()
    # The failed attempt left nothing behind: the waiter can try again and succeed.
    assert waiter.resource(make_conn, pool_size=1, timeout=0) is not None
    waiter.close()


def test_a_waiter_gets_the_slot_as_soon_as_another_conversation_ends() -> None:
    make_conn, _ = conn_factory()
    holder, waiter = ConversationScope("holder"), ConversationScope("waiter")
    held = holder.resource(make_conn, pool_size=1)
    got: list[Conn] = []
    thread = threading.Thread(
        target=lambda: got.append(waiter.resource(make_conn, pool_size=1, timeout=WAIT))
    )
    thread.start()
    holder.close()
    thread.join(WAIT)
    assert got and got[0] is not held and held.closed
    waiter.close()


def test_concurrent_calls_of_one_conversation_share_one_resource() -> None:
    make_conn, made = conn_factory()
    scope = ConversationScope("one")
    barrier = threading.Barrier(4, timeout=WAIT)
    got: list[Conn] = []

    def call() -> None:
        barrier.wait()
        got.append(scope.resource(make_conn, pool_size=1, timeout=WAIT))

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert len(got) == 4 and all(conn is got[0] for conn in got)
    assert len(made) == 1
    scope.close()


def test_a_context_manager_resource_is_entered_and_exited() -> None:
    events: list[str] = []

    class Session:
        def __enter__(self) -> str:
            events.append("enter")
            return "session-handle"

        def __exit__(self, *exc: object) -> None:
            events.append("exit")

    with ConversationScope("one") as scope:
        assert scope.resource(Session, pool_size=1) == "session-handle"
        assert events == ["enter"]
    assert events == ["enter", "exit"]


def test_a_resource_without_close_is_dropped_and_its_slot_freed() -> None:
    def make_plain() -> dict[str, int]:
        return {"n": 1}

    with ConversationScope("one") as scope:
        assert scope.resource(make_plain, pool_size=1) == {"n": 1}
    with ConversationScope("two") as scope:
        assert scope.resource(make_plain, pool_size=1, timeout=0) == {"n": 1}


def test_a_failing_closer_is_logged_and_the_slot_freed(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def close(self) -> None:
            raise OSError("disk on fire")

    with ConversationScope("one") as scope:
        scope.resource(Broken, pool_size=1)
    assert "closing a resource" in caplog.text and "disk on fire" in caplog.text
    with ConversationScope("two") as scope:
        scope.resource(Broken, pool_size=1, timeout=0)


def test_a_failing_factory_raises_to_the_tool_and_frees_the_slot() -> None:
    calls: list[int] = []

    def flaky() -> Conn:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("db down")
        return Conn()

    scope = ConversationScope("one")
    with pytest.raises(ConnectionError, match="db down"):
        scope.resource(flaky, pool_size=1, timeout=0)
    assert isinstance(scope.resource(flaky, pool_size=1, timeout=0), Conn)
    scope.close()


def test_resource_after_the_conversation_ended_is_an_error() -> None:
    make_conn, _ = conn_factory()
    scope = ConversationScope("gone")
    scope.close()
    with pytest.raises(UsageError, match="conversation gone has ended"):
        scope.resource(make_conn)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"pool_size": 0}, "pool_size must be an integer >= 1, got 0"),
        ({"pool_size": 2.5}, "pool_size must be an integer >= 1, got 2.5"),
        ({"pool_size": True}, "pool_size must be an integer >= 1, got True"),
        ({"timeout": -1}, "timeout must be a number of seconds >= 0, got -1"),
        ({"timeout": "soon"}, "timeout must be a number of seconds >= 0, got 'soon'"),
    ],
)
def test_bad_resource_options_are_usage_errors(options: dict[str, Any], match: str) -> None:
    make_conn, _ = conn_factory()
    with pytest.raises(UsageError, match=match):
        ConversationScope("one").resource(make_conn, **options)


def test_a_factory_that_is_not_callable_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="factory must be callable, got str"):
        ConversationScope("one").resource("sqlite://")  # type: ignore[arg-type]


def test_one_factory_with_two_pool_sizes_is_a_usage_error() -> None:
    make_conn, _ = conn_factory()
    with ConversationScope("one") as scope:
        scope.resource(make_conn, pool_size=2)
    with pytest.raises(UsageError, match="already has pool_size=2, got pool_size=3"):
        ConversationScope("two").resource(make_conn, pool_size=3)


def test_sync_resource_with_an_async_factory_points_to_aresource() -> None:
    async def make_async() -> Conn:
        return Conn()

    scope = ConversationScope("one")
    for _ in range(2):  # the second try would find the pool exhausted if the slot leaked
        with pytest.raises(UsageError, match=r"await ctx\.aresource"):
            scope.resource(make_async, pool_size=1, timeout=0)
    scope.close()


# --- async resources ------------------------------------------------------------------------------


class AsyncConn:
    def __init__(self) -> None:
        self.closed_on: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        self.closed_on = asyncio.get_running_loop()


def test_aresource_awaits_async_factories_and_aclose_awaits_aclose() -> None:
    async def make_async() -> AsyncConn:
        await asyncio.sleep(0)
        return AsyncConn()

    async def main() -> tuple[AsyncConn, AsyncConn, asyncio.AbstractEventLoop]:
        scope = ConversationScope("one")
        ctx = ToolContext(call_id="a", tool_name="t", scope=scope)
        first = await ctx.aresource(make_async, pool_size=1)
        second = await ctx.aresource(make_async, pool_size=1)
        await scope.aclose()
        return first, second, asyncio.get_running_loop()

    first, second, loop = asyncio.run(main())
    assert first is second
    assert first.closed_on is loop  # closed on the loop that made it


def test_aresource_enters_an_async_context_manager() -> None:
    events: list[str] = []

    class Browser:
        async def __aenter__(self) -> str:
            events.append("enter")
            return "page"

        async def __aexit__(self, *exc: object) -> None:
            events.append("exit")

    async def main() -> str:
        async with ConversationScope("one") as scope:
            return await scope.aresource(Browser, pool_size=1)

    assert asyncio.run(main()) == "page"
    assert events == ["enter", "exit"]


def test_sync_resource_with_an_async_context_manager_points_to_aresource() -> None:
    class Browser:
        async def __aenter__(self) -> str:
            return "page"

        async def __aexit__(self, *exc: object) -> None:
            return None

    with pytest.raises(UsageError, match=r"await ctx\.aresource"):
        ConversationScope("one").resource(Browser, pool_size=1)


def test_aresource_pool_exhaustion_does_not_block_the_loop() -> None:
    make_conn, _ = conn_factory()
    holder = ConversationScope("holder")
    holder.resource(make_conn, pool_size=1)
    ticks: list[int] = []

    async def ticker() -> None:
        for i in range(3):
            ticks.append(i)
            await asyncio.sleep(0)

    async def main() -> None:
        waiter = ConversationScope("waiter")
        results = await asyncio.gather(
            waiter.aresource(make_conn, pool_size=1, timeout=0.2),
            ticker(),
            return_exceptions=True,
        )
        assert isinstance(results[0], PoolExhaustedError)
        assert "pool_size=1" in str(results[0])

    asyncio.run(main())
    assert ticks == [0, 1, 2]
    holder.close()


def test_sync_close_finishes_async_closers_on_the_loop_that_made_them() -> None:
    # The resource is made by an async tool on the dispatcher's loop thread; the loop then
    # closes the scope from its own thread: aclose() must run on that loop, not a new one.
    async def make_async() -> AsyncConn:
        return AsyncConn()

    toolbox = Toolbox()
    seen: list[AsyncConn] = []

    async def open_session(ctx: ToolContext) -> str:
        """Open a session."""
        seen.append(await ctx.aresource(make_async, pool_size=1))
        return "ok"

    toolbox.add(open_session)
    scope = ConversationScope("one")
    with Dispatcher(toolbox) as dispatcher:
        [run] = dispatcher.run([ToolCall(call_id="1", name="open_session")], scope=scope)
        assert run.error is None, run.output
        loop = dispatcher._runtime.loop().loop
        scope.close()
        assert seen[0].closed_on is loop


def test_sync_resource_on_an_event_loop_does_not_wait_for_a_slot() -> None:
    make_conn, _ = conn_factory()
    holder = ConversationScope("holder")
    holder.resource(make_conn, pool_size=1)

    async def main() -> None:
        with pytest.raises(PoolExhaustedError) as info:
            ConversationScope("waiter").resource(make_conn, pool_size=1, timeout=WAIT)
        assert "pool_size=1" in str(info.value)
        assert "use `await ctx.aresource(...)` in async tools" in str(info.value)
        # A free slot is still taken at once.
        holder.close()
        with ConversationScope("next") as scope:
            assert isinstance(scope.resource(make_conn, pool_size=1), Conn)

    asyncio.run(main())
