"""Every exception toolbridge raises, in one tree.

    BridgeError                      anything toolbridge raises for a failed run
    ├── PlatformError                the agent platform failed us (carries request_id, status, code)
    │   ├── PlatformConnectionError  the request never got an answer (DNS, refused, reset)
    │   │   └── PlatformTimeoutError connect timeout or too long a gap between stream events
    │   ├── PlatformStatusError      an HTTP error status
    │   │   ├── BadRequestError      400, 422
    │   │   ├── AuthenticationError  401, 403
    │   │   ├── NotFoundError        404
    │   │   ├── ConflictError        409
    │   │   ├── PreconditionError    412, 428
    │   │   ├── RateLimitError       429
    │   │   └── ServerError          5xx
    │   ├── InBandError              HTTP 200 whose body carries an error code/message
    │   ├── StreamInterruptedError   the connection dropped mid-stream (keeps what arrived)
    │   │   ├── StreamTimeoutError   ...or went quiet past the idle timeout, or ran past the
    │   │   │                        run's total time limit (also a timeout)
    │   │   └── StreamLimitError     ...or was stopped: its answer or tool calls grew past a bound
    │   └── ProtocolError            the platform sent something we cannot decode
    ├── RunError                     the conversation loop could not finish
    │   ├── RunFailedError           the platform reported the run as failed
    │   ├── MaxRoundsError           the agent kept asking for tools past `max_rounds`
    │   └── RunInterruptedError      a restart lost the agent's answer stream (ask again)
    ├── PoolExhaustedError           (bridge.tools) no per-conversation resource came free in time
    └── ApprovalDecidedError         (bridge.journal) only a pending approval can be decided

    UsageError(BridgeError, RuntimeError)   a developer mistake: bad manifest, duplicate tool...
    ├── ConfigurationError                  missing or malformed configuration (token, app id)
    └── ConversationLostError               the platform does not know the conversation id

Messages never contain secrets: anything that could carry a token goes through `redact`.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge.types import ToolRun

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "BridgeError",
    "ConfigurationError",
    "ConflictError",
    "ConversationLostError",
    "InBandError",
    "MaxRoundsError",
    "NotFoundError",
    "PlatformConnectionError",
    "PlatformError",
    "PlatformStatusError",
    "PlatformTimeoutError",
    "PreconditionError",
    "ProtocolError",
    "RateLimitError",
    "RunError",
    "RunFailedError",
    "RunInterruptedError",
    "ServerError",
    "StreamInterruptedError",
    "StreamLimitError",
    "StreamTimeoutError",
    "UsageError",
    "cut_outside_secrets",
    "held_back",
    "redact",
    "redact_data",
    "redacts_nothing_in_json",
    "register_secret",
    "secrets_generation",
    "status_error_class",
    "valid_text",
]

_SECRET_PATTERNS = (
    # Not a placeholder in a hint ("Bearer <token>", "Bearer <personal access token>"): that
    # shows the header's shape, not a secret.
    re.compile(r"(?i)(bearer\s+)(?!<[\w .-]{1,40}>(?:[\s\"',;.)]|$))[^\s\"',;]+"),
    # Not the shape shown in hints ("it looks like bce-v3/ALTAK-…/…"): that is no secret.
    re.compile(r"bce-v3/(?!ALTAK-(?:…|\.\.\.)(?:/(?:…|\.\.\.))?(?:[\s\"',;)]|$))[^\s\"',;]+"),
    # `token=...`-style pairs. Values under 8 characters are words ("token: set"), not
    # secrets; registered secrets are masked whatever their length (see `register_secret`).
    # A `${ENV_NAME}` reference is where a secret comes from, not one: messages show it.
    re.compile(
        r"(?i)((?:api[_-]?key|token|secret|password|authorization)[\"']?\s*[:=]\s*[\"']?)"
        r"(?!\$\{\w+\}(?:[^\w]|$))[^\s\"',;&]{8,}"
    ),
)
_HINT_WORDS = (
    "bearer",
    "bce-v3/",
    "apikey",
    "api_key",
    "api-key",
    "token",
    "secret",
    "password",
    "authorization",
)
_SECRET_HINT = re.compile("(?i)" + "|".join(re.escape(word) for word in _HINT_WORDS))
"""A word every one of `_SECRET_PATTERNS` needs: a text without one has nothing they mask, so
`redact` skips them (most texts: one search instead of one per pattern)."""


def _may_hold_secret(text: str) -> bool:
    """Whether `text` has a word of `_SECRET_HINT`. An ASCII text is lowered once and
    searched for each word as a substring: for ASCII, that is exactly the case-insensitive
    match, and about ten times faster than the case-insensitive expression, which lowers
    every character at every position it tries. Other texts take the expression, whose case
    folding also matches a few non-ASCII letters (the Kelvin sign as ``k``, the long s as
    ``s``) that lowering alone would miss."""
    if not text.isascii():
        return _SECRET_HINT.search(text) is not None
    lowered = text.lower()
    return any(word in lowered for word in _HINT_WORDS)


_extra_secrets: set[str] = set()
_sorted: tuple[set[str] | None, int, tuple[str, ...]] = (None, 0, ())
"""`_extra_secrets` (the set and its size when sorted), longest first: a secret inside
another is masked after it."""
_MIN_SECRET = 8


def register_secret(value: str | None) -> None:
    """Remember a secret so that `redact` masks it wherever it appears.

    Values under 8 characters are not remembered: masking a short word everywhere ("wrong",
    "test") would garble unrelated messages, and real tokens and keys are far longer.
    """
    global _generation
    if value and len(value) >= _MIN_SECRET:
        _extra_secrets.add(value)
        bare = value.split(" ", 1)[1] if value.lower().startswith("bearer ") else None
        if bare and len(bare) >= _MIN_SECRET:
            _extra_secrets.add(bare)
        # After the secrets are in: a string found clean under an older generation, even by a
        # thread that read it before they were, no longer counts.
        _generation += 1


_CLEAN_LONGEST = 64
_CLEAN_MOST = 4096
_clean: dict[str, int] = {}
"""Short strings `redact_data` found nothing to mask or repair in (keys, names, states: the
same few in every event), each with the `_generation` of the secrets it was checked against: an
entry from before a secret was registered no longer counts, even one a thread adds while
another registers."""
_generation = 0
"""Counts `register_secret` calls that remembered something."""


def secrets_generation() -> int:
    """A number that changes whenever `register_secret` remembers a new secret: what was
    masked under an older one may show a secret now (caches of masked values compare it)."""
    return _generation


def _longest_first() -> tuple[str, ...]:
    global _sorted
    secrets = _extra_secrets
    if _sorted[0] is not secrets or _sorted[1] != len(secrets):
        _sorted = (secrets, len(secrets), tuple(sorted(secrets, key=len, reverse=True)))
    return _sorted[2]


def redact(text: str) -> str:
    """Mask tokens, API keys and registered secrets in `text`."""
    for secret in _longest_first():
        text = text.replace(secret, "[secure]")
    if not _may_hold_secret(text):
        return text
    for pattern in _SECRET_PATTERNS:
        if pattern.groups:
            text = pattern.sub(lambda m: m.group(1) + "[secure]", text)
        else:
            text = pattern.sub("[secure]", text)
    return text


def redacts_nothing_in_json(text: str) -> bool:
    """True when `redact` and `valid_text` leave every string (key or value) of the JSON value
    `text` (written by `json.dumps` with ``ensure_ascii=False``) as it is; False when they
    may change one (then mask string by string).

    JSON escapes a string character by character, so a string that holds a secret or a
    pattern's word holds it escaped in `text`, where one search finds it. `text` is checked
    as a whole: a word across two strings only sends the caller to the slow path.
    """
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: `valid_text` would repair it
            return False
    if _may_hold_secret(text):
        return False
    return not any(secret in text for secret in _escaped_secrets())


_escaped: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())


def _escaped_secrets() -> tuple[str, ...]:
    """The registered secrets as they appear inside a JSON string (`json.dumps` escapes)."""
    global _escaped
    secrets = _longest_first()
    if _escaped[0] is not secrets:
        _escaped = (secrets, tuple(json.dumps(s, ensure_ascii=False)[1:-1] for s in secrets))
    return _escaped[1]


def redact_data(value: Any) -> Any:
    """`value` (JSON-like: dicts, lists, strings, numbers) with `redact` applied to every string,
    keys included, and every string made `valid_text`: what may leave the daemon.

    Other values (numbers, booleans, None, datetimes) are returned as they are.
    """
    if isinstance(value, str):
        generation = _generation  # read before the secrets `redact` masks
        if _clean.get(value) == generation:
            return value
        masked = redact(valid_text(value))
        if masked == value and len(value) <= _CLEAN_LONGEST:
            if len(_clean) >= _CLEAN_MOST:
                _clean.clear()
            _clean[value] = generation
        return masked
    if isinstance(value, dict):
        return {
            (redact_data(key) if isinstance(key, str) else key): redact_data(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_data(item) for item in value]
    return value


def held_back(text: str) -> int:
    """How many characters at the end of `text` could be the start of a registered secret.

    A stream that redacts piece by piece (answer text as it streams) keeps that many back
    until the next piece shows whether they are a secret: a secret split across two pieces
    is masked like a whole one.
    """
    longest = 0
    for secret in _extra_secrets:
        for size in range(min(len(secret) - 1, len(text)), longest, -1):
            if text.endswith(secret[:size]):
                longest = size
                break
    return longest


def cut_outside_secrets(text: str, at: int) -> int:
    """The last position at or before `at` where `text` may be cut without cutting a
    registered secret in two (a part of a secret cannot be masked: masking needs the whole).

    For a text known in full (an output cut to a limit); a stream whose next piece is not known
    yet keeps back what `held_back` says instead.
    """
    moved = True
    while moved:
        moved = False
        for secret in _extra_secrets:
            start = text.find(secret, max(0, at - len(secret) + 1))
            if start != -1 and start < at:  # the occurrence spans the cut: cut before it
                at, moved = start, True
    return at


def valid_text(text: str) -> str:
    """`text` as text UTF-8 can encode: a surrogate pair becomes its character, a lone
    surrogate (a Python string can hold one; no JSON reader, database or terminal takes it)
    becomes U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


class BridgeError(Exception):
    """Base class of every error toolbridge raises."""

    def __init__(self, message: str) -> None:
        message = redact(message)
        super().__init__(message)
        self.message = message
        self.tool_runs: list[ToolRun] = []
        """Tool runs the loop had finished when this error surfaced, so nothing is lost."""


class UsageError(BridgeError, RuntimeError):
    """A developer mistake: an invalid manifest, a duplicate tool name, a bad option."""


class ConfigurationError(UsageError):
    """Missing or malformed configuration, such as no token or no app id."""


class ConversationLostError(UsageError):
    """The platform does not know the conversation: it kept the history in the memory of a
    process that has ended (the openai platform), or was never given this id."""


class PlatformError(BridgeError):
    """The agent platform failed; carries whatever ids it gave us."""

    def __init__(
        self,
        message: str,
        *,
        request_id: str | None = None,
        status_code: int | None = None,
        code: str | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.status_code = status_code
        self.code = code
        self.body = redact(body) if body is not None else None

    def __str__(self) -> str:
        parts = [self.message]
        if self.status_code is not None:
            parts.append(f"status={self.status_code}")
        if self.code:
            parts.append(f"code={self.code}")
        if self.request_id:
            parts.append(f"request_id={self.request_id}")
        return parts[0] if len(parts) == 1 else f"{parts[0]} ({', '.join(parts[1:])})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, request_id={self.request_id!r})"


class PlatformConnectionError(PlatformError):
    """The request did not get an answer: the platform is unreachable."""


class PlatformTimeoutError(PlatformConnectionError):
    """Connecting took too long, or the stream went quiet for longer than the idle timeout."""


class PlatformStatusError(PlatformError):
    """The platform answered with an HTTP error status."""


class BadRequestError(PlatformStatusError):
    """400 or 422: the platform rejected the request as malformed."""


class AuthenticationError(PlatformStatusError):
    """401 or 403: the token is missing, wrong, or lacks the permission."""


class NotFoundError(PlatformStatusError):
    """404: unknown app, conversation or path."""


class ConflictError(PlatformStatusError):
    """409: the resource is in a state that forbids the request."""


class PreconditionError(PlatformStatusError):
    """412 or 428: a precondition failed."""


class RateLimitError(PlatformStatusError):
    """429: too many requests; `retry_after` is the server's advice in seconds, if any."""

    retry_after: float | None = None


class ServerError(PlatformStatusError):
    """5xx: the platform failed."""


class InBandError(PlatformError):
    """HTTP 200 whose body is an error (top-level `code`/`message`, no content)."""


class StreamInterruptedError(PlatformError):
    """The stream stopped before the run ended; `received` holds what did arrive."""

    def __init__(self, message: str, *, received: list[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.received: list[Any] = list(received or [])


class StreamTimeoutError(PlatformTimeoutError, StreamInterruptedError):
    """The stream went quiet for longer than the idle timeout, or the run streamed for longer
    than its total time limit (`run_timeout`); `received` keeps what arrived.

    It is both a `PlatformTimeoutError` (what happened) and a `StreamInterruptedError` (the
    run is in an unknown state, so the request must not simply be sent again).
    """


class StreamLimitError(StreamInterruptedError):
    """The stream was stopped because the run's answer text, its tool-call arguments or its
    number of tool calls grew past a bound (`max_answer_chars`, `max_arguments_chars`,
    `max_tool_calls`); `received` keeps what arrived.

    Like any interrupted stream, the run is left in an unknown state on the platform; the
    message fails, and the next one may continue in a new platform conversation.
    """


class ProtocolError(PlatformError):
    """The platform sent data that is not what its protocol says (undecodable JSON...)."""


class RunError(BridgeError):
    """The conversation loop could not finish; carries what was done so far."""

    def __init__(
        self,
        message: str,
        *,
        conversation_id: str | None = None,
        request_id: str | None = None,
        code: str | None = None,
        tool_runs: list[ToolRun] | None = None,
    ) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.request_id = request_id
        self.code = code
        self.tool_runs = list(tool_runs or [])

    def __str__(self) -> str:
        extra = [f"request_id={self.request_id}"] if self.request_id else []
        if self.code:
            extra.insert(0, f"code={self.code}")
        return f"{self.message} ({', '.join(extra)})" if extra else self.message


class RunFailedError(RunError):
    """The platform reported the run as failed (an error event or an in-band error)."""


class MaxRoundsError(RunError):
    """The agent asked for tools in more rounds than `max_rounds` allows."""


class RunInterruptedError(RunError):
    """A restart of the bridge lost the agent's answer stream; the question must be asked again.

    Raised when recovery finds the tool outputs of an interrupted run already accepted by the
    platform: they are not sent twice, and the answer they led to cannot be read any more.
    Its code is always "interrupted".
    """

    def __init__(self, message: str, **kwargs: Any) -> None:
        kwargs.setdefault("code", "interrupted")
        super().__init__(message, **kwargs)


_STATUS_CLASSES: dict[int, type[PlatformStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionError,
    422: BadRequestError,
    428: PreconditionError,
    429: RateLimitError,
}


def status_error_class(status: int) -> type[PlatformStatusError]:
    """The exception class for an HTTP error status."""
    if status >= 500:
        return ServerError
    return _STATUS_CLASSES.get(status, PlatformStatusError)
