"""Bounds on the connections of our HTTP servers (the daemon, ``mcp-serve`` over HTTP): how
long a client may take to send a request's headers and each piece of its body, and how many
connections may be open at once.

uvicorn closes a connection that sends nothing after a response (``timeout_keep_alive``), but
a client that keeps sending a header line every few seconds, or a body that stops half way,
holds its connection (a file descriptor, a parser, a task) for as long as it likes: a few
hundred of them exhaust the process's descriptors with no key at all. The protocol class made
by `http_protocol` adds, on top of uvicorn's own (httptools when installed, else h11):

- a header deadline: the whole header block of a request must arrive within
  ``header_timeout`` seconds of the connection opening (or of the previous response ending);
  otherwise the client gets ``408`` and the connection is closed (silently if it had sent
  nothing of a new request);
- a body idle timeout: while a request's body is incomplete, a gap of more than
  ``body_timeout`` seconds between two pieces gets ``408`` and a close (as nginx's
  ``client_body_timeout``; the app is told the client went away, so it never runs on half a
  body);
- a connection cap: beyond ``max_connections`` open connections a new one is answered ``503``
  with ``Retry-After`` and closed at once, without reaching the app;
- a header size bound: more than ``MAX_HEADER_BYTES`` of headers get ``431``.

Once a request's headers and body are in, nothing here limits it: a long tool call or an
event stream runs as long as it needs. The class relies on what uvicorn's two HTTP/1.1
protocols share (``cycle`` with ``more_body``/``response_started``/``response_complete``/
``disconnected``, ``connections``, ``flow``, ``on_response_complete``); the daemon's and
``mcp-serve``'s tests exercise it through real processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, cast

__all__ = ["MAX_HEADER_BYTES", "ConnectionLimits", "fit_descriptor_limit", "http_protocol"]

logger = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024
"""Largest header block a request may send (h11 alone would stop at 16 KiB; httptools has no
bound of its own)."""
_REJECT_WAIT = 1.0
"""Seconds a connection over the cap may take to send its request before it is closed (the
503 is written after its first bytes are read, so that closing does not reset it)."""
_LINGER = 2.0
"""Seconds a connection stays half-closed after a refusal, its input read and dropped, before
it is closed: closing a socket with unread input resets it, and the client could lose the
answer (nginx's lingering close)."""

_DESCRIPTOR_RESERVE = 128
"""Files a server needs besides its connections (journal, logs, sockets of tools)."""

_Phase = Literal["headers", "body", "busy"]


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a request's headers and body may take, how many connections may be open.

    Attributes:
        header_timeout: seconds for a request's whole header block.
        body_timeout: seconds the body of a request may pause between two pieces.
        max_connections: open connections; more are answered 503 and closed.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1000


def http_protocol(
    limits: ConnectionLimits, base: type[asyncio.Protocol] | None = None
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol class with `limits` applied (pass it as ``Config(http=)``).

    `base` is the uvicorn protocol to extend (default: uvicorn's choice, httptools when it is
    installed, else h11). The process's open-files limit is raised to fit the limits first
    (`fit_descriptor_limit`).
    """
    if base is None:
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        base = AutoHTTPProtocol
    fit_descriptor_limit(limits)
    return type("BoundedHTTPProtocol", (_Bounded, base), {"limits": limits})


def fit_descriptor_limit(limits: ConnectionLimits) -> None:
    """Raise this process's soft limit on open files so that `max_connections` fit, up to the
    hard limit; warn (naming the setting) if they cannot.

    Past the limit, accepting fails (asyncio then stops accepting for a second) before the cap
    could answer 503.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return
    wanted = limits.max_connections + _DESCRIPTOR_RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft < wanted:
        logger.warning(
            "this process may open %d files (ulimit -n), too few for --max-connections %d and "
            "the server's own; lower --max-connections to about %d or raise the limit",
            soft,
            limits.max_connections,
            max(1, soft - _DESCRIPTOR_RESERVE),
        )


def _answer(status: int, reason: str, code: str, message: str, extra: str = "") -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n{extra}\r\n"
    )
    return head.encode("ascii") + body


class _Tally:
    """One warning per `every` seconds for a kind of closed connection, with how many (a flood
    of slow or surplus clients must not become a flood of log lines)."""

    def __init__(self, what: str, every: float = 10.0) -> None:
        self.what = what
        self.every = every
        self.count = 0
        self.last = -every

    def note(self, detail: str) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= self.every:
            logger.warning("%s: %d connection(s) (%s)", self.what, self.count, detail)
            self.count, self.last = 0, now


_refusals = _Tally("refused over the connection cap")
_slow = _Tally("closed for slow headers or body")


class _Bounded(asyncio.Protocol):
    """Mixed in before a uvicorn HTTP protocol class (see `http_protocol`)."""

    limits: ClassVar[ConnectionLimits]
    # Set by the uvicorn protocol this is mixed into.
    transport: asyncio.Transport
    cycle: Any
    connections: set[Any]
    flow: Any

    _timer: asyncio.TimerHandle | None = None
    _phase: _Phase | None = None
    _header_bytes = 0
    _rejected: asyncio.Transport | None = None
    _lingering = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self.connections) >= self.limits.max_connections:
            self._rejected = cast(asyncio.Transport, transport)
            self._timer = asyncio.get_running_loop().call_later(_REJECT_WAIT, transport.close)
            return
        super().connection_made(transport)
        self._progress()

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # answered: the rest of the request is read and dropped
        if self._rejected is not None:
            self._reject()
            return
        if self._phase == "headers":
            self._header_bytes += len(data)
        super().data_received(data)
        cycle = self.cycle
        waiting = cycle is None or cycle.response_complete  # still no complete header block
        if waiting and self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
            message = f"the request headers are larger than {MAX_HEADER_BYTES} bytes"
            self._close(431, "Request Header Fields Too Large", "headers_too_large", message)
            return
        self._progress()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        if self._rejected is not None:
            return  # the uvicorn protocol never saw this connection
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        cast(Any, super()).on_response_complete()
        self._progress()

    # --- the phases of a connection ------------------------------------------------------

    def _progress(self) -> None:
        """After anything that may move the connection on: arm the timer its phase needs."""
        cycle = self.cycle
        if self._lingering:
            return
        if self.transport.is_closing():
            self._cancel()
        elif cycle is None or cycle.response_complete:
            if self._phase != "headers":  # a new request begins: its deadline starts now
                self._arm("headers", self.limits.header_timeout)
                self._header_bytes = 0
        elif cycle.more_body and not cycle.response_started:
            self._arm("body", self.limits.body_timeout)  # restarted by every piece
        else:
            self._cancel()
            self._phase = "busy"

    def _arm(self, phase: _Phase, seconds: float) -> None:
        self._cancel()
        self._phase = phase
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._phase == "headers":
            if self._header_bytes == 0:
                self.transport.close()  # idle between requests: nothing to answer
                return
            seconds = self.limits.header_timeout
            message = (
                f"the request headers did not arrive within {seconds:g} s (the server's "
                "--header-timeout); the connection is closed"
            )
        elif self._phase == "body":
            if self.flow is not None and self.flow.read_paused:
                self._arm("body", self.limits.body_timeout)  # the app is slow, not the client
                return
            seconds = self.limits.body_timeout
            message = (
                f"the request body stopped arriving for {seconds:g} s (the server's "
                "--body-timeout); the request was not run and the connection is closed"
            )
            cycle = self.cycle
            if cycle is not None:
                cycle.disconnected = True  # the app reads a disconnect, never half a body
                cycle.message_event.set()
        else:
            return
        logger.debug("closing the connection from %s: %s", self._peer(), message)
        _slow.note(f"the last from {self._peer()}: {message}")
        self._close(408, "Request Timeout", "request_timeout", message)

    def _reject(self) -> None:
        """The answer to a connection over the cap, once its request's first bytes are read."""
        transport = self._rejected
        if transport is None or transport.is_closing():
            return
        cap = self.limits.max_connections
        _refusals.note(f"{cap} were open; --max-connections")
        message = (
            f"the server has its maximum of {cap} open connections (--max-connections); "
            "try again shortly"
        )
        answer = _answer(
            503, "Service Unavailable", "too_many_connections", message, "retry-after: 1\r\n"
        )
        # Closed at once, not lingering: the cap bounds descriptors only if refused connections
        # let go of theirs at once. The request was read, so closing seldom resets it.
        self._cancel()
        self._lingering = True
        transport.write(answer)
        transport.close()

    def _close(self, status: int, reason: str, code: str, message: str) -> None:
        """Send the answer and end the connection: half-closed, input dropped, closed after
        `_LINGER` seconds or when the client closes (whichever comes first). It still counts
        against the cap until then."""
        self._cancel()
        self._lingering = True
        transport = self.transport
        transport.write(_answer(status, reason, code, message))
        if transport.can_write_eof():
            transport.write_eof()
            self._timer = asyncio.get_running_loop().call_later(_LINGER, transport.close)
        else:
            transport.close()

    def _peer(self) -> str:
        peer = self.transport.get_extra_info("peername")
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"
