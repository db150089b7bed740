"""Bounded, process-wide pools of per-conversation resources, and how to close a resource.

`ConversationScope` (in `context.py`) decides which conversation holds what; this module only
counts slots and knows the shapes a resource can take (closeable, context manager, async).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import BridgeError, UsageError

__all__ = [
    "CLOSE_TIMEOUT",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_POOL_TIMEOUT",
    "Entry",
    "Held",
    "Pool",
    "PoolExhaustedError",
    "finish_elsewhere",
    "on_event_loop",
    "pool_for",
    "prepare_async",
    "prepare_sync",
]

logger = logging.getLogger(__name__)

DEFAULT_POOL_SIZE = 8
DEFAULT_POOL_TIMEOUT = 30.0
CLOSE_TIMEOUT = 30.0
"""Seconds a sync `close()` waits for an async closer running on another thread's loop."""


class PoolExhaustedError(BridgeError, TimeoutError):
    """Every resource of a pool is held by other conversations and none came free in time."""


def _factory_name(factory: Callable[..., Any]) -> str:
    module = getattr(factory, "__module__", None) or ""
    qualname = getattr(factory, "__qualname__", None) or repr(factory)
    return f"{module}.{qualname}" if module else qualname


class Pool:
    """A bounded set of slots for one factory; a slot is held while a conversation holds one."""

    def __init__(self, factory: Callable[..., Any], size: int) -> None:
        self.name = _factory_name(factory)
        self.size = size
        self._in_use = 0
        self._cond = threading.Condition()

    @property
    def in_use(self) -> int:
        """How many slots are held right now."""
        with self._cond:
            return self._in_use

    def try_acquire(self) -> bool:
        """Take a slot if one is free, without waiting."""
        with self._cond:
            if self._in_use < self.size:
                self._in_use += 1
                return True
            return False

    def acquire(self, timeout: float) -> None:
        """Take a slot, waiting up to `timeout` seconds; raises `PoolExhaustedError`."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._in_use < self.size, timeout):
                raise self.exhausted(timeout)
            self._in_use += 1

    def release(self) -> None:
        """Give a slot back and wake one waiter."""
        with self._cond:
            self._in_use -= 1
            self._cond.notify()

    def exhausted(self, timeout: float) -> PoolExhaustedError:
        """The error for a wait of `timeout` seconds that found no free slot."""
        return PoolExhaustedError(
            f"no resource from {self.name} came free within {timeout:g} s: all {self.size} "
            f"(pool_size={self.size}) are held by other conversations; raise pool_size or "
            "end idle conversations sooner"
        )


# Pools are process-wide, keyed by the factory, rather than owned by a Dispatcher: the bound
# protects something outside the process (a database's connection limit, the memory browsers
# take), and two dispatchers in one process (daemon workers, tests) must share that limit.
_pools: dict[Callable[..., Any], Pool] = {}
_pools_lock = threading.Lock()


def pool_for(factory: Callable[..., Any], pool_size: int, timeout: float) -> Pool:
    """The pool of `factory` (made on first use), after checking the options."""
    if not callable(factory):
        raise UsageError(f"resource factory must be callable, got {type(factory).__name__}")
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise UsageError(f"pool_size must be an integer >= 1, got {pool_size!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise UsageError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    with _pools_lock:
        pool = _pools.get(factory)
        if pool is None:
            pool = _pools[factory] = Pool(factory, pool_size)
        elif pool.size != pool_size:
            raise UsageError(
                f"the pool for {pool.name} already has pool_size={pool.size}, got "
                f"pool_size={pool_size}; pass the same pool_size wherever this factory is used"
            )
        return pool


@dataclass
class Held:
    """A resource a conversation holds: its slot, the value and how to close it."""

    pool: Pool
    value: Any
    closer: Callable[[], Any] | None
    loop: asyncio.AbstractEventLoop | None
    """The loop the resource was made on: async closers must run there."""


@dataclass
class Entry:
    """One factory's resource in a scope; `ready` is set once it is made (or failed)."""

    ready: threading.Event = field(default_factory=threading.Event)
    held: Held | None = None
    error: BaseException | None = None


def prepare_sync(value: Any) -> tuple[Any, Callable[[], Any] | None]:
    """What the tool receives for a freshly made `value`, and how to close it later."""
    if callable(getattr(value, "close", None)):
        return value, value.close
    if hasattr(value, "__enter__") and hasattr(value, "__exit__"):
        return value.__enter__(), lambda: value.__exit__(None, None, None)
    if callable(getattr(value, "aclose", None)):
        return value, value.aclose
    if hasattr(value, "__aenter__"):
        raise UsageError(
            f"{type(value).__name__} is an async context manager: call "
            "`await ctx.aresource(factory)` from an async tool"
        )
    return value, None


async def prepare_async(value: Any) -> tuple[Any, Callable[[], Any] | None]:
    """`prepare_sync` for `aresource`: async forms first, async context managers entered."""
    if callable(getattr(value, "aclose", None)):
        return value, value.aclose
    if callable(getattr(value, "close", None)):
        return value, value.close
    if hasattr(value, "__aenter__") and hasattr(value, "__aexit__"):
        return await value.__aenter__(), lambda: value.__aexit__(None, None, None)
    if hasattr(value, "__enter__") and hasattr(value, "__exit__"):
        return value.__enter__(), lambda: value.__exit__(None, None, None)
    return value, None


def on_event_loop() -> bool:
    """True when the calling thread is running an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _as_coroutine(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def finish_elsewhere(awaitable: Awaitable[Any], loop: asyncio.AbstractEventLoop | None) -> None:
    """Finish an async closer from sync code, on the loop the resource belongs to."""
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    coro: Coroutine[Any, Any, Any] = _as_coroutine(awaitable)
    if loop is not None and loop.is_running() and not loop.is_closed():
        if running is loop:
            # close() was called synchronously from that loop's own thread: blocking would
            # deadlock, so the closer runs as a task (use `await scope.aclose()` to wait).
            _keep(loop.create_task(coro))
            return
        asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=CLOSE_TIMEOUT)
    elif running is None:
        asyncio.run(coro)
    else:
        _keep(running.create_task(coro))


_closing: set[asyncio.Task[Any]] = set()
"""Closer tasks nobody awaits; the loop only keeps weak references to tasks."""


def _keep(task: asyncio.Task[Any]) -> None:
    _closing.add(task)
    task.add_done_callback(_closed)


def _closed(task: asyncio.Task[Any]) -> None:
    _closing.discard(task)
    if not task.cancelled() and task.exception() is not None:
        logger.error("closing a resource failed", exc_info=task.exception())
