"""A wire-exact client for the AppBuilder v2 conversation API (requests + SSE).

On the wire it is indistinguishable from appbuilder-sdk 1.1.5 (same URL, headers and body
bytes; see docs/wire/appbuilder.md); unlike it, it has timeouts, bounded retries, typed tolerant
models and one exception tree (`bridge.errors`).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, overload

import pydantic
import requests

from bridge.errors import ConfigurationError, ProtocolError, UsageError, register_secret
from bridge.platforms._body import read_body
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._transport import Files, Transport
from bridge.platforms.appbuilder._arguments import (
    ToolLike,
    check_conversation_id,
    describe_validation_error,
    wire_action,
    wire_tool,
    wire_tool_choice,
    wire_tool_outputs,
)
from bridge.platforms.appbuilder._errors import (
    CONFIG_HINT,
    REQUEST_ID_HEADER,
    CallContext,
    in_band_error,
    read_status_error,
)
from bridge.platforms.appbuilder.models import (
    Action,
    ConversationResponse,
    FeedbackRequest,
    FeedbackResponse,
    FileUploadResponse,
    RunRequest,
    RunResponse,
    ToolOutput,
    WireToolChoice,
)
from bridge.platforms.appbuilder.stream import RunStream
from bridge.platforms.retry import RetryPolicy
from bridge.tracing import Tracing

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_GATEWAY",
    "DEFAULT_IDLE_TIMEOUT",
    "SDK_VERSION",
    "AppBuilderClient",
    "RunStream",
]

log = logging.getLogger(__name__)

DEFAULT_GATEWAY = "https://qianfan.baidubce.com"
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 120.0
SDK_VERSION = "1.1.5"
"""The official SDK version we present ourselves as, so the service treats us the same."""
_FEEDBACK_TYPES = ("upvote", "downvote", "cancel")

FilesFactory = Callable[[], Files]


class AppBuilderClient:
    """Low-level client of one AppBuilder app: conversations, runs, files, feedback.

    Args:
        app_id: The published app's id; default env `APPBUILDER_APP_ID`.
        token: The API key (`bce-v3/ALTAK-...`); default env `APPBUILDER_TOKEN`. `Bearer ` is
            prepended when missing (env `SECRET_KEY_PREFIX` overrides the prefix, as in the SDK).
        base_url: The gateway; default env `GATEWAY_URL_V2`, else `https://qianfan.baidubce.com`.
            `https://` is prepended when it has no scheme. Paths are appended after env
            `CONSOLE_OPENAPI_PREFIX` (default "") and `CONSOLE_OPENAPI_VERSION` (default `/v2`).
        connect_timeout: Seconds to establish a connection.
        idle_timeout: Longest silence, in seconds, while waiting for the response or between two
            reads of a stream.
        max_retries: Retries for connect errors and 429/500/502/503/504 (ignored when
            `retry_policy` is given). Never after a byte of a successful answer was read.
        retry_policy: Full control of retries and backoff.
        session: A `requests.Session` to use (not closed by `close()`); default: a new one.
        sleep: Waits between attempts (tests inject one that does not).
        run_timeout: Seconds one answer stream (a query, tool outputs or a reply) may last
            (the bounds of every answer stream: `StreamLimits.from_options`).
        max_answer_chars: Characters of answer text (reasoning included) one answer stream
            may carry.
        max_arguments_chars: Characters of tool-call arguments one answer stream may carry,
            all its calls together.
        max_tool_calls: Tool calls one answer stream may ask for.

    Raises:
        ConfigurationError: The app id or token is missing, or a timeout is not positive.
    """

    def __init__(
        self,
        app_id: str | None = None,
        token: str | None = None,
        base_url: str | None = None,
        *,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_retries: int = 3,
        retry_policy: RetryPolicy | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        run_timeout: float | None = None,
        max_answer_chars: int | None = None,
        max_arguments_chars: int | None = None,
        max_tool_calls: int | None = None,
    ) -> None:
        app_id = app_id or os.environ.get("APPBUILDER_APP_ID", "")
        token = token or os.environ.get("APPBUILDER_TOKEN", "")
        missing = [
            text
            for value, text in (
                (
                    app_id,
                    "no app id: pass app_id=... or set APPBUILDER_APP_ID (the id of a "
                    "published app, shown in the AppBuilder console)",
                ),
                (
                    token,
                    "no token: pass token=... or set APPBUILDER_TOKEN (an API key such as "
                    "bce-v3/ALTAK-...)",
                ),
            )
            if not value
        ]
        if missing:  # every missing setting at once: one fix-and-retry round, not two
            raise ConfigurationError("AppBuilder is not configured: " + "; ".join(missing))
        for name, value in (("connect_timeout", connect_timeout), ("idle_timeout", idle_timeout)):
            if not value > 0:
                raise ConfigurationError(
                    f"{name} must be a positive number of seconds (got {value})"
                )
        self.stream_limits = StreamLimits.from_options(
            run_timeout, max_answer_chars, max_arguments_chars, max_tool_calls
        )
        prefix = os.environ.get("SECRET_KEY_PREFIX", "Bearer")
        authorization = token if token.startswith(prefix) else f"{prefix} {token}"
        register_secret(token)
        register_secret(authorization)
        gateway = (base_url or os.environ.get("GATEWAY_URL_V2") or DEFAULT_GATEWAY).strip()
        if not gateway.startswith("http"):
            gateway = "https://" + gateway
        self.app_id = app_id
        self.base_url = gateway.rstrip("/")
        self.api_root = (
            self.base_url
            + os.environ.get("CONSOLE_OPENAPI_PREFIX", "")
            + os.environ.get("CONSOLE_OPENAPI_VERSION", "/v2")
        )
        """Where paths such as `/app/conversation/runs` are appended."""
        self.connect_timeout = float(connect_timeout)
        self.idle_timeout = float(idle_timeout)
        try:
            self.retry_policy = retry_policy or RetryPolicy(max_retries=max_retries)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        self._authorization = authorization
        self._platform = os.environ.get("APPBUILDER_SDK_PLATFORM", "unknown")
        self._sdk_configs: dict[str, str] = {}
        self._http = Transport(
            label="AppBuilder",
            connect_timeout=self.connect_timeout,
            idle_timeout=self.idle_timeout,
            retry_policy=self.retry_policy,
            read_status_error=read_status_error,
            request_id_header=REQUEST_ID_HEADER,
            config_hint=CONFIG_HINT,
            session=session,
            sleep=sleep,
            base_url=self.base_url,
        )
        self._mcp_context: str | None = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(app_id={self.app_id!r}, base_url={self.base_url!r}, "
            "token='[secure]')"
        )

    # --- lifecycle ------------------------------------------------------------------------------

    def use_tracing(self, tracing: Tracing) -> None:
        """Send the client spans of its requests to `tracing`."""
        self._http.tracing = tracing

    def close(self) -> None:
        """Release pooled connections (a session passed in by the caller stays open)."""
        self._http.close()

    def __enter__(self) -> AppBuilderClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- API ------------------------------------------------------------------------------------

    def create_conversation(self) -> str:
        """Open a conversation and return its id.

        Raises:
            PlatformError: A subclass for each failure (see `bridge.errors`).
        """
        body = json.dumps({"app_id": self.app_id}).encode("ascii")
        response, ctx = self._post("create_conversation", "/app/conversation", body=body)
        payload = self._read_json(response, ctx)
        if _error_code(payload) and not payload.get("conversation_id"):
            raise in_band_error(ctx, payload)
        with ctx.errors():
            result = ConversationResponse.model_validate(payload)
        if not result.conversation_id:
            raise ProtocolError(
                "AppBuilder create_conversation: the answer has no conversation_id "
                f"(got keys {sorted(payload)})",
                request_id=ctx.request_id(),
            )
        return result.conversation_id

    def upload_file(
        self,
        conversation_id: str,
        path: str | os.PathLike[str] | None = None,
        url: str | None = None,
    ) -> str:
        """Attach a file (a local `path` or a public `url`, exactly one) and return its file id.

        Raises:
            UsageError: Empty conversation id, neither or both of path/url, or no such file.
            PlatformError: A subclass for each platform failure.
        """
        check_conversation_id(conversation_id)
        if (path is None) == (url is None):
            raise UsageError(
                "upload_file needs exactly one of path=... (a local file) or url=... "
                f"(a file URL); got {'both' if path is not None else 'neither'}"
            )
        fields: dict[str, tuple[str | None, Any]] = {
            "app_id": (None, self.app_id),
            "conversation_id": (None, conversation_id),
        }
        local = Path(path) if path is not None else None
        if local is not None and not local.is_file():
            raise UsageError(f"upload_file: {str(local)!r} is not an existing file")
        if url is not None and not url:
            raise UsageError("upload_file: url is empty; expected an http(s) URL of the file")

        def files() -> dict[str, tuple[str | None, Any]]:
            # A fresh handle per attempt, so a retried upload sends the whole file again.
            if local is None:
                return {**fields, "file_url": (None, url)}
            try:
                handle = local.open("rb")
            except OSError as exc:
                raise UsageError(f"upload_file: cannot read {str(local)!r}: {exc}") from None
            return {**fields, "file": (local.name, handle)}

        response, ctx = self._post("upload_file", "/app/conversation/file/upload", files=files)
        payload = self._read_json(response, ctx)
        if _error_code(payload) and not payload.get("id"):
            raise in_band_error(ctx, payload)
        with ctx.errors():
            result = FileUploadResponse.model_validate(payload)
        if not result.id:
            raise ProtocolError(
                f"AppBuilder upload_file: the answer has no file id (got keys {sorted(payload)})",
                request_id=ctx.request_id(),
            )
        return result.id

    @overload
    def run(
        self,
        conversation_id: str,
        query: str = "",
        *,
        stream: Literal[True] = True,
        tools: Sequence[ToolLike] | None = None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]] | None = None,
        tool_choice: WireToolChoice | Mapping[str, Any] | str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        action: Action | Mapping[str, Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        mcp_authorization: Sequence[Mapping[str, Any]] | None = None,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> RunStream: ...

    @overload
    def run(
        self,
        conversation_id: str,
        query: str = "",
        *,
        stream: Literal[False],
        tools: Sequence[ToolLike] | None = None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]] | None = None,
        tool_choice: WireToolChoice | Mapping[str, Any] | str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        action: Action | Mapping[str, Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        mcp_authorization: Sequence[Mapping[str, Any]] | None = None,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> RunResponse: ...

    @overload
    def run(
        self,
        conversation_id: str,
        query: str = "",
        *,
        stream: bool,
        tools: Sequence[ToolLike] | None = None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]] | None = None,
        tool_choice: WireToolChoice | Mapping[str, Any] | str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        action: Action | Mapping[str, Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        mcp_authorization: Sequence[Mapping[str, Any]] | None = None,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> RunResponse | RunStream: ...

    def run(
        self,
        conversation_id: str,
        query: str = "",
        *,
        stream: bool = True,
        tools: Sequence[ToolLike] | None = None,
        tool_outputs: Sequence[ToolOutput | Mapping[str, Any]] | None = None,
        tool_choice: WireToolChoice | Mapping[str, Any] | str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        action: Action | Mapping[str, Any] | None = None,
        parameters: Mapping[str, Any] | None = None,
        mcp_authorization: Sequence[Mapping[str, Any]] | None = None,
        custom_metadata: Mapping[str, Any] | None = None,
    ) -> RunResponse | RunStream:
        """Run the agent: send a query (with tools), or the outputs of its tool calls.

        Args:
            conversation_id: From `create_conversation`.
            query: The user's message; "" when sending `tool_outputs`.
            stream: True returns a `RunStream` of chunks (answer deltas); False waits for the
                whole `RunResponse`.
            tools: Tool descriptions (`{"type": "function", "function": {...}}` dicts, SDK
                `Manifest` objects, or MCP tools with `inputSchema`, which are wrapped).
            tool_outputs: `{"tool_call_id", "output"}` for every call of the pending interrupt.
            tool_choice: A `WireToolChoice`, its dict form, a tool name to force it, or "auto".
            end_user_id: Your id for the end user.
            file_ids: Ids from `upload_file`.
            action: `Action.resume(interrupt_event_id)` to answer a workflow question.
            parameters: Workflow start-node variables.
            mcp_authorization: MCP authorization entries (sent as is).
            custom_metadata: e.g. `{"override_role_instruction": "..."}`.

        Returns:
            A `RunStream` (stream=True) or a `RunResponse` (stream=False).

        Raises:
            UsageError: Bad arguments (empty conversation id, no query and no tool outputs...).
            PlatformError: A subclass for each failure (status, in-band, timeout, connection).
        """
        check_conversation_id(conversation_id)
        if not isinstance(query, str):
            raise UsageError(f"query must be a str (got {type(query).__name__})")
        if query == "" and not tool_outputs:
            raise UsageError(
                "AppBuilderClient Run API: query and tool_outputs cannot both be empty "
                "(send a query, or the tool_outputs of the pending tool calls)"
            )
        wire_tools: list[dict[str, Any]] = []
        has_mcp_tool = False
        for index, tool in enumerate(tools or ()):
            described, is_mcp = wire_tool(tool, index)
            wire_tools.append(described)
            has_mcp_tool = has_mcp_tool or is_mcp
        # Same header bookkeeping as the SDK: the MCP context lasts until the next plain query.
        if not tool_outputs:
            self._mcp_context = None
        if has_mcp_tool and self._mcp_context is None:
            self._mcp_context = "client"
        try:
            request = RunRequest(
                query=query,
                stream=bool(stream),
                conversation_id=conversation_id,
                file_ids=list(file_ids or []),
                app_id=self.app_id,
                tools=wire_tools,
                tool_outputs=wire_tool_outputs(tool_outputs),
                tool_choice=wire_tool_choice(tool_choice),
                end_user_id=end_user_id,
                action=wire_action(action),
                mcp_authorization=(
                    [dict(item) for item in mcp_authorization]
                    if mcp_authorization is not None
                    else None
                ),
                parameters=dict(parameters) if parameters is not None else None,
                custom_metadata=dict(custom_metadata) if custom_metadata is not None else None,
            )
        except pydantic.ValidationError as exc:
            raise UsageError(f"invalid run arguments: {describe_validation_error(exc)}") from None
        path = "/app/conversation/runs"
        # The run's total time counts from the request (`RunStream` reads the rest).
        budget = self.stream_limits.budget(
            f"AppBuilder run: the stream from {self.api_root + path}", received=[]
        )
        response, ctx = self._post(
            "run", path, body=request.to_wire(), mcp_context=self._mcp_context, budget=budget
        )
        if stream and not _is_json(response):
            return RunStream(response, ctx, limits=self.stream_limits, budget=budget)
        # AppBuilder sometimes answers a stream request with a plain JSON body instead of SSE
        # (HTTP 200, often an error such as a failed workflow node): read it as the whole
        # answer, so its code and message are reported instead of an empty stream.
        try:
            payload = self._read_json(response, ctx, budget=budget)
        finally:
            budget.close()
        with ctx.errors():
            result = RunResponse.model_validate(payload)
        if result.is_error:
            raise in_band_error(ctx, payload)
        result.http_request_id = ctx.header_request_id
        if stream:
            log.debug("AppBuilder run: a stream request was answered with a JSON body")
            return RunStream(response, ctx, answer=result)
        return result

    def feedback(
        self,
        conversation_id: str,
        message_id: str,
        type: Literal["upvote", "downvote", "cancel"],
        flag: Sequence[str] | None = None,
        reason: str | None = None,
    ) -> str:
        """Rate an answer (`upvote`, `downvote` or `cancel`); returns the request id.

        Raises:
            UsageError: Empty ids or an unknown `type`.
            PlatformError: A subclass for each platform failure.
        """
        check_conversation_id(conversation_id)
        if not message_id:
            raise UsageError("feedback: message_id is empty; use the message_id of a run's answer")
        if type not in _FEEDBACK_TYPES:
            raise UsageError(
                f"feedback: type must be one of {', '.join(_FEEDBACK_TYPES)} (got {type!r})"
            )
        body = FeedbackRequest(
            app_id=self.app_id,
            conversation_id=conversation_id,
            message_id=message_id,
            type=type,
            flag=list(flag) if flag is not None else None,
            reason=reason,
        ).to_wire()
        response, ctx = self._post("feedback", "/app/conversation/feedback", body=body)
        payload = self._read_json(response, ctx, allow_empty=True)
        if _error_code(payload):
            raise in_band_error(ctx, payload)
        with ctx.errors():
            result = FeedbackResponse.model_validate(payload)
        return ctx.request_id(result.request_id) or ""

    # --- transport ------------------------------------------------------------------------------

    def _sdk_config(self, context: str) -> str:
        """The `X-Appbuilder-Sdk-Config` header value, made once per MCP context."""
        found = self._sdk_configs.get(context)
        if found is None:
            config = {
                "appbuilder_sdk_version": SDK_VERSION,
                "appbuilder_sdk_language": "python",
                "appbuilder_sdk_platform": self._platform,
            }
            if context:
                config["appbuilder_sdk_mcp_context"] = context
            found = json.dumps(config, separators=(",", ":"))
            if len(self._sdk_configs) < 64:  # contexts are few; never grow without bound
                self._sdk_configs[context] = found
        return found

    def _headers(
        self, request_id: str, *, json_body: bool, mcp_context: str | None
    ) -> dict[str, str]:
        context = mcp_context or os.environ.get("APPBUILDER_SDK_MCP_CONTEXT") or ""
        headers = {
            "X-Appbuilder-Sdk-Config": self._sdk_config(context),
            "X-Appbuilder-Origin": "appbuilder_sdk",
            "X-Appbuilder-Request-Id": request_id,
            "X-Bce-Request-Id": request_id,
            "Authorization": self._authorization,
        }
        if json_body:
            headers["Content-Type"] = "application/json"
        return headers

    def _post(
        self,
        operation: str,
        path: str,
        *,
        body: bytes | None = None,
        files: FilesFactory | None = None,
        mcp_context: str | None = None,
        budget: RunBudget | None = None,
    ) -> tuple[requests.Response, CallContext]:
        """POST with retries; return a response with a 2xx status whose body is still unread.

        One request id is minted per call and kept across its retries, so the server can tell
        a retry from a new request.
        """
        url = self.api_root + path
        request_id = str(uuid.uuid4())
        # Every header per call, in the SDK's order: the wire stays byte-for-byte the SDK's.
        headers = self._headers(request_id, json_body=files is None, mcp_context=mcp_context)
        response = self._http.request(
            "POST",
            url,
            data=body,
            files=files,
            headers=headers,
            stream=True,
            operation=operation,
            budget=budget,
        )
        ctx = CallContext(
            operation=operation,
            url=url,
            transport=self._http,
            sent_request_id=request_id,
            header_request_id=self._http.request_id(response),
        )
        return response, ctx

    def _read_json(
        self,
        response: requests.Response,
        ctx: CallContext,
        *,
        allow_empty: bool = False,
        budget: RunBudget | None = None,
    ) -> dict[str, Any]:
        ctx.streaming = True
        try:
            with ctx.errors():
                # Bounded by MAX_BODY_BYTES (and a run's total time).
                raw = read_body(response) if budget is None else budget.body(response)
                if allow_empty and not raw.strip():
                    return {}
                payload = json.loads(raw.decode("utf-8"))
        finally:
            response.close()
        if not isinstance(payload, dict):
            raise ProtocolError(
                f"AppBuilder {ctx.operation}: expected a JSON object, got {type(payload).__name__}",
                request_id=ctx.request_id(),
            )
        return payload


def _is_json(response: requests.Response) -> bool:
    """True when the body is declared JSON (``application/json``, ``...+json``), not SSE."""
    kind = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _error_code(payload: Mapping[str, Any]) -> bool:
    code = payload.get("code")
    return code is not None and str(code).strip() not in ("", "0")
