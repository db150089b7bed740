"""Coze (coze.cn / coze.com) chat API v3 as a `Platform`: a bot whose local plugins run here.

A question is ``POST /v3/chat`` with ``auto_save_history`` (the platform refuses tool outputs
of a chat started without it); the bot pauses in ``requires_action`` when it wants a local
plugin API (端插件) run, and every output of that pause goes back in one
``POST /v3/chat/submit_tool_outputs``, whose answer is a new stream of the same chat. A chatflow
question (``reply_message``) is answered with a new user message. Without streaming, the chat
is polled with ``/v3/chat/retrieve`` and its answer read from ``/v3/chat/message/list``.

A new conversation costs no request of its own (`OpensOnFirstMessage`): the bridge names it
with a local handle (`conversation_handle`), the first chat goes without a conversation id,
and Coze opens one, named in the chat's first event (`opened_conversation`), which the bridge
journals before it reads on. `create_conversation` remains for callers that want an id first.

Coze takes no tool list per request: the plugins live in the bot's configuration. So the
names the bot asks for are checked against the local tools of the question: a call of a tool
that is not loaded is logged, and its output (the dispatcher's "unknown tool") is replaced by
one that says the bot's plugin has a tool this side does not (see `remote_tool_names` to
compare both lists beforehand, as ``toolbridge doctor`` does).

Errors: HTTP statuses and the platform's ``{code, msg}`` answers (mostly HTTP 200) become the
`bridge.errors` tree (`bridge.platforms.coze.models.error_for_code`), with ``x-tt-logid`` as
the request id. An interrupted stream (Ctrl-C, or a consumer that stops reading) cancels the
chat, best effort.
"""

from __future__ import annotations

import itertools
import json as jsonlib
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import requests
from pydantic import TypeAdapter

from bridge.errors import (
    ConfigurationError,
    ConversationLostError,
    PlatformError,
    PlatformTimeoutError,
    StreamLimitError,
    StreamTimeoutError,
    UsageError,
)
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._settings import check_seconds, retry_policy_for
from bridge.platforms._sse import iter_sse_events
from bridge.platforms.base import (
    PlatformBase,
    PlatformDescription,
    PlatformLimits,
    parse_tool_choice,
    results_by_call,
    state_field,
)
from bridge.platforms.coze.client import CozeClient
from bridge.platforms.coze.models import Chat, ChatMessage
from bridge.platforms.coze.stream import ChatReader, failed, finished, pause_of
from bridge.platforms.retry import RetryPolicy
from bridge.types import Event, Other, TextDelta, ToolBatch, ToolChoice, ToolResult

__all__ = ["CN_BASE_URL", "COM_BASE_URL", "CozePlatform"]

logger = logging.getLogger(__name__)

CN_BASE_URL = "https://api.coze.cn"
COM_BASE_URL = "https://api.coze.com"
_REGIONS = {"cn": CN_BASE_URL, "com": COM_BASE_URL}
_WAITING = frozenset({"created", "in_progress"})
_MESSAGES = TypeAdapter(list[ChatMessage])
"""The ``data`` of ``/v3/chat/message/list``."""
_OPENED = Other(raw={"event": "toolbridge.conversation.opened"})
"""What `_read` yields first when its chat opens a conversation, once that is named (`_send`
takes it: it never reaches the caller)."""
_AFTER_DONE = 8
"""Events read (and ignored) after ``done`` before the stream is closed without its end."""
_HANDLE = "local-"
"""How a conversation handle begins (`conversation_handle`); Coze's own ids are decimal."""
_IMAGES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".heic"})


class CozePlatform(PlatformBase):
    """A `Platform` speaking Coze's chat API v3 to one published bot.

    Args:
        token: A personal access token (or OAuth access token); default `COZE_API_TOKEN`.
            Submitting tool outputs needs its ``submitToolChat`` permission.
        bot_id: The bot (published as an API); default `COZE_BOT_ID`.
        base_url: The API root; default `COZE_API_BASE`, else `region`'s, else
            ``https://api.coze.cn``.
        region: ``cn`` (api.coze.cn) or ``com`` (api.coze.com), instead of a `base_url`.
        user_id: Coze's ``user_id`` when a run gives no end user; default `COZE_USER_ID`, else
            ``toolbridge``.
        connect_timeout: Seconds to wait for the TCP connection.
        idle_timeout: Seconds to wait for the next bytes of an answer.
        max_retries: Retries for connect errors, 429 and 5xx before any answer byte was read;
            ignored when `retry_policy` is given.
        retry_policy: Full control over retries and backoff.
        session: A `requests.Session` to reuse (left open by `close`).
        poll_interval: Seconds between two ``retrieve`` polls of a non-streamed chat.
        poll_timeout: Seconds a non-streamed chat may take before it is cancelled.
        sleep: Waits between polls and retries (tests pass a no-op).
        run_timeout: Seconds one answer stream (a query, tool outputs or a reply) may last
            (the bounds of every answer stream: `StreamLimits.from_options`).
        max_answer_chars: Characters of answer text (reasoning included) one answer stream
            may carry.
        max_arguments_chars: Characters of tool-call arguments one answer stream may carry,
            all its calls together.
        max_tool_calls: Tool calls one answer stream may ask for.

    Raises:
        ConfigurationError: the token or bot id is missing, or a setting is malformed.
    """

    name = "coze"
    dialect = "openai"
    """Manifests are only read for their names (Coze takes none per request)."""
    limits = PlatformLimits()
    client: CozeClient

    def __init__(
        self,
        token: str | None = None,
        bot_id: str | None = None,
        base_url: str | None = None,
        *,
        region: str | None = None,
        user_id: str | None = None,
        connect_timeout: float = 10.0,
        idle_timeout: float = 120.0,
        max_retries: int = 3,
        retry_policy: RetryPolicy | None = None,
        session: requests.Session | None = None,
        poll_interval: float = 1.0,
        poll_timeout: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
        run_timeout: float | None = None,
        max_answer_chars: int | None = None,
        max_arguments_chars: int | None = None,
        max_tool_calls: int | None = None,
    ) -> None:
        token = token or os.environ.get("COZE_API_TOKEN") or None
        bot_id = bot_id or os.environ.get("COZE_BOT_ID") or None
        missing = [
            what
            for what, value in (
                ("the token (token=, --token or COZE_API_TOKEN)", token),
                ("the bot id (bot_id=, --bot-id or COZE_BOT_ID)", bot_id),
            )
            if not value
        ]
        if missing:
            raise ConfigurationError(f"Coze is not configured: missing {' and '.join(missing)}")
        assert token is not None and bot_id is not None
        self.bot_id = bot_id.strip()
        self.base_url = _base_url(base_url, region)
        self.user_id = (user_id or os.environ.get("COZE_USER_ID") or "toolbridge").strip()
        check_seconds(
            connect_timeout=connect_timeout,
            idle_timeout=idle_timeout,
            poll_interval=poll_interval,
            poll_timeout=poll_timeout,
        )
        retry_policy = retry_policy_for(max_retries, retry_policy)
        self.poll_interval = float(poll_interval)
        self.poll_timeout = float(poll_timeout)
        self.stream_limits = StreamLimits.from_options(
            run_timeout, max_answer_chars, max_arguments_chars, max_tool_calls
        )
        self._sleep = sleep
        bearer = token.strip()
        if not bearer.lower().startswith("bearer "):
            bearer = f"Bearer {bearer}"
        self.client = CozeClient(
            self.base_url,
            bearer,
            connect_timeout=connect_timeout,
            idle_timeout=idle_timeout,
            retry_policy=retry_policy,
            session=session,
            sleep=sleep,
            limits=self.stream_limits,
        )
        self._http = self.client.http
        self._local: dict[str, frozenset[str]] = {}
        """The local tool names of each conversation's last question."""
        self._chats: dict[str, str] = {}
        """Each conversation's last chat id."""
        self._said: dict[str, set[str]] = {}
        """Ids of the answer messages already given, of each chat paused in non-stream mode."""
        self._file_kinds: dict[str, str] = {}
        """``image`` or ``file`` for each file uploaded here (how a message references it)."""
        self._handles = f"{_HANDLE}{uuid.uuid4().hex}-"
        """The start of this object's handles (unique to it), then a count."""
        self._count = itertools.count(1)
        self._opened: dict[str, str] = {}
        """The conversation each handle's first chat opened (`opened_conversation`)."""

    def __repr__(self) -> str:
        return f"CozePlatform(base_url={self.base_url!r}, bot_id={self.bot_id!r}, token='[secure]')"

    # --- the Platform protocol ---------------------------------------------------------------

    def create_conversation(self, *, end_user_id: str | None = None) -> str:
        """Open a conversation of the bot and return its id."""
        body = self.client.json(
            "POST", "/v1/conversation/create", "conversation", json={"bot_id": self.bot_id}
        )
        conversation_id = body.get("id") if isinstance(body, dict) else None
        if isinstance(conversation_id, int) and not isinstance(conversation_id, bool):
            conversation_id = str(conversation_id)  # ids are decimal strings; tolerate a number
        if not isinstance(conversation_id, str) or not conversation_id:
            raise PlatformError(
                f"Coze conversation: {self.base_url}/v1/conversation/create answered without a "
                "conversation id (expected data.id)"
            )
        return conversation_id

    def conversation_handle(self, *, end_user_id: str | None = None) -> str:
        """A handle for a new conversation, made without a request: the first chat (`start`)
        with it opens the conversation on Coze (``/v3/chat`` without a conversation id),
        whose id `opened_conversation` then gives."""
        return f"{self._handles}{next(self._count)}"

    def opened_conversation(self, handle: str) -> str | None:
        """The Coze conversation the first chat of `handle` opened here, if it did."""
        return self._opened.get(handle)

    def upload_file(self, conversation_id: str, path: str | Path) -> str:
        """Upload a local file (``POST /v1/files/upload``) and return its id for `start`'s
        `file_ids` (Coze keeps files per account; the conversation is not needed).

        Raises:
            UsageError: `path` is not a readable file.
        """
        file = Path(path)
        if not file.is_file():
            raise UsageError(f"cannot attach {str(path)!r}: it is not a file")

        def parts() -> dict[str, tuple[str | None, Any]]:
            return {"file": (file.name, file.open("rb"))}

        data = self.client.json("POST", "/v1/files/upload", "upload", files=parts)
        file_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(file_id, str) or not file_id:
            raise PlatformError(
                f"Coze upload: {self.base_url}/v1/files/upload answered without a file id "
                "(expected data.id)"
            )
        self._file_kinds[file_id] = "image" if file.suffix.lower() in _IMAGES else "file"
        return file_id

    def start(
        self,
        conversation_id: str,
        query: str,
        *,
        tools: Sequence[dict[str, Any]],
        tool_choice: ToolChoice | str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Ask the bot `query` in the conversation; yield the chat's events.

        `tools` only tells which names are loaded locally (the bot's plugins are configured in
        Coze). The request is sent at once; the events are read as they are iterated.

        `file_ids` (from `upload_file`) go with the question as one ``object_string``
        message: the text, then each file (an ``image`` item for an uploaded image).

        Raises:
            UsageError: an empty query, or a tool choice other than ``auto`` (Coze cannot force
                a plugin).
        """
        choice = parse_tool_choice(tool_choice)
        if choice not in (None, "auto"):
            shown = choice.name if isinstance(choice, ToolChoice) else choice
            raise UsageError(
                f"tool_choice {shown!r} cannot be sent: Coze chats take no tool choice (the "
                "bot's configuration decides when to call its plugins); leave tool_choice unset"
            )
        self.check_query(query)
        self._local[conversation_id] = _names(tools)
        return self._chat(
            conversation_id, query, end_user_id=end_user_id, stream=stream, file_ids=file_ids
        )

    def submit(
        self,
        conversation_id: str,
        batch: ToolBatch,
        results: Sequence[ToolResult],
        *,
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send every output of the batch in one ``submit_tool_outputs``; yield what follows.

        Raises:
            UsageError: the results do not answer each call of the batch exactly once.
        """
        by_id = results_by_call(batch, results)
        local = self._local.get(conversation_id)
        outputs = []
        for call in batch.calls:
            result = by_id[call.call_id]
            output = result.output
            if local is not None and call.name not in local and result.is_error:
                output = _unknown_output(call.name, local)
            outputs.append({"tool_call_id": call.call_id, "output": output})
        chat_id = str(batch.resume.get("chat_id") or batch.batch_id)
        params = {"conversation_id": conversation_id, "chat_id": chat_id}
        body = {"tool_outputs": outputs, "stream": stream}
        return self._send(
            "/v3/chat/submit_tool_outputs", "submit", params, body, stream, chat_id=chat_id
        )

    def resume(
        self,
        conversation_id: str,
        interrupt_id: str,
        answer: str,
        *,
        tools: Sequence[dict[str, Any]] = (),
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Answer a chatflow question (``reply_message``): the reply goes as a new user message."""
        if not answer:
            raise UsageError("resume: answer is empty; the bot's question expects a reply")
        if tools:
            self._local[conversation_id] = _names(tools)
        return self._chat(conversation_id, answer, end_user_id=end_user_id, stream=stream)

    def check(self) -> str:
        """Prove the token, the bot and reachability with one ``GET /v1/bot/get_online_info``."""
        bot = self._bot()
        apis = _plugin_apis(bot)
        return (
            f"Coze at {self.base_url} accepted the token and serves bot {self.bot_id} "
            f"({bot.get('name') or 'unnamed'}, {len(apis)} plugin API(s))"
        )

    def describe(self) -> PlatformDescription:
        """The server and bot this adapter talks to."""
        return PlatformDescription(base_url=self.base_url, app_id=self.bot_id)

    def remote_tool_names(self) -> list[str] | None:
        """The plugin APIs the bot has configured (cloud plugins' ones included: the API does
        not say which are local), for comparison with the local tools."""
        return _plugin_apis(self._bot())

    def export_state(self, conversation_id: str) -> dict[str, Any] | None:
        """The conversation's last chat id and local tool names (the conversation lives on
        Coze; batches carry their own chat id, so this is only what a restart would miss)."""
        chat_id = self._chats.get(conversation_id)
        local = self._local.get(conversation_id)
        if chat_id is None and local is None:
            return None
        return {"chat_id": chat_id, "local_tools": sorted(local) if local is not None else None}

    def import_state(self, conversation_id: str, state: Mapping[str, Any]) -> None:
        """Take over a conversation's state exported by `export_state` in another process."""
        chat_id = state_field(state, "chat_id", str, platform=self.name, default=None)
        local = state_field(state, "local_tools", list, platform=self.name, default=None)
        if chat_id is not None:
            self._chats[conversation_id] = chat_id
        if local is not None:
            if not all(isinstance(n, str) for n in local):
                raise UsageError(
                    "the coze platform's saved state has 'local_tools' with a non-string "
                    "item; expected a list of tool names"
                )
            self._local[conversation_id] = frozenset(local)

    # --- chats -------------------------------------------------------------------------------

    def _chat(
        self,
        conversation_id: str,
        text: str,
        *,
        end_user_id: str | None,
        stream: bool,
        file_ids: Sequence[str] | None = None,
    ) -> Iterator[Event]:
        message = {"role": "user", "type": "question", "content": text, "content_type": "text"}
        if file_ids:
            items: list[dict[str, str]] = [{"type": "text", "text": text}]
            items += [{"type": self._file_kinds.get(f, "file"), "file_id": f} for f in file_ids]
            message["content"] = jsonlib.dumps(items, ensure_ascii=False)
            message["content_type"] = "object_string"
        body = {
            "bot_id": self.bot_id,
            "user_id": end_user_id or self.user_id,
            "stream": stream,
            # Without it the platform refuses the chat's tool outputs (code 5000).
            "auto_save_history": True,
            "additional_messages": [message],
        }
        if not conversation_id.startswith(_HANDLE):
            return self._send(
                "/v3/chat", "chat", {"conversation_id": conversation_id}, body, stream
            )
        opened = self._opened.get(conversation_id)
        if opened is not None:  # the handle's conversation is open: continue it
            return self._send("/v3/chat", "chat", {"conversation_id": opened}, body, stream)
        if not conversation_id.startswith(self._handles):
            # Another process's handle, which no journal here maps to its Coze conversation
            # (an in-memory journal, or a crash before the mapping was written).
            raise ConversationLostError(
                f"conversation {conversation_id} was named by another process and its Coze "
                "conversation is unknown here: continue it on the journal that process "
                "wrote, or by its Coze conversation id (Conversation.platform_conversation_id)"
            )
        # No conversation id: the chat opens a conversation, named in its first event.
        return self._send("/v3/chat", "chat", {}, body, stream, opening=conversation_id)

    def _send(
        self,
        path: str,
        operation: str,
        params: dict[str, str],
        body: dict[str, Any],
        stream: bool,
        *,
        chat_id: str | None = None,
        opening: str | None = None,
    ) -> Iterator[Event]:
        """POST now, so that a refusal (a busy conversation, outputs no longer expected, a bad
        token) is raised at the call, before the caller records the request as accepted; the
        returned iterator reads the answer.

        `opening`: the handle of a conversation this chat opens (`params` has no conversation
        id); the answer is read up to the event that names the conversation before this
        returns, so that `opened_conversation` knows it."""
        url = self.base_url + path
        # The run's total time counts from the request.
        budget = self.stream_limits.budget(f"Coze {operation}: the stream from {url}", received=[])
        # The query in the URL: a request without `params` takes the transport's direct path.
        response = self._http.request(
            "POST",
            f"{url}?{urlencode(params)}" if params else url,
            json=body,
            headers={"Accept": "text/event-stream" if stream else "application/json"},
            stream=True,
            operation=operation,
            budget=budget,
        )
        logid = self._http.request_id(response)
        budget.request_id = logid
        conversation_id = params["conversation_id"] if opening is None else opening
        if not stream or "event-stream" not in response.headers.get("content-type", ""):
            # Also where a refused stream request lands: Coze answers it with a JSON error.
            try:
                data = self.client.envelope(response, url, operation, logid, budget)
            finally:
                budget.close()
            chat = self.client.shaped(Chat.model_validate, data, path, operation, logid)
            if opening is not None and chat.conversation_id:
                conversation_id = self._open(opening, chat.conversation_id)
            self._chats[conversation_id] = chat.id
            return self._polled(chat, logid)
        events = self._read(
            response, url, operation, conversation_id, chat_id, logid, budget, opening
        )
        if opening is not None:
            named = next(events)  # reads up to the chat's first event (errors raise here)
            assert named is _OPENED
        return events

    def _open(self, handle: str, conversation_id: str) -> str:
        """Note the conversation that the first chat of `handle` opened; what was kept under
        the handle is kept under the conversation's id from now on."""
        self._opened[handle] = conversation_id
        local = self._local.pop(handle, None)
        if local is not None:
            self._local[conversation_id] = local
        return conversation_id

    def _read(
        self,
        response: requests.Response,
        url: str,
        operation: str,
        conversation_id: str,
        chat_id: str | None,
        logid: str | None,
        budget: RunBudget,
        opening: str | None = None,
    ) -> Iterator[Event]:
        """Read a chat's stream. `opening`: see `_send`; `_OPENED` is yielded first, once the
        conversation is named (or the stream ended without naming it)."""
        received: list[Event] = budget.received
        reader = ChatReader(logid, budget)
        early: list[Event] | None = None if opening is None else []
        """Events read before the opened conversation was named (yielded after `_OPENED`)."""
        try:
            with self._http.errors(
                url, operation=operation, streaming=True, received=received, request_id=logid
            ):
                chunks = budget.chunks(response)
                after_done = 0
                for name, data in iter_sse_events(chunks):
                    if reader.done:
                        # Read on to the end of the body, as cozepy does (Coze ends it after
                        # `done`), so that the connection is reused; what comes is ignored.
                        after_done += 1
                        if after_done > _AFTER_DONE:
                            break
                        continue
                    for event in reader.feed(name, data):
                        received.append(event)
                        if early is None:
                            yield event
                        else:
                            early.append(event)
                    if reader.chat is not None:
                        if early is not None and opening is not None:
                            if reader.chat.conversation_id:
                                conversation_id = self._open(opening, reader.chat.conversation_id)
                            yield _OPENED
                            yield from early
                            early = None
                        self._chats[conversation_id] = reader.chat.id
                if early is not None:  # the stream ended before naming a conversation
                    yield _OPENED
                    yield from early
                    early = None
        except (GeneratorExit, KeyboardInterrupt, StreamLimitError, StreamTimeoutError):
            # Abandoned (or stopped at a bound, or gone quiet): a chat left running would
            # refuse the conversation's next question.
            if reader.outcome is None:
                self._cancel(conversation_id, reader.chat.id if reader.chat else chat_id)
            raise
        finally:
            response.close()
            budget.close()
        self._check_local(conversation_id, reader.outcome)
        if reader.outcome is not None:
            yield reader.outcome
            return
        known = reader.chat.id if reader.chat is not None else chat_id
        if known is None:
            raise PlatformError(
                f"Coze {operation}: the stream from {url} ended before any chat event "
                "(nothing to poll); expected conversation.chat.created first",
                request_id=logid,
            )
        # A stream that ends with `done` (or EOF) but no verdict: the chat goes on server-side.
        logger.info("Coze %s: stream ended without a verdict; polling chat %s", operation, known)
        unfinished = Chat(id=known, conversation_id=conversation_id)
        yield from self._polled(unfinished, logid, reader.said)

    def _polled(
        self, chat: Chat, logid: str | None, said_before: Iterable[str] = ()
    ) -> Iterator[Event]:
        """Poll a chat until it pauses or ends; yield its new answer text and verdict.

        `said_before`: ids of answer messages whose text the caller already yielded.
        """
        params = {"conversation_id": chat.conversation_id, "chat_id": chat.id}
        deadline = time.monotonic() + self.poll_timeout
        try:
            while chat.status in _WAITING or not chat.status:
                if time.monotonic() > deadline:
                    self._cancel(chat.conversation_id, chat.id)
                    raise PlatformTimeoutError(
                        f"Coze chat {chat.id} was still {chat.status or 'running'} after "
                        f"{self.poll_timeout:g} s (poll_timeout); it was cancelled",
                        request_id=logid,
                    )
                if chat.status:
                    self._sleep(self.poll_interval)
                data = self.client.json("POST", "/v3/chat/retrieve", "retrieve", params=params)
                chat = self.client.shaped(
                    Chat.model_validate, data, "/v3/chat/retrieve", "retrieve", logid
                )
        except KeyboardInterrupt:
            self._cancel(chat.conversation_id, chat.id)
            raise
        if chat.status == "failed" or chat.status == "canceled":
            self._said.pop(chat.id, None)
            yield failed(chat, logid)
            return
        listed = self.client.json("GET", "/v3/chat/message/list", "message list", params=params)
        messages = self.client.shaped(
            _MESSAGES.validate_python, listed or [], "/v3/chat/message/list", "message list", logid
        )
        # The list holds the whole chat: text already given (streamed, or polled before a
        # tool round) is not given again; a message without an id always counts as new.
        said = self._said.pop(chat.id, set()) | set(said_before)
        new = [m for m in messages if m.type == "answer" and m.content and m.id not in said]
        answer = "".join(m.content for m in new)
        if answer:
            yield TextDelta(text=answer)
        if chat.status == "requires_action":
            self._said[chat.id] = said | {m.id for m in new if m.id}
            pause = pause_of(chat, logid, answer)
            self._check_local(chat.conversation_id, pause)
            yield pause
            return
        if chat.status != "completed":
            raise PlatformError(
                f"Coze chat {chat.id} has status {chat.status!r}; expected completed, failed, "
                "canceled or requires_action",
                request_id=logid,
            )
        yield finished(chat, answer, logid)

    def _cancel(self, conversation_id: str, chat_id: str | None) -> None:
        """Cancel a chat whose stream was abandoned; best effort (it may have ended)."""
        if chat_id is None:
            return
        try:
            self.client.json(
                "POST",
                "/v3/chat/cancel",
                "cancel",
                json={"conversation_id": conversation_id, "chat_id": chat_id},
            )
            logger.info("Coze: cancelled chat %s of conversation %s", chat_id, conversation_id)
        except PlatformError as exc:
            logger.info("Coze: could not cancel chat %s: %s", chat_id, exc)

    def _check_local(self, conversation_id: str, outcome: object) -> None:
        local = self._local.get(conversation_id)
        batch = getattr(outcome, "batch", None)
        if local is None or not isinstance(batch, ToolBatch):
            return
        for call in batch.calls:
            if call.name not in local:
                logger.warning(
                    "Coze bot %s asks for tool %r, which its plugin has but no local tool is "
                    "called; loaded: %s",
                    self.bot_id,
                    call.name,
                    ", ".join(sorted(local)) or "none",
                )

    def _bot(self) -> dict[str, Any]:
        bot = self.client.json(
            "GET", "/v1/bot/get_online_info", "bot info", params={"bot_id": self.bot_id}
        )
        if not isinstance(bot, dict):
            raise PlatformError(
                f"Coze bot info: {self.base_url}/v1/bot/get_online_info answered without a bot "
                "object (expected data with plugin_info_list)"
            )
        return bot


# --- helpers ---------------------------------------------------------------------------------


def _base_url(base_url: str | None, region: str | None) -> str:
    if region is not None and region not in _REGIONS:
        raise ConfigurationError(
            f"region {region!r} is not a Coze region; expected cn (api.coze.cn) or com "
            "(api.coze.com)"
        )
    if base_url and region and base_url.rstrip("/") != _REGIONS[region]:
        raise ConfigurationError(
            f"base_url {base_url!r} and region {region!r} disagree; give one of them"
        )
    url = base_url or (_REGIONS[region] if region else None)
    url = (url or os.environ.get("COZE_API_BASE") or CN_BASE_URL).strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or any(ch.isspace() for ch in url):
        raise ConfigurationError(
            f"base URL {url!r} is not an http(s) URL; expected e.g. {CN_BASE_URL} or {COM_BASE_URL}"
        )
    for suffix in ("/v3/chat", "/v3", "/v1"):
        if url.endswith(suffix):
            raise ConfigurationError(
                f"base URL {url!r} should stop before {suffix}; expected e.g. {url[: -len(suffix)]}"
            )
    return url


def _names(tools: Sequence[Any]) -> frozenset[str]:
    names = set()
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return frozenset(names)


def _plugin_apis(bot: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for plugin in bot.get("plugin_info_list") or []:
        if isinstance(plugin, Mapping):
            for api in plugin.get("api_info_list") or []:
                if isinstance(api, Mapping) and isinstance(api.get("name"), str):
                    names.append(api["name"])
    return names


def _unknown_output(name: str, local: frozenset[str]) -> str:
    loaded = ", ".join(sorted(local)) or "none"
    return (
        f"The bot's plugin has a tool {name!r}, but no local tool of that name is loaded in "
        f"toolbridge, so it was not run. Loaded tools: {loaded}. Answer without it, or ask the "
        "operator to load it or remove it from the bot's local plugin."
    )
