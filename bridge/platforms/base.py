"""The seam between the loop and a platform adapter.

A platform turns one of its conversations into a sequence of neutral events (`bridge.types`).
Adding a platform means adding one module under `bridge/platforms/` that satisfies `Platform`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from bridge.types import Event, ToolBatch, ToolResult

__all__ = [
    "NO_LIMITS",
    "LimitViolation",
    "Platform",
    "PlatformLimits",
    "knows_conversation",
    "limits_of",
]


@dataclass(frozen=True)
class LimitViolation:
    """An input the platform would refuse: which field, the limit, the actual length."""

    field: str
    limit: str
    """The rule, e.g. "at most 2000 characters"."""
    actual: int
    """The input's length in characters."""


@dataclass(frozen=True)
class PlatformLimits:
    """Inputs a platform refuses, declared so that a caller can refuse them first and clearly.

    Lengths are in characters (code points). None means no limit.
    """

    max_query_chars: int | None = None
    end_user_id_min_chars: int | None = None
    end_user_id_max_chars: int | None = None

    def check(
        self, *, query: str | None = None, end_user_id: str | None = None
    ) -> list[LimitViolation]:
        """Every limit the given inputs break (empty when they are acceptable)."""
        found = []
        high_query = self.max_query_chars
        if query is not None and high_query is not None and len(query) > high_query:
            found.append(_violation("query", len(query), None, high_query))
        if end_user_id is not None:
            low, high = self.end_user_id_min_chars, self.end_user_id_max_chars
            size = len(end_user_id)
            if (low is not None and size < low) or (high is not None and size > high):
                found.append(_violation("end_user_id", size, low, high))
        return found


def _violation(name: str, actual: int, low: int | None, high: int | None) -> LimitViolation:
    if low is not None and high is not None:
        limit = f"{low} to {high} characters"
    elif high is not None:
        limit = f"at most {high} characters"
    else:
        limit = f"at least {low} characters"
    return LimitViolation(name, limit, actual)


NO_LIMITS = PlatformLimits()


def limits_of(platform: object) -> PlatformLimits:
    """The platform's `limits` attribute, or `NO_LIMITS` for an adapter that declares none."""
    limits = getattr(platform, "limits", None)
    return limits if isinstance(limits, PlatformLimits) else NO_LIMITS


def knows_conversation(platform: object, conversation_id: str) -> bool:
    """Whether the platform can still continue `conversation_id`.

    A platform that keeps its conversations' state in this process (the OpenAI-compatible one
    keeps chat histories in memory) says so with a `knows(conversation_id)` method; after a
    restart the answer is False, and recovery must not run tools whose outputs could never be
    delivered. A platform without the method keeps its state server-side: True. (Not part of
    the `Platform` protocol, which is runtime-checkable: adapters without it stay platforms.)
    """
    knows = getattr(platform, "knows", None)
    return True if knows is None else bool(knows(conversation_id))


@runtime_checkable
class Platform(Protocol):
    """What the conversation loop needs from an agent platform.

    Every method that talks to the platform yields neutral events and ends after a terminal
    event (`RunFinished`, `RunFailed`) or a pause (`ToolCallsRequested`, `HumanInputRequested`).
    Request ids are reported on the events that carry them: `RunFinished.request_id`,
    `RunFailed.request_id` and `ToolBatch.resume["request_id"]`.
    Errors are raised as `bridge.errors.PlatformError` subclasses, never transport exceptions.
    """

    name: str
    """Short platform name, e.g. "appbuilder"."""

    dialect: str
    """The manifest dialect this platform expects (see `bridge.tools.schema`)."""

    # An adapter may also declare `limits: PlatformLimits` (read with `limits_of`); it is not a
    # protocol member so that adapters written before it still satisfy `Platform`.

    def create_conversation(self, *, end_user_id: str | None = None) -> str:
        """Open a new conversation and return its id."""
        ...

    def upload_file(self, conversation_id: str, path: str | Path) -> str:
        """Attach a local file to the conversation and return the platform's file id."""
        ...

    def start(
        self,
        conversation_id: str,
        query: str,
        *,
        tools: Sequence[dict[str, Any]],
        tool_choice: str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send a user query with the tool manifests; yield the run's events."""
        ...

    def submit(
        self,
        conversation_id: str,
        batch: ToolBatch,
        results: Sequence[ToolResult],
        *,
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send every output of a batch in one request; yield the continued run's events."""
        ...

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
        """Answer a human-input interrupt (`HumanInputRequested`); yield the run's events."""
        ...

    def check(self) -> str:
        """One cheap request that proves configuration, credentials and reachability.

        Returns a one-sentence description of what was verified; raises `PlatformError`
        (or `ConfigurationError`) saying what is wrong.
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...
