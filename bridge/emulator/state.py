"""What the emulator remembers: conversations, their pending tool calls or question, requests.

One `EmulatorState` per app. The server mutates it from its event loop thread; tests read it
from theirs, so every access takes the lock and readers get frozen snapshots.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from bridge.emulator.faults import FaultBook
from bridge.emulator.planner import CompletedAsk, CompletedCall, RunContext

__all__ = [
    "LOST",
    "ActiveRun",
    "Conversation",
    "ConversationSnapshot",
    "EmulatorState",
    "FileRecord",
    "MessageRecord",
    "PendingCall",
    "PendingInput",
    "RecordedRequest",
]

LOST = (
    "this emulator does not know it (it was never created here, or the emulator restarted and "
    "lost its state: an emulator keeps conversations in memory unless it is given a state "
    "file, as `toolbridge serve --emulator` does beside a file journal)"
)
"""Why an emulator answers "not found" for a conversation: said in its 404s."""


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the emulator received it (the Authorization value is masked)."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case, as HTTP/1.1 servers see them."""
    json: Any
    """The parsed JSON body, or None (multipart uploads, bodies that are not JSON)."""
    form: dict[str, Any] | None
    """Multipart fields of an upload; a file appears as {filename, size, sha256}."""
    status: int | None
    request_id: str
    dropped: bool = False
    """True when the emulator closed the connection mid-response (fault injection)."""


@dataclass(frozen=True)
class PendingCall:
    """A tool call the client has been asked to run and has not answered yet."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    output_name: str


@dataclass(frozen=True)
class PendingInput:
    """A question (an ``ask`` step) waiting for the person's reply: a chatflow interrupt."""

    interrupt_id: str
    """The ``interrupt_event_id`` the client must send back in ``action`` to resume."""
    question: str
    name: str | None
    """The ask step's ``as``: how templates name the reply."""


@dataclass(frozen=True)
class FileRecord:
    """An uploaded file (the content is not kept, only its size and digest)."""

    file_id: str
    filename: str | None
    url: str | None
    size: int
    sha256: str | None


@dataclass(frozen=True)
class MessageRecord:
    """A finished run (or one paused on a question): query, answer, tool calls made.

    `status` is ``success``, ``error``, or ``human_input`` for a run that ended by asking the
    person a question (then `answer` is the question).
    """

    message_id: str
    query: str
    answer: str
    status: str
    tool_calls: tuple[CompletedCall, ...]


@dataclass
class ActiveRun:
    """A run between its query and its final answer.

    A question (``ask`` step) splits it into messages: the paused one is recorded, and the
    resume continues the same `context` under a new `message_id`.
    """

    message_id: str
    context: RunContext
    pending: list[PendingCall] = field(default_factory=list)
    pending_input: PendingInput | None = None
    query: str | None = None
    """The query of the current message when it is a reply (None: `context.query`)."""
    first_round: int = 0
    """Index in `context.rounds` of the first tool round of the current message."""

    def take_answer(self, answer: str, message_id: str) -> None:
        """Record the person's reply to the pending question; the run goes on as a new
        message (`message_id`) whose query is the reply."""
        question = self.pending_input
        assert question is not None
        self.context.answers.append(
            CompletedAsk(question.interrupt_id, question.name, question.question, answer)
        )
        self.pending_input = None
        self.message_id = message_id
        self.query = answer
        self.first_round = len(self.context.rounds)


@dataclass
class Conversation:
    """Server-side state of one conversation."""

    conversation_id: str
    app_id: str
    created_at: datetime
    files: dict[str, FileRecord] = field(default_factory=dict)
    messages: list[MessageRecord] = field(default_factory=list)
    active: ActiveRun | None = None
    feedback: list[dict[str, Any]] = field(default_factory=list)
    event_counter: int = 0
    accepted_outputs: dict[str, int] = field(default_factory=dict)
    """How many times the output of each tool call id was accepted (crash tests check 1)."""

    def next_event_id(self) -> str:
        """A fresh `event_id` (increasing within the conversation)."""
        self.event_counter += 1
        return str(self.event_counter)


@dataclass(frozen=True)
class ConversationSnapshot:
    """A frozen copy of a conversation for tests and tools to inspect."""

    conversation_id: str
    app_id: str
    pending_calls: tuple[PendingCall, ...]
    messages: tuple[MessageRecord, ...]
    files: tuple[FileRecord, ...]
    feedback: tuple[dict[str, Any], ...]
    pending_input: PendingInput | None = None
    """The question waiting for the person's reply, if any."""
    accepted_outputs: dict[str, int] = field(default_factory=dict)
    """How many times each tool call's output was accepted (never more than once)."""

    @property
    def pending_call_ids(self) -> tuple[str, ...]:
        """Ids of the tool calls waiting for outputs (empty when none)."""
        return tuple(call.call_id for call in self.pending_calls)

    @property
    def pending_interrupt_id(self) -> str | None:
        """The ``interrupt_event_id`` a resume must carry (None when no question waits)."""
        return self.pending_input.interrupt_id if self.pending_input else None


class EmulatorState:
    """Conversations, the request log and fault counters of one emulator.

    `on_change`, when set, is called before each answer leaves the server (after the request
    changed whatever it changes): how a state file keeps up (`bridge.emulator.saving`).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.faults = FaultBook()
        self._conversations: dict[str, Conversation] = {}
        self._requests: list[RecordedRequest] = []
        self.on_change: Callable[[], None] | None = None

    def changed(self) -> None:
        """A request may have changed the state: tell `on_change`."""
        if self.on_change is not None:
            self.on_change()

    def conversations_by_id(self) -> dict[str, Conversation]:
        """The live conversations by id (callers hold `lock`)."""
        with self.lock:
            return self._conversations

    def restore_conversations(self, conversations: dict[str, Conversation]) -> None:
        """Replace every conversation (a state file read back at start)."""
        with self.lock:
            self._conversations = dict(conversations)

    def create_conversation(self, app_id: str) -> Conversation:
        """Open a conversation with a fresh id."""
        with self.lock:
            conv = Conversation(
                conversation_id=str(uuid.uuid4()),
                app_id=app_id,
                created_at=datetime.now(timezone.utc),
            )
            self._conversations[conv.conversation_id] = conv
            return conv

    def conversation(self, conversation_id: str) -> Conversation | None:
        """The live conversation (callers hold `lock` while they change it)."""
        with self.lock:
            return self._conversations.get(conversation_id)

    def snapshot(self, conversation_id: str) -> ConversationSnapshot:
        """A frozen copy of one conversation.

        Raises:
            KeyError: no conversation has this id.
        """
        with self.lock:
            conv = self._conversations.get(conversation_id)
            if conv is None:
                raise KeyError(f"no conversation {conversation_id!r} in this emulator")
            return ConversationSnapshot(
                conversation_id=conv.conversation_id,
                app_id=conv.app_id,
                pending_calls=tuple(conv.active.pending) if conv.active else (),
                messages=tuple(conv.messages),
                files=tuple(conv.files.values()),
                feedback=tuple(dict(f) for f in conv.feedback),
                pending_input=conv.active.pending_input if conv.active else None,
                accepted_outputs=dict(conv.accepted_outputs),
            )

    def conversation_ids(self) -> list[str]:
        """Ids of every conversation, oldest first."""
        with self.lock:
            return list(self._conversations)

    def record(self, request: RecordedRequest) -> None:
        """Append one request to the log."""
        with self.lock:
            self._requests.append(request)

    def requests(self) -> list[RecordedRequest]:
        """A copy of the request log, oldest first."""
        with self.lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        """Empty the request log and the fault counters."""
        with self.lock:
            self._requests.clear()
            self.faults.reset()
