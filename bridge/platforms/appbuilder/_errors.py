"""What AppBuilder adds to the HTTP kernel's errors: its error bodies, in-band errors, ids.

Transport, SSE and decoding failures are translated by `bridge.platforms._transport` (through
`CallContext.errors`); this module reads AppBuilder's own answers that say "failed": an HTTP
error status (`read_status_error`) and an HTTP 200 whose body is an error (`in_band_error`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import (
    AuthenticationError,
    InBandError,
    NotFoundError,
    PlatformError,
    PlatformStatusError,
    status_error_class,
)
from bridge.platforms._transport import ErrorAnswer, Transport, trim

__all__ = [
    "CONFIG_HINT",
    "REQUEST_ID_HEADER",
    "CallContext",
    "in_band_error",
    "read_status_error",
]

REQUEST_ID_HEADER = "X-Appbuilder-Request-Id"
CONFIG_HINT = (
    "check base_url / GATEWAY_URL_V2 (expected e.g. https://qianfan.baidubce.com) and the token"
)

_STATUS_HINTS: dict[type[PlatformStatusError], str] = {
    AuthenticationError: "check the token (APPBUILDER_TOKEN or --token)",
    NotFoundError: "check the app id (APPBUILDER_APP_ID or --app-id) and GATEWAY_URL_V2",
}


@dataclass
class CallContext:
    """What an error needs to know about the call in progress, once it was answered."""

    operation: str
    """Human name of the call, e.g. "run" or "create_conversation"."""
    url: str
    transport: Transport
    sent_request_id: str | None = None
    """The id we sent in `X-Appbuilder-Request-Id` / `X-Bce-Request-Id`."""
    header_request_id: str | None = None
    """`X-Appbuilder-Request-Id` of the response, once there is one."""
    streaming: bool = False
    """True once the body of a successful answer is being read (no retry past this point)."""
    received: list[Any] = field(default_factory=list)
    """Chunks of a streamed run received so far."""

    def request_id(self, body_request_id: str | None = None) -> str | None:
        """The best id to report: the response header's, else the body's, else the one sent."""
        return self.header_request_id or body_request_id or self.sent_request_id

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Translate every transport/decoding failure raised in the block (`Transport.errors`)."""
        try:
            with self.transport.errors(
                self.url,
                operation=self.operation,
                streaming=self.streaming,
                received=self.received,
                request_id=self.request_id(),
            ):
                yield
        except PlatformError as exc:
            # Without a response header, the id the last chunk carried beats the one we sent.
            last = self.received[-1] if self.received else None
            body_id = getattr(last, "request_id", None)
            if body_id and exc.request_id == self.request_id():
                exc.request_id = self.request_id(str(body_id))
            raise


_CONVERSATION_HINT = (
    "the platform no longer has this conversation (it expired or was deleted there, or the "
    "emulator serving it lost its state); a new conversation is needed, and if creating one "
    "fails too, check the app id (APPBUILDER_APP_ID or --app-id)"
)


def read_status_error(answer: ErrorAnswer) -> PlatformStatusError:
    """The error for an HTTP error status: AppBuilder's `code`, `message` and request id."""
    payload = answer.json()
    kind = status_error_class(answer.status)
    message = _text(payload.get("message"))
    hint = _STATUS_HINTS.get(kind, "")
    if kind is NotFoundError and message is not None and "conversation" in message.lower():
        # The app was found (the conversation was not): the app id is not what is wrong.
        hint = _CONVERSATION_HINT
    return answer.error(
        message,
        code=_text(payload.get("code")),
        hint=hint,
        request_id=_body_request_id(payload),
    )


def in_band_error(ctx: CallContext, payload: Mapping[str, Any]) -> InBandError:
    """The error for an HTTP 200 answer that is an error (top-level `code`/`message`)."""
    code = _text(payload.get("code"))
    message = _text(payload.get("message")) or "(no message)"
    return InBandError(
        f"AppBuilder {ctx.operation} returned an error with HTTP 200: {message}",
        request_id=ctx.request_id(_body_request_id(payload)),
        status_code=200,
        code=code,
        body=trim(json.dumps(payload, ensure_ascii=False, default=str)),
    )


def _body_request_id(payload: Mapping[str, Any]) -> str | None:
    return _text(payload.get("request_id") or payload.get("requestId"))


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)
