"""What a tool may know about the call it serves, and what a conversation owns.

    ConversationScope(conversation_id)      one per conversation, made by the loop
      .state                                dict shared by every call of the conversation
      resources                             at most one per factory, from a bounded pool
      .close()                              the conversation ended: release its resources
    ToolContext                             one per call, injected into the tool
      .conversation_id .call_id .end_user_id .cancelled .logger .state
      .resource(factory) / await .aresource(factory)

Resources: `ctx.resource(factory)` returns the conversation's resource for `factory`, creating
it on first use. Each factory has one process-wide pool of `pool_size` slots: at most that many
conversations hold a resource from it at once; the others wait up to `timeout`, then get a
`PoolExhaustedError`. When the conversation ends the resource is *closed* (not handed to
another conversation): conversations often belong to different end users, and a session,
cookie jar or transaction must never leak from one to the next. To reuse expensive
connections across conversations, let the factory draw from a real pool (e.g. SQLAlchemy's
`engine.connect`, whose `close()` returns the connection to the engine).

How a resource is closed: `resource()` uses `close()`, else a context manager, else
`aclose()`; `aresource()` uses `aclose()`, else `close()` (awaited if it returns an
awaitable), else an async or sync context manager. A context manager is entered when the
resource is made (the tool receives what `__enter__`/`__aenter__` returns) and exited on
release. Anything else is simply dropped. Async closers run on the loop that made the
resource. A closer that fails is logged and the slot is freed anyway. A call abandoned after a
timeout keeps the conversation's resources until it really returns.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from bridge.errors import UsageError
from bridge.tools._resources import (
    DEFAULT_POOL_SIZE,
    DEFAULT_POOL_TIMEOUT,
    Entry,
    Held,
    PoolExhaustedError,
    finish_elsewhere,
    on_event_loop,
    pool_for,
    prepare_async,
    prepare_sync,
)

if TYPE_CHECKING:
    from opentelemetry.context import Context

__all__ = ["ConversationScope", "PoolExhaustedError", "ToolContext"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


_TOOL_LOGGER = logging.getLogger("bridge.tool")


class ConversationScope:
    """What one conversation owns: its `state` dict and its resources.

    The loop makes one per conversation, passes it to every `Dispatcher.run` of that
    conversation and calls `close()` when the conversation ends (idempotent; also a context
    manager, sync and async). Calls still running at `close()` (abandoned after a timeout)
    keep their resources until they return; then the resources are released.

    Args:
        conversation_id: The platform's conversation id (None for a one-off batch).
        end_user_id: Who the conversation is for, when the platform says.
    """

    def __init__(self, conversation_id: str | None, end_user_id: str | None = None) -> None:
        self.conversation_id = conversation_id
        self.end_user_id = end_user_id
        self.state: dict[str, Any] = {}
        """Shared by every call of this conversation, also by calls running at the same time."""
        self._lock = threading.Lock()
        self._entries: dict[Callable[..., Any], Entry] = {}
        self._active = 0
        self._closed = False
        self._released = False

    def __repr__(self) -> str:
        status = "closed" if self._closed else "open"
        return (
            f"ConversationScope({self.conversation_id!r}, {status}, resources={len(self._entries)})"
        )

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    # --- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """End the conversation: release (close) its resources now, or when its last call ends."""
        for held in self._begin_close():
            self._release(held)

    async def aclose(self) -> None:
        """Like `close()`, but awaits async closers on the running loop instead of scheduling."""
        running = asyncio.get_running_loop()
        for held in self._begin_close():
            try:
                result = held.closer() if held.closer is not None else None
                if inspect.isawaitable(result):
                    if held.loop in (None, running):
                        await result
                    else:
                        await asyncio.to_thread(finish_elsewhere, result, held.loop)
            except Exception:
                logger.exception("closing a resource of %s failed", held.pool.name)
            finally:
                held.pool.release()

    def __enter__(self) -> ConversationScope:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> ConversationScope:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _begin_close(self) -> list[Held]:
        with self._lock:
            self._closed = True
            if self._active:
                # Expected after a timeout abandoned a call; loud only for real conversations.
                logger.log(
                    logging.WARNING if self.conversation_id else logging.DEBUG,
                    "conversation %s ended while %d tool call(s) still run; their resources "
                    "are released when they return",
                    self.conversation_id or "(one-off batch)",
                    self._active,
                )
                return []
            return self._take_all()

    def _take_all(self) -> list[Held]:
        """Hand over every held resource for release, newest first (caller holds the lock)."""
        if self._released:
            return []
        self._released = True
        held = [e.held for e in self._entries.values() if e.held is not None]
        self._entries.clear()
        return held[::-1]

    @staticmethod
    def _release(held: Held) -> None:
        try:
            result = held.closer() if held.closer is not None else None
            if inspect.isawaitable(result):
                finish_elsewhere(result, held.loop)
        except Exception:
            logger.exception("closing a resource of %s failed", held.pool.name)
        finally:
            held.pool.release()

    def enter_call(self) -> Callable[[], None]:
        """Count a running call; returns the (idempotent) function to call when it returns.

        The dispatcher uses this so that `close()` never pulls a resource from under a call.
        """
        with self._lock:
            self._active += 1
        left = threading.Event()

        def leave() -> None:
            if left.is_set():
                return
            left.set()
            with self._lock:
                self._active -= 1
                due = self._take_all() if self._closed and not self._active else []
            for held in due:
                self._release(held)

        return leave

    # --- resources ---------------------------------------------------------------------------

    def _claim(self, factory: Callable[..., Any]) -> tuple[Entry, bool]:
        """The entry for `factory` and whether this caller must make the resource."""
        with self._lock:
            if self._closed:
                raise UsageError(
                    f"conversation {self.conversation_id} has ended; its resources are gone"
                )
            entry = self._entries.get(factory)
            if entry is not None:
                return entry, False
            entry = self._entries[factory] = Entry()
            return entry, True

    def _settle(self, factory: Callable[..., Any], entry: Entry) -> None:
        """Publish the outcome of making a resource; a resource made too late is released."""
        late: Held | None = None
        with self._lock:
            if entry.error is not None:
                self._entries.pop(factory, None)
            elif self._released:
                late, entry.held = entry.held, None
                entry.error = UsageError(
                    f"conversation {self.conversation_id} ended while its resource was made"
                )
        entry.ready.set()
        if late is not None:
            self._release(late)

    @staticmethod
    def _result(entry: Entry) -> Any:
        if entry.error is not None:
            raise entry.error
        assert entry.held is not None
        return entry.held.value

    def resource(
        self,
        factory: Callable[[], T],
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = DEFAULT_POOL_TIMEOUT,
    ) -> T:
        """This conversation's resource made by `factory` (see `ToolContext.resource`)."""
        pool = pool_for(factory, pool_size, timeout)
        entry, mine = self._claim(factory)
        if not mine:
            entry.ready.wait()
            return self._result(entry)  # type: ignore[no-any-return]
        try:
            if on_event_loop():
                # Waiting here would freeze the loop, and with it whatever could free a slot.
                if not pool.try_acquire():
                    exc = pool.exhausted(0)
                    raise PoolExhaustedError(
                        f"{exc.message} (called from an event loop, so it did not wait: use "
                        "`await ctx.aresource(...)` in async tools)"
                    )
            else:
                pool.acquire(timeout)
            try:
                made = factory()
                if inspect.isawaitable(made):
                    if inspect.iscoroutine(made):
                        made.close()  # never started: close it so no "never awaited" warning
                    raise UsageError(
                        f"{pool.name} is an async factory: call `await ctx.aresource(...)` "
                        "from an async tool"
                    )
                value, closer = prepare_sync(made)
            except BaseException:
                pool.release()
                raise
            entry.held = Held(pool, value, closer, None)
        except BaseException as exc:
            entry.error = exc
        self._settle(factory, entry)
        return self._result(entry)  # type: ignore[no-any-return]

    async def aresource(
        self,
        factory: Callable[[], Awaitable[T]] | Callable[[], T],
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = DEFAULT_POOL_TIMEOUT,
    ) -> T:
        """Async `resource`: waits without blocking the loop; the factory may be async."""
        pool = pool_for(factory, pool_size, timeout)
        entry, mine = self._claim(factory)
        if not mine:
            while not entry.ready.is_set():
                await asyncio.sleep(0.01)
            return self._result(entry)  # type: ignore[no-any-return]
        try:
            # Polling keeps the wait cancellable without a thread that could take a slot
            # after its waiter went away.
            deadline = time.monotonic() + timeout
            delay = 0.002
            while not pool.try_acquire():
                if time.monotonic() >= deadline:
                    raise pool.exhausted(timeout)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.05)
            try:
                made = factory()
                if inspect.isawaitable(made):
                    made = await made
                value, closer = await prepare_async(made)
            except BaseException:
                pool.release()
                raise
            entry.held = Held(pool, value, closer, asyncio.get_running_loop())
        except BaseException as exc:
            entry.error = exc
        self._settle(factory, entry)
        return self._result(entry)  # type: ignore[no-any-return]


class ToolContext:
    """Injected into a tool parameter annotated `ToolContext`; never part of the schema.

    Attributes:
        conversation_id: The conversation this call belongs to (None for a one-off batch).
        call_id: The platform's id of this call.
        tool_name: The name the agent called.
        end_user_id: Who the conversation is for, when known.
        cancelled: Set when the call timed out or was cancelled; long tools should check it
            (`ctx.cancelled.is_set()`, or wait on it instead of `time.sleep`) and stop.
        logger: A logger named ``bridge.tool.<tool name>``.
        state: The conversation's dict, shared by all its calls (also concurrent ones).
        scope: The `ConversationScope` behind `state` and `resource`.
        trace_context: The OpenTelemetry context of the call's ``execute_tool`` span (None
            when it is not traced). It is already current while the tool's function runs;
            work the tool hands to threads or event loops of its own attaches it
            (``opentelemetry.context.attach(ctx.trace_context)``) to stay in the trace.
    """

    def __init__(
        self,
        *,
        call_id: str,
        tool_name: str,
        scope: ConversationScope | None = None,
        cancelled: threading.Event | None = None,
        trace_context: Context | None = None,
    ) -> None:
        self.scope = scope if scope is not None else ConversationScope(None)
        self.trace_context = trace_context
        self.call_id = call_id
        self.tool_name = tool_name
        self.cancelled = cancelled if cancelled is not None else threading.Event()
        self.logger = _TOOL_LOGGER.getChild(tool_name)

    def __repr__(self) -> str:
        return (
            f"ToolContext(tool_name={self.tool_name!r}, call_id={self.call_id!r}, "
            f"conversation_id={self.conversation_id!r})"
        )

    @property
    def conversation_id(self) -> str | None:
        """The conversation this call belongs to."""
        return self.scope.conversation_id

    @property
    def end_user_id(self) -> str | None:
        """Who the conversation is for, when the platform says."""
        return self.scope.end_user_id

    @property
    def state(self) -> dict[str, Any]:
        """The conversation's shared dict."""
        return self.scope.state

    def resource(
        self,
        factory: Callable[[], T],
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = DEFAULT_POOL_TIMEOUT,
    ) -> T:
        """The conversation's resource made by `factory`, created on first use.

        Every call of this conversation gets the same object back; it is closed when the
        conversation ends. Pass the same callable each time (a module-level function or a
        class, not a fresh lambda): the factory is the pool's key. Called on an event loop
        (from an async tool) it never waits for a slot; use `aresource` there.

        Args:
            factory: Makes one resource (a DB connection, a browser session...).
            pool_size: How many conversations may hold a resource from this factory at once.
            timeout: Seconds to wait for a free slot when all are held.

        Raises:
            PoolExhaustedError: No slot came free within `timeout`.
            UsageError: Bad options, an async factory (use `aresource`), or the
                conversation has ended.
        """
        return self.scope.resource(factory, pool_size=pool_size, timeout=timeout)

    @overload
    async def aresource(
        self,
        factory: Callable[[], Awaitable[T]],
        *,
        pool_size: int = ...,
        timeout: float = ...,
    ) -> T: ...

    @overload
    async def aresource(
        self, factory: Callable[[], T], *, pool_size: int = ..., timeout: float = ...
    ) -> T: ...

    async def aresource(
        self,
        factory: Callable[[], Any],
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        timeout: float = DEFAULT_POOL_TIMEOUT,
    ) -> Any:
        """`resource` for async tools: the factory may be async, waiting never blocks the loop."""
        return await self.scope.aresource(factory, pool_size=pool_size, timeout=timeout)
