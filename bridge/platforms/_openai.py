"""What the two OpenAI adapters (Chat Completions, Responses) share.

On top of the HTTP kernel: `read_openai_status_error` reads an `{"error": {"message", "type",
"code"}}` answer (or the other shapes `error_details` knows) and adds what to check;
`openai_transport` builds a `Transport` for one server. On the wire: `decode_object`,
`error_details`, `add_usage`, `model_verdict`. In the adapters: `OpenAIPlatform`, their base
(the settings both read from ``OPENAI_*``, `describe`, the batch `submit` answers), the tool
choice they can send, function tool names, pending-batch checks and fresh ids for reused call
ids.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol, TypeVar

import requests

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    NotFoundError,
    PlatformStatusError,
    ProtocolError,
    RateLimitError,
    ServerError,
    UsageError,
    register_secret,
    status_error_class,
)
from bridge.platforms._settings import (
    check_base_url,
    check_extra_body,
    check_model,
    check_seconds,
    retry_policy_for,
)
from bridge.platforms._transport import ErrorAnswer, Transport, trim
from bridge.platforms.base import (
    InMemoryPlatform,
    PlatformDescription,
    parse_tool_choice,
    results_by_call,
)
from bridge.platforms.retry import RetryPolicy
from bridge.types import ToolBatch, ToolCall, ToolChoice, ToolResult

__all__ = [
    "CONFIG_HINT",
    "LABEL",
    "REQUEST_ID_HEADER",
    "OpenAIPlatform",
    "OpenAISettings",
    "add_usage",
    "choice_name",
    "decode_object",
    "error_details",
    "follow_up_fields",
    "function_tool_name",
    "model_verdict",
    "openai_transport",
    "pending_batch",
    "read_openai_status_error",
    "renamed_calls",
    "trim",
]

logger = logging.getLogger(__name__)

LABEL = ""
"""No prefix: the server's URL in each message says who failed."""
REQUEST_ID_HEADER = "x-request-id"
CONFIG_HINT = (
    "check base_url / OPENAI_BASE_URL (expected e.g. http://127.0.0.1:8000/v1) and the API key"
)

_STATUS_HINTS: dict[type[PlatformStatusError], str] = {
    AuthenticationError: "check the API key (api_key=, --api-key or OPENAI_API_KEY)",
    NotFoundError: "check the base URL (it usually ends in /v1) and the model name",
    BadRequestError: "the server rejected the request (model, tools or parameters)",
    RateLimitError: "the server is rate limiting",
    ServerError: "the server failed",
}


def read_openai_status_error(answer: ErrorAnswer) -> PlatformStatusError:
    """The error for an OpenAI-style error answer, with its code and what to check."""
    details = error_details(answer.json())
    code, detail = details if details is not None else (None, None)
    if code == _LOST_CHAIN:
        # The Responses API answers 400 for a chain it no longer has: what is missing is the
        # conversation (as a 404 says elsewhere), so the loop may continue in a new one.
        error = answer.error(detail, code=code, hint=_LOST_CHAIN_HINT)
        return NotFoundError(
            error.message,
            request_id=error.request_id,
            status_code=error.status_code,
            code=code,
            body=error.body,
        )
    hint = _STATUS_HINTS.get(status_error_class(answer.status), "")
    return answer.error(detail, code=code, hint=hint)


_LOST_CHAIN = "previous_response_not_found"
_LOST_CHAIN_HINT = (
    "the server no longer has this conversation's previous response (it expired or was "
    "deleted there, or the emulator serving it lost its state); a new conversation is needed"
)


def openai_transport(
    base_url: str,
    *,
    api_key: str | None,
    connect_timeout: float,
    idle_timeout: float,
    retry_policy: RetryPolicy,
    label: str = LABEL,
    session: requests.Session | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Transport:
    """A `Transport` for one OpenAI-compatible server (Bearer auth, `x-request-id`)."""
    register_secret(api_key)
    options: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    return Transport(
        label=label,
        headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
        connect_timeout=connect_timeout,
        idle_timeout=idle_timeout,
        retry_policy=retry_policy,
        read_status_error=read_openai_status_error,
        request_id_header=REQUEST_ID_HEADER,
        config_hint=CONFIG_HINT,
        session=session,
        base_url=base_url,
        **options,
    )


# --- wire ----------------------------------------------------------------------------------


def decode_object(data: str | bytes, request_id: str | None, *, what: str) -> dict[str, Any]:
    """Parse `data` as a JSON object, or raise `ProtocolError` naming `what` it was."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError) as exc:
        # RecursionError: JSON nested deeper than Python's parser can follow (a hostile server).
        problem = (
            "is JSON nested too deeply to be read (expected a shallow object)"
            if isinstance(exc, RecursionError)
            else f"is not valid JSON ({exc})"
        )
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        raise ProtocolError(
            f"{what} {problem}: {text[:200]!r}",
            request_id=request_id,
            body=trim(text),
        ) from exc
    if not isinstance(payload, dict):
        raise ProtocolError(
            f"{what} is a JSON {type(payload).__name__}, expected an object",
            request_id=request_id,
        )
    return payload


def error_details(payload: object) -> tuple[str, str] | None:
    """`(code, message)` when `payload` is an error object in any of the usual shapes."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if error is None and payload.get("object") == "error":
        error = payload  # vLLM's older flat shape: {"object": "error", "message": ...}
    if isinstance(error, str):
        return "error", error
    if not isinstance(error, dict):
        return None
    message = error.get("message") or json.dumps(error, ensure_ascii=False)[:300]
    code = error.get("code") or error.get("type") or "error"
    return str(code), str(message)


def add_usage(total: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Sum numeric usage fields over the completions of one turn."""
    if usage is None:
        return total
    if total is None:
        return dict(usage)
    summed = dict(total)
    for key, value in usage.items():
        if isinstance(value, int) and isinstance(summed.get(key), int):
            summed[key] += value
        else:
            summed[key] = value
    return summed


def model_verdict(base_url: str, model: str, served: list[str] | None) -> str:
    """What a ``GET /models`` listing `served` proves about `model`, in one sentence (`served`
    None: the listing was not JSON).

    Raises:
        ConfigurationError: the server lists its models and `model` is not among them.
    """
    if served is None:
        return f"{base_url} answered (its /models reply is not JSON)"
    if served and model not in served:
        raise ConfigurationError(
            f"model {model!r} is not served by {base_url}; "
            f"it serves: {', '.join(served)} (set --model or OPENAI_MODEL)"
        )
    if not served:
        return f"{base_url} answered (it lists no models to confirm {model!r})"
    return f"{base_url} answered and serves model {model!r}"


# --- adapters ------------------------------------------------------------------------------


def choice_name(choice: ToolChoice | str | None, *, api: str) -> str | None:
    """The tool name or mode to send; a forced input is refused rather than dropped, since the
    model would then call the tool with arguments of its own choosing. `api` names the API in
    the refusal (e.g. "OpenAI-compatible Chat Completions")."""
    parsed = parse_tool_choice(choice)
    if not isinstance(parsed, ToolChoice):
        return parsed
    if parsed.input:
        raise UsageError(
            f"tool_choice input {parsed.input!r} for {parsed.name!r} cannot be sent: "
            f"{api} can force a tool but not its arguments; "
            f"pass the tool name only (tool_choice={parsed.name!r})"
        )
    return parsed.name


def function_tool_name(position: int, tool: object, *, flat: bool = False) -> str:
    """The name of a Chat Completions function tool (with `flat`, also of one already in the
    Responses shape), or a `UsageError` saying what a function tool looks like."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    source = function if isinstance(function, Mapping) else (tool if flat else None)
    name = source.get("name") if isinstance(source, Mapping) else None
    if not isinstance(tool, Mapping) or tool.get("type") != "function" or not name:
        kind = "a function tool" if flat else "an OpenAI function tool"
        raise UsageError(
            f"tools[{position}] is not {kind}: expected "
            '{"type": "function", "function": {"name": ..., "parameters": ...}} '
            '(build manifests with dialect="openai")'
        )
    return str(name)


def pending_batch(conversation_id: str, pending: ToolBatch | None, batch: ToolBatch) -> ToolBatch:
    """The batch waiting for results, checked to be the one `submit` was given.

    Raises:
        UsageError: nothing waits, or another batch does.
    """
    if pending is None:
        raise UsageError(
            f"conversation {conversation_id} has no tool calls waiting for results; "
            "submit() answers the batch of a ToolCallsRequested event"
        )
    if batch.batch_id != pending.batch_id:
        raise UsageError(
            f"batch {batch.batch_id} is not the one waiting in conversation "
            f"{conversation_id} (expected batch {pending.batch_id})"
        )
    return pending


def renamed_calls(
    calls: tuple[ToolCall, ...], seen: set[Any]
) -> tuple[tuple[ToolCall, ...], dict[str, str]]:
    """The calls with a fresh id for any whose ``call_id`` is in `seen` (ids the conversation
    already used), and the renames (fresh -> the server's); `seen` gains every id given.

    Some servers number calls per answer ("call_0" every round); the loop runs a call id at
    most once per conversation, so a reused id would get an old output instead of a new run.
    """
    distinct, renamed = [], {}
    for call in calls:
        if call.call_id in seen:
            fresh = f"call_{uuid.uuid4().hex[:24]}"
            logger.debug("call id %s is already used; renamed %s", call.call_id, fresh)
            renamed[fresh] = call.call_id
            call = call.model_copy(update={"call_id": fresh})
        seen.add(call.call_id)
        distinct.append(call)
    return tuple(distinct), renamed


class OpenAISettings(NamedTuple):
    """The settings both OpenAI adapters read the same way, checked."""

    base_url: str
    model: str
    api_key: str | None
    retry_policy: RetryPolicy
    extra_body: dict[str, Any]

    @classmethod
    def read(
        cls,
        base_url: str | None,
        model: str | None,
        api_key: str | None,
        *,
        endpoint: str,
        connect_timeout: float,
        idle_timeout: float,
        max_retries: int,
        retry_policy: RetryPolicy | None,
        extra_body: Mapping[str, Any] | None,
        managed_keys: frozenset[str],
    ) -> OpenAISettings:
        """The options given, else ``OPENAI_BASE_URL``, ``OPENAI_MODEL``, ``OPENAI_API_KEY``.

        Raises:
            ConfigurationError: A required setting is missing or malformed.
        """
        url = check_base_url(base_url or os.environ.get("OPENAI_BASE_URL") or None, endpoint)
        name = check_model(model or os.environ.get("OPENAI_MODEL") or None)
        key = api_key or os.environ.get("OPENAI_API_KEY") or None
        check_seconds(connect_timeout=connect_timeout, idle_timeout=idle_timeout)
        policy = retry_policy_for(max_retries, retry_policy)
        return cls(url, name, key, policy, check_extra_body(extra_body, managed_keys))


def follow_up_fields(turn_tools: Mapping[str, Any]) -> dict[str, Any]:
    """The turn's tool fields to send with its tool results: a forced ``tool_choice`` (a tool
    name or ``required``) is left out, since sent again it would force another call after every
    result, a loop only max_rounds would stop; the follow-up lets the model answer."""
    fields = dict(turn_tools)
    if fields.get("tool_choice") not in (None, "auto", "none"):
        del fields["tool_choice"]
    return fields


class _HoldsPending(Protocol):
    pending: ToolBatch | None


C = TypeVar("C", bound=_HoldsPending)


class OpenAIPlatform(InMemoryPlatform[C]):
    """What both OpenAI adapters share on `InMemoryPlatform`: the settings they read the same
    way (`configure`), their `repr` (never the key), `describe`, and the batch `submit` answers
    (`answering`)."""

    base_url: str
    model: str
    extra_body: dict[str, Any]
    system: str | None
    _api_key: str | None
    _url: str
    repr_fields: ClassVar[tuple[str, ...]] = ()
    """Attributes shown in `repr` between the model and the key."""

    def configure(
        self,
        base_url: str | None,
        model: str | None,
        api_key: str | None,
        *,
        endpoint: str,
        managed_keys: frozenset[str],
        connect_timeout: float,
        idle_timeout: float,
        max_retries: int,
        retry_policy: RetryPolicy | None,
        extra_body: Mapping[str, Any] | None,
        system: str | None,
    ) -> RetryPolicy:
        """Read and keep the settings (`OpenAISettings.read`) and the URL of `endpoint`; return
        the retry policy to build the client with.

        Raises:
            ConfigurationError: A required setting is missing or malformed.
        """
        settings = OpenAISettings.read(
            base_url,
            model,
            api_key,
            endpoint=endpoint,
            connect_timeout=connect_timeout,
            idle_timeout=idle_timeout,
            max_retries=max_retries,
            retry_policy=retry_policy,
            extra_body=extra_body,
            managed_keys=managed_keys,
        )
        self.base_url, self.model, self._api_key = (
            settings.base_url,
            settings.model,
            settings.api_key,
        )
        self.extra_body = settings.extra_body
        self.system = system
        self._url = self.base_url + endpoint
        return settings.retry_policy

    def __repr__(self) -> str:
        key = "'[secure]'" if self._api_key else "None"
        shown = "".join(f"{name}={getattr(self, name)!r}, " for name in self.repr_fields)
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"{shown}api_key={key})"
        )

    def describe(self) -> PlatformDescription:
        """The server and model this adapter talks to."""
        return PlatformDescription(base_url=self.base_url, model=self.model)

    def answering(
        self, conversation_id: str, batch: ToolBatch, results: Sequence[ToolResult]
    ) -> tuple[C, ToolBatch, dict[str, ToolResult]]:
        """The conversation's state, its pending batch (checked to be `batch`) and `results` by
        call id (checked to answer each call once), for `submit`.

        Raises:
            UsageError: Unknown conversation, a batch that is not the pending one, or results
                that do not answer each call of the batch exactly once.
        """
        state = self._state(conversation_id)
        pending = pending_batch(conversation_id, state.pending, batch)
        return state, pending, results_by_call(pending, results)
