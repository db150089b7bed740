"""Fault injection: make the emulator misbehave on purpose, the way a real platform can.

A fault spec is a list of ``key=value`` items separated by ``,`` or ``;``. It comes from one of
three places, the first present wins:

1. the request header ``X-Emulator-Fault`` (tests): applies to the request that carries it,
   whatever its path;
2. a scenario rule's ``faults`` key: applies to the requests of runs that the rule matched;
3. the emulator's ``faults`` argument, ``toolbridge emulator --faults`` or the environment
   variable ``TOOLBRIDGE_EMULATOR_FAULTS`` (demos): applies to ``/runs`` requests unless ``on=``
   says otherwise.

Keys:

===================== =======================================================================
``delay=S``           sleep S seconds before each SSE message (non-stream: S per event before
                      the body)
``stall=S``           process the request, then wait S seconds before the response starts: the
                      platform has acted on it (e.g. accepted tool outputs) while the client
                      cannot know yet (crash tests kill the client in that window)
``drop_after=N``      close the TCP connection after N SSE messages (non-stream: after N bytes
                      of the body); the run itself was processed
``status=CODE``       answer with HTTP CODE (429, 500, 503, any 4xx/5xx) and the platform's
                      error body instead of running; the conversation is left untouched
``retry_after=S``     the ``Retry-After`` header sent with ``status`` (default 1 for 429)
``inband=CODE``       HTTP 200 whose body (stream: one ``data:`` message) is
                      ``{"request_id", "code", "message", "content": []}``
``inband_after=N``    send the in-band error after N normal SSE messages instead of before
                      any (the run was processed)
``json_error_on_stream``  answer a stream request's in-band error as a plain JSON body
                      (``Content-Type: application/json``, ``"content": null``) instead of an
                      SSE message, as AppBuilder sometimes does; implies ``inband=ServiceError``
                      unless ``inband`` is given
``message=TEXT``      the message of a ``status`` or ``inband`` error (no ``,``/``;`` in it)
``malformed=N``       insert a ``data:`` line that is not JSON after N SSE messages
                      (non-stream: the body is not valid JSON)
``duplicate_interrupt``  send the interrupt event twice (same tool call ids), or the
                      ``chatflow_interrupt`` event of a question twice (same id)
``times=N``           apply the fault to the first N requests it matches only, then behave;
                      counted per fault spec text and source (so a client's retries, which
                      repeat the header, get through after N failures)
``round=K``           only in round K of a run: 0 is the request with the query, 1 the first
                      ``tool_outputs`` submission (or resume of an ``ask`` step's question),
                      ...; a scenario rule's run counts on across its questions
``on=PATHS``          which endpoints, ``|``-separated: ``runs``, ``create``, ``upload``,
                      ``feedback`` or ``any`` (default ``runs``; header faults ignore it)
===================== =======================================================================

Examples: ``status=429,retry_after=2,times=1``; ``drop_after=3``; ``delay=0.05``;
``inband=ServiceError,message=code node failed``; ``malformed=1``; ``duplicate_interrupt``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from bridge.errors import UsageError

__all__ = [
    "ENDPOINTS",
    "ENV_VAR",
    "HEADER",
    "FaultBook",
    "FaultSpec",
    "FaultSpecError",
    "faults_from_env",
    "header_faults",
    "parse_faults",
]

HEADER = "X-Emulator-Fault"
ENV_VAR = "TOOLBRIDGE_EMULATOR_FAULTS"
ENDPOINTS = frozenset({"runs", "create", "upload", "feedback"})

_INT_KEYS = ("drop_after", "status", "malformed", "times", "round", "inband_after")
_FLOAT_KEYS = ("delay", "retry_after", "stall")
_TEXT_KEYS = ("inband", "message")
_FLAG_KEYS = ("duplicate_interrupt", "json_error_on_stream")
_KNOWN = (*_INT_KEYS, *_FLOAT_KEYS, *_TEXT_KEYS, *_FLAG_KEYS, "on")


class FaultSpecError(UsageError, ValueError):
    """A fault spec that cannot be parsed; the message names the item and what was expected."""


@dataclass(frozen=True)
class FaultSpec:
    """A parsed fault spec; see the module docstring for the meaning of each field."""

    text: str
    delay: float = 0.0
    stall: float = 0.0
    drop_after: int | None = None
    status: int | None = None
    retry_after: float | None = None
    inband: str | None = None
    inband_after: int = 0
    message: str | None = None
    malformed: int | None = None
    duplicate_interrupt: bool = False
    json_error_on_stream: bool = False
    times: int | None = None
    round: int | None = None
    on: frozenset[str] = field(default_factory=lambda: frozenset({"runs"}))

    def applies_to(self, endpoint: str, round_index: int | None, *, from_header: bool) -> bool:
        """Whether the spec targets this endpoint and round (before counting `times`)."""
        if not from_header and "any" not in self.on and endpoint not in self.on:
            return False
        return self.round is None or self.round == round_index

    @property
    def rejects(self) -> bool:
        """True when the request is refused before the emulator processes it."""
        return self.status is not None or (self.inband is not None and self.inband_after == 0)


def header_faults(headers: Mapping[str, str]) -> FaultSpec | None:
    """The fault a request asks for in its `HEADER`, if any.

    Raises:
        FaultSpecError: the header is there but is not a fault spec.
    """
    text = headers.get(HEADER)
    return None if text is None else parse_faults(text)


def parse_faults(text: str) -> FaultSpec | None:
    """Parse a fault spec; an empty text means no fault.

    Raises:
        FaultSpecError: an unknown key, a value of the wrong kind, or a contradiction.
    """
    text = text.strip()
    if not text:
        return None
    values: dict[str, object] = {}
    for raw in text.replace(";", ",").split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key, value = key.strip().lower().replace("-", "_"), value.strip()
        if key not in _KNOWN:
            raise FaultSpecError(
                f"fault spec {text!r}: unknown key {key!r}; expected one of {', '.join(_KNOWN)}"
            )
        values[key] = _convert(text, key, value, bool(sep))
    if values.get("json_error_on_stream") and "inband" not in values:
        values["inband"] = "ServiceError"
    spec = FaultSpec(text=text, **values)  # type: ignore[arg-type]
    _check(spec)
    return spec


def _convert(text: str, key: str, value: str, has_value: bool) -> object:
    if key in _FLAG_KEYS:
        if not has_value or value.lower() in ("1", "true", "yes", "on"):
            return True
        if value.lower() in ("0", "false", "no", "off"):
            return False
        raise FaultSpecError(f"fault spec {text!r}: {key} takes no value or true/false")
    if not has_value or not value:
        raise FaultSpecError(f"fault spec {text!r}: {key} needs a value ({key}=...)")
    if key in _INT_KEYS:
        try:
            number = int(value)
        except ValueError:
            raise FaultSpecError(
                f"fault spec {text!r}: {key}={value!r} is not a whole number"
            ) from None
        if number < 0:
            raise FaultSpecError(f"fault spec {text!r}: {key} must be >= 0, got {number}")
        return number
    if key in _FLOAT_KEYS:
        try:
            seconds = float(value)
        except ValueError:
            raise FaultSpecError(
                f"fault spec {text!r}: {key}={value!r} is not a number of seconds"
            ) from None
        if not 0 <= seconds <= 600:
            raise FaultSpecError(f"fault spec {text!r}: {key} must be 0..600 s, got {value}")
        return seconds
    if key == "on":
        paths = frozenset(p.strip() for p in value.split("|") if p.strip())
        unknown = paths - ENDPOINTS - {"any"}
        if unknown or not paths:
            raise FaultSpecError(
                f"fault spec {text!r}: on={value!r} names unknown endpoints {sorted(unknown)}; "
                f"expected {'|'.join(sorted(ENDPOINTS))} or any"
            )
        return paths
    return value


def _check(spec: FaultSpec) -> None:
    if spec.status is not None and not 400 <= spec.status <= 599:
        raise FaultSpecError(
            f"fault spec {spec.text!r}: status={spec.status} is not an HTTP error (400..599)"
        )
    if spec.status is not None and spec.inband is not None:
        raise FaultSpecError(f"fault spec {spec.text!r}: status and inband exclude each other")
    if spec.json_error_on_stream and spec.inband_after:
        raise FaultSpecError(
            f"fault spec {spec.text!r}: json_error_on_stream replaces the whole stream, so it "
            "cannot come after inband_after=N messages"
        )
    if spec.times == 0:
        raise FaultSpecError(f"fault spec {spec.text!r}: times must be at least 1")


def faults_from_env() -> FaultSpec | None:
    """The fault spec of `TOOLBRIDGE_EMULATOR_FAULTS`, if set."""
    return parse_faults(os.environ.get(ENV_VAR, ""))


class FaultBook:
    """Counts how often each fault spec was applied, so `times=N` can stop after N."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}

    def take(self, spec: FaultSpec, source: str) -> bool:
        """Record one use of `spec` from `source`; False once `times` uses were made."""
        with self._lock:
            key = (source, spec.text)
            used = self._counts.get(key, 0)
            if spec.times is not None and used >= spec.times:
                return False
            self._counts[key] = used + 1
            return True

    def pick(
        self,
        header: FaultSpec | None,
        rule: FaultSpec | None,
        default: FaultSpec | None,
        endpoint: str,
        round_index: int | None,
    ) -> FaultSpec | None:
        """The fault that applies to one request, counted: the first spec present among the
        request header's, the scenario rule's and the emulator's own (`default`) decides; None
        when it does not target this endpoint and round or its `times` are used up."""
        for spec, source, from_header in (
            (header, "header", True),
            (rule, "rule", False),
            (default, "global", False),
        ):
            if spec is None:
                continue
            if spec.applies_to(endpoint, round_index, from_header=from_header) and self.take(
                spec, source
            ):
                return spec
            return None
        return None

    def reset(self) -> None:
        """Forget every count (tests that reuse one emulator)."""
        with self._lock:
            self._counts.clear()
