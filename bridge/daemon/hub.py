"""The daemon-wide event hub: live events of every conversation, for the console.

A placeholder of the approvals work: `publish` accepts events and keeps nothing yet. The
console's event stream (one SSE stream per open page, resumable with ``Last-Event-ID``)
extends this class.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EventHub"]


class EventHub:
    """Where the daemon publishes what happens (runs, tool calls, approvals)."""

    def publish(self, name: str, data: dict[str, Any]) -> None:
        """Publish one event (thread-safe; callable from worker threads)."""
        del name, data  # nobody listens yet
