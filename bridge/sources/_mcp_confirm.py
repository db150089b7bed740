"""Asking an MCP host's user before a `confirm=True` tool runs (elicitation), for `mcp-serve`.

The rule is `bridge.tools.approval`'s; this module only carries the question to the host and the
answer back. Two protocol eras carry it differently:

- up to 2025-11-25 the server sends an `elicitation/create` request in the middle of the
  `tools/call` and waits for the answer;
- from 2026-07-28 the `tools/call` answers with an `InputRequiredResult` holding the question,
  and the client calls again with the answer and the `request_state` it was given.

In the second era the answer arrives in another request, so it is bound here to the question it
answers: `request_state` is a one-time token kept in this process with the hash of the exact
arguments and the call id minted for them. An answer is used once, only for the same tool and
arguments, and only within `answer_timeout` seconds; anything else asks again.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.tools.approval import Answer, Verdict, arguments_digest, question, verdict_for

if TYPE_CHECKING:
    from mcp import types

__all__ = ["HostApproval"]

logger = logging.getLogger(__name__)

INPUT_KEY = "toolbridge_confirm"
"""The key of the question in an `InputRequiredResult` (2026-07-28 and later)."""

_INPUT_REQUIRED_SINCE = "2026-07-28"
_MAX_PENDING = 256
"""Questions waiting for an answer; the oldest is forgotten first (its answer then asks again)."""

NO_ELICITATION = "the MCP client cannot ask a person: it did not declare the elicitation capability"
NO_CHANNEL = "the MCP connection cannot carry a question to the client"


@dataclass(frozen=True)
class _Pending:
    digest: str
    call_id: str
    expires: float


class HostApproval:
    """Asks the host about each call of a confirm tool, through MCP elicitation.

    Args:
        answer_timeout: Seconds a person has to answer; no answer in time refuses the call.
    """

    def __init__(self, *, answer_timeout: float = 600.0) -> None:
        self.answer_timeout = answer_timeout
        self._pending: OrderedDict[str, _Pending] = OrderedDict()
        self._lock = threading.Lock()

    async def ask(
        self,
        ctx: Any,
        name: str,
        arguments: dict[str, Any],
        request: types.CallToolRequestParams,
        call_id: str | None = None,
    ) -> tuple[str, Verdict] | types.InputRequiredResult:
        """The call id and the verdict for this call, or the question to hand to the client.

        `ctx` is the SDK's request context of the `tools/call` being answered; `call_id` the id
        the caller gave this call (None: one is minted), kept with a question the client
        answers in another request (`call_id_of` finds it again).
        """
        from mcp import types

        call_id = call_id or _new_call_id()
        session = ctx.session
        if not _can_elicit(session.client_capabilities):
            return call_id, verdict_for(None, detail=NO_ELICITATION)
        text = f"{question(name, arguments)}\n\nAccept to run it once; decline to refuse it."
        form = types.ElicitRequestFormParams(message=text, requested_schema=_EMPTY_FORM)
        if session.can_send_request:
            return call_id, await self._ask_now(session, ctx.request_id, form)
        if str(session.protocol_version) < _INPUT_REQUIRED_SINCE:
            return call_id, verdict_for(None, detail=NO_CHANNEL)
        digest = arguments_digest(name, arguments)
        pending = self._take(request.request_state, digest)
        answer = (request.input_responses or {}).get(INPUT_KEY)
        if pending is not None and answer is not None:
            if not isinstance(answer, types.ElicitResult):
                return pending.call_id, verdict_for("failed", detail="the answer is not a form")
            return pending.call_id, verdict_for(_answer(answer.action))
        token = self._remember(digest, call_id)
        return types.InputRequiredResult(
            input_requests={INPUT_KEY: types.ElicitRequest(params=form)}, request_state=token
        )

    async def _ask_now(
        self, session: Any, request_id: Any, form: types.ElicitRequestFormParams
    ) -> Verdict:
        import anyio

        try:
            with anyio.fail_after(self.answer_timeout):
                result = await session.elicit_form(
                    form.message, form.requested_schema, related_request_id=request_id
                )
        except TimeoutError:
            return verdict_for("failed", detail=f"no answer within {self.answer_timeout:g} s")
        except Exception as exc:  # the client answered with an error, or went away
            logger.warning("asking the MCP client for approval failed: %s", exc)
            return verdict_for("failed", detail=f"{type(exc).__name__}: {exc}")
        return verdict_for(_answer(result.action))

    def call_id_of(self, request: types.CallToolRequestParams) -> str | None:
        """The call id of the question `request` answers (its ``request_state``), while that
        question waits and was about the same tool and arguments; None otherwise. The answer
        is not taken: `ask` takes it."""
        token = request.request_state
        if not token:
            return None
        with self._lock:
            pending = self._pending.get(token)
        digest = arguments_digest(request.name, dict(request.arguments or {}))
        if pending is None or pending.digest != digest or pending.expires <= time.monotonic():
            return None
        return pending.call_id

    def _remember(self, digest: str, call_id: str) -> str:
        token = secrets.token_urlsafe(24)
        now = time.monotonic()
        with self._lock:
            for key in [key for key, held in self._pending.items() if held.expires <= now]:
                del self._pending[key]
            while len(self._pending) >= _MAX_PENDING:
                self._pending.popitem(last=False)
            self._pending[token] = _Pending(digest, call_id, now + self.answer_timeout)
        return token

    def _take(self, token: str | None, digest: str) -> _Pending | None:
        """The question `token` stands for, once, if it was about these exact arguments."""
        if not token:
            return None
        with self._lock:
            pending = self._pending.pop(token, None)
        if pending is None or pending.digest != digest or pending.expires <= time.monotonic():
            return None
        return pending


_EMPTY_FORM: dict[str, Any] = {"type": "object", "properties": {}}
"""Nothing to fill in: accepting the form is the approval."""


def _new_call_id() -> str:
    return f"mcp-{uuid.uuid4().hex[:12]}"


def _can_elicit(capabilities: types.ClientCapabilities | None) -> bool:
    """Form elicitation declared (a bare `elicitation: {}` predates modes and means forms)."""
    elicitation = capabilities.elicitation if capabilities is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def _answer(action: str) -> Answer:
    if action == "accept":
        return "approved"
    return "declined" if action == "decline" else "dismissed"
