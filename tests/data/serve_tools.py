"""Python tools for the `toolbridge mcp-serve` tests."""

from __future__ import annotations

from bridge.tools import manifest


@manifest
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first one.
        b: The second one.
    """
    return a + b


@manifest
def boom(reason: str = "because") -> str:
    """Always raises."""
    raise RuntimeError(f"boom {reason}")
