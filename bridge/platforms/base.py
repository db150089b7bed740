"""The seam between the loop and a platform adapter.

A platform turns one of its conversations into a sequence of neutral events (`bridge.types`).
Adding a platform means adding one module under `bridge/platforms/` that satisfies `Platform`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from bridge.types import Event, ToolBatch, ToolResult

__all__ = ["Platform"]


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
