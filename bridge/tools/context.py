"""ToolContext: what a tool may know about the call it serves (PLACEHOLDER, being written)."""

from __future__ import annotations

__all__ = ["ToolContext"]


class ToolContext:
    """Injected into a parameter annotated `ToolContext`; never part of the schema."""
