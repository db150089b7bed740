"""What the emulator's protocols share when they render a step: the token estimate of their
usage counts. Each protocol's own rendering is in its package (for example
`bridge.emulator.appbuilder.render`).
"""

from __future__ import annotations

import math

__all__ = ["estimate_tokens"]


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: one per CJK character, one per four other characters."""
    cjk = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff")
    return cjk + math.ceil((len(text) - cjk) / 4)
