"""The bounds of one answer stream, shared by every platform adapter.

A platform answers a request (a query, tool outputs, a person's reply) with a stream. Without
bounds, a broken or hostile server could hold a run forever with keep-alive comments (each
resets the idle timeout) or fill memory with endless text deltas or tool-call argument
fragments. Every adapter reads its streams through a `RunBudget`:

- `run_timeout` is the total time of one answer request, from sending it (connect, headers,
  body) to the end of its answer. The adapter makes the budget before it sends the request
  and sends it inside `RunBudget.sending` (`Transport.request(budget=...)`): the connection's
  socket is then watched by `_watchdog`, which shuts it down once the time is up, whatever
  the server trickles (headers or body a byte at a time). `RunBudget.chunks` reads the
  stream's bytes as they arrive (`_transport.stream_chunks`: bounded pieces, never a whole
  body first) and checks the total time at every chunk (keep-alives included); `RunBudget.body`
  reads a whole answer. Past the limit, or once the watchdog cut the connection, they raise
  `StreamTimeoutError` (the connection is closed with the response, never reused).
- `RunBudget.text` counts the answer text (reasoning included) a stream carried,
  `RunBudget.arguments` the characters of tool-call arguments (all calls of the stream
  together) and `RunBudget.tool_call` the calls; past a bound, `StreamLimitError`.

Each error names the limit, its value, the setting and how to raise it. The limits are
platform settings (`LIMITS`, listed in every registry entry), so they have a flag
(``--run-timeout``), a variable the adapter reads when the option is not given
(``TOOLBRIDGE_RUN_TIMEOUT``, which the daemon reads too) and a keyword option.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.errors import ConfigurationError, StreamLimitError, StreamTimeoutError
from bridge.platforms._watchdog import Guard, sending

if TYPE_CHECKING:  # the registry imports this module: `toolbridge --help` must stay light
    import requests

__all__ = [
    "LIMITS",
    "MAX_ANSWER_CHARS",
    "MAX_ARGUMENTS_CHARS",
    "MAX_TOOL_CALLS",
    "RUN_TIMEOUT",
    "Limit",
    "RunBudget",
    "StreamLimits",
]

RUN_TIMEOUT = 900.0
"""Seconds one answer stream may last: a long reasoning model answers in a few minutes."""
MAX_ANSWER_CHARS = 4 * 1024 * 1024
"""Characters of answer text (reasoning included) in one stream: about a million tokens, far
past any model's output limit."""
MAX_ARGUMENTS_CHARS = 4 * 1024 * 1024
"""Characters of tool-call arguments in one stream, all its calls together."""
MAX_TOOL_CALLS = 128
"""Tool calls one stream may ask for: models ask for a handful in parallel."""


@dataclass(frozen=True)
class Limit:
    """One bound as an operator sets it: keyword option, flag, variable, default, help."""

    option: str
    flag: str
    env: str
    default: float | int
    help: str
    kind: str
    """``seconds`` (a number > 0) or ``count`` (an integer >= 1)."""

    @property
    def how_to_raise(self) -> str:
        """What an error says to do: "raise it with --run-timeout or TOOLBRIDGE_RUN_TIMEOUT"."""
        return f"raise it with {self.flag} or {self.env} ({self.option}= in Python)"

    def problem(self, value: Any) -> str | None:
        """Why `value` cannot be this limit (what was expected), or None."""
        try:
            number = _number(value, self.kind)
        except (TypeError, ValueError):
            number = None
        if number is None:
            expected = "a number of seconds > 0" if self.kind == "seconds" else "an integer >= 1"
            return f"{value!r} is not {expected}"
        return None

    def parse(self, value: Any) -> float | int:
        """`value` as a number (float seconds, int count); call `problem` first."""
        number = _number(value, self.kind)
        if number is None:
            raise ValueError(self.problem(value))
        return number


def _number(value: Any, kind: str) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        value = value.strip()
    if kind == "seconds":
        seconds = float(value)
        return seconds if math.isfinite(seconds) and seconds > 0 else None
    count = int(value)
    return count if count >= 1 else None


RUN_TIMEOUT_LIMIT = Limit(
    "run_timeout",
    "--run-timeout",
    "TOOLBRIDGE_RUN_TIMEOUT",
    RUN_TIMEOUT,
    "seconds one answer stream (a query, tool outputs or a reply) may last, keep-alives or not",
    "seconds",
)
MAX_ANSWER_LIMIT = Limit(
    "max_answer_chars",
    "--max-answer-chars",
    "TOOLBRIDGE_MAX_ANSWER_CHARS",
    MAX_ANSWER_CHARS,
    "characters of answer text (reasoning included) one answer stream may carry",
    "count",
)
MAX_ARGUMENTS_LIMIT = Limit(
    "max_arguments_chars",
    "--max-arguments-chars",
    "TOOLBRIDGE_MAX_ARGUMENTS_CHARS",
    MAX_ARGUMENTS_CHARS,
    "characters of tool-call arguments one answer stream may carry, all its calls together",
    "count",
)
MAX_TOOL_CALLS_LIMIT = Limit(
    "max_tool_calls",
    "--max-tool-calls",
    "TOOLBRIDGE_MAX_TOOL_CALLS",
    MAX_TOOL_CALLS,
    "tool calls one answer stream may ask for",
    "count",
)
LIMITS: tuple[Limit, ...] = (
    RUN_TIMEOUT_LIMIT,
    MAX_ANSWER_LIMIT,
    MAX_ARGUMENTS_LIMIT,
    MAX_TOOL_CALLS_LIMIT,
)
"""Every bound, in the order the registry and docs/platforms.md list them."""


@dataclass(frozen=True)
class StreamLimits:
    """The bounds of every answer stream of one adapter (see the module docstring)."""

    run_timeout: float = RUN_TIMEOUT
    max_answer_chars: int = MAX_ANSWER_CHARS
    max_arguments_chars: int = MAX_ARGUMENTS_CHARS
    max_tool_calls: int = MAX_TOOL_CALLS

    @classmethod
    def from_options(
        cls,
        run_timeout: Any = None,
        max_answer_chars: Any = None,
        max_arguments_chars: Any = None,
        max_tool_calls: Any = None,
        *,
        env: Mapping[str, str] | None = None,
    ) -> StreamLimits:
        """The limits from an adapter's options, else its environment, else the defaults.

        Every adapter takes these four keyword options and passes them here.

        Args:
            run_timeout: Seconds one answer stream may last; default `TOOLBRIDGE_RUN_TIMEOUT`,
                else 900.
            max_answer_chars: Characters of answer text one stream may carry; default
                `TOOLBRIDGE_MAX_ANSWER_CHARS`, else 4 Mi.
            max_arguments_chars: Characters of tool-call arguments one stream may carry;
                default `TOOLBRIDGE_MAX_ARGUMENTS_CHARS`, else 4 Mi.
            max_tool_calls: Tool calls one stream may ask for; default
                `TOOLBRIDGE_MAX_TOOL_CALLS`, else 128.
            env: Where the variables are read; default `os.environ`.

        Raises:
            ConfigurationError: naming every malformed value and where it came from.
        """
        given = {
            "run_timeout": run_timeout,
            "max_answer_chars": max_answer_chars,
            "max_arguments_chars": max_arguments_chars,
            "max_tool_calls": max_tool_calls,
        }
        environ = os.environ if env is None else env
        values: dict[str, Any] = {}
        problems: list[str] = []
        for limit in LIMITS:
            value, source = given[limit.option], f"{limit.option}="
            if value is None and environ.get(limit.env):
                value, source = environ[limit.env], limit.env
            if value is None:
                continue
            problem = limit.problem(value)
            if problem is not None:
                problems.append(f"{limit.option} (from {source}): {problem}")
                continue
            values[limit.option] = limit.parse(value)
        if problems:
            raise ConfigurationError("; ".join(problems))
        return cls(**values)

    def budget(
        self,
        where: str,
        *,
        received: list[Any] | None = None,
        request_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> RunBudget:
        """A fresh budget for one answer request, its clock started now: make it before the
        request is sent, and `close` it once the answer was read.

        Args:
            where: Named first in errors ("the stream from http://…/responses").
            received: The events read so far (filled in by the caller), kept on errors.
            request_id: Put on errors.
            clock: Seconds, monotonic (tests may give another).
        """
        return RunBudget(self, where, received=received, request_id=request_id, clock=clock)


class RunBudget:
    """What one answer stream has spent of its `StreamLimits`; raises once past one.

    Counting is cheap (a length added, a comparison), so adapters call it for every piece.
    """

    def __init__(
        self,
        limits: StreamLimits,
        where: str,
        *,
        received: list[Any] | None = None,
        request_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self.where = where
        self.received: list[Any] = received if received is not None else []
        self.request_id = request_id
        self._clock = clock
        self._deadline = clock() + limits.run_timeout
        self._guard = Guard(time.monotonic() + limits.run_timeout)
        self.answer_chars = 0
        """Characters of answer text counted so far."""
        self.arguments_chars = 0
        """Characters of tool-call arguments counted so far."""
        self.tool_calls = 0
        """Tool calls counted so far."""

    def sending(self) -> contextlib.AbstractContextManager[None]:
        """The block that sends the request: its connection is cut once the time is up."""
        return sending(self._guard)

    @property
    def expired(self) -> bool:
        """True once the request has lasted longer than `run_timeout`."""
        return self._guard.fired or self._clock() > self._deadline

    def close(self) -> None:
        """The answer was read (or abandoned): stop watching its connection."""
        self._guard.close()

    def chunks(self, response: requests.Response) -> Iterator[bytes]:
        """The body of a streamed `response` as it arrives (`stream_chunks`), timed.

        Raises:
            StreamTimeoutError: the stream has lasted longer than `run_timeout`.
        """
        from bridge.platforms._transport import stream_chunks

        return self.timed(stream_chunks(response))

    def body(self, response: requests.Response) -> bytes:
        """The whole body of `response` (`read_body`), within the total time.

        Raises:
            StreamTimeoutError: the request has lasted longer than `run_timeout`.
        """
        from bridge.platforms._transport import read_body

        try:
            content = read_body(response)
        except Exception as exc:
            if self._guard.fired:
                raise self.timeout_error() from exc
            raise
        self._check_cut()
        return content

    def timed(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """`chunks` unchanged, the total time checked as each one arrives.

        Raises:
            StreamTimeoutError: the stream has lasted longer than `run_timeout`.
        """
        try:
            for chunk in chunks:
                self.check_time()
                yield chunk
        except Exception as exc:
            if self._guard.fired and not isinstance(exc, StreamTimeoutError):
                raise self.timeout_error() from exc
            raise
        self._check_cut()

    def check_time(self) -> None:
        """Raise `StreamTimeoutError` once the stream has lasted longer than `run_timeout`."""
        if self._guard.fired or self._clock() > self._deadline:
            raise self.timeout_error()

    def _check_cut(self) -> None:
        # A body that ends with the connection ends "cleanly" when the watchdog cut it.
        if self._guard.fired:
            raise self.timeout_error()

    def timeout_error(self) -> StreamTimeoutError:
        """The error of a request past `run_timeout`."""
        limit = RUN_TIMEOUT_LIMIT
        return StreamTimeoutError(
            f"{self.where} exceeded the run's total time limit of "
            f"{self.limits.run_timeout:g} s ({limit.option}) after "
            f"{len(self.received)} event(s); {limit.how_to_raise}",
            received=self.received,
            request_id=self.request_id,
        )

    def text(self, piece: str) -> None:
        """Count answer text (reasoning included).

        Raises:
            StreamLimitError: past `max_answer_chars`.
        """
        self.answer_chars += len(piece)
        if self.answer_chars > self.limits.max_answer_chars:
            self._exceeded(MAX_ANSWER_LIMIT, "its answer text", self.limits.max_answer_chars)

    def arguments(self, piece: str) -> None:
        """Count tool-call arguments (a fragment, or a whole call's).

        Raises:
            StreamLimitError: past `max_arguments_chars`.
        """
        self.arguments_chars += len(piece)
        if self.arguments_chars > self.limits.max_arguments_chars:
            self._exceeded(
                MAX_ARGUMENTS_LIMIT, "its tool-call arguments", self.limits.max_arguments_chars
            )

    def tool_call(self, count: int = 1) -> None:
        """Count tool calls that begin.

        Raises:
            StreamLimitError: past `max_tool_calls`.
        """
        self.tool_calls += count
        if self.tool_calls > self.limits.max_tool_calls:
            limit = MAX_TOOL_CALLS_LIMIT
            raise StreamLimitError(
                f"{self.where} asked for more than {self.limits.max_tool_calls} tool calls "
                f"({limit.option}), so it was not read further; {limit.how_to_raise}",
                received=self.received,
                request_id=self.request_id,
            )

    def _exceeded(self, limit: Limit, what: str, value: int) -> None:
        raise StreamLimitError(
            f"{self.where} grew {what} past {value} characters ({limit.option}), so it was not "
            f"read further; {limit.how_to_raise}",
            received=self.received,
            request_id=self.request_id,
        )
