"""What the door's and tracing's benchmarks share: the two-turn weather conversation they
measure (one tool call, the city in the question so each call's arguments can differ) and the
per-part CPU accounting. No `sys.path` changes and no import of `bridge` at module level: a
worker imports the `bridge` its `PYTHONPATH` names (`bench_tracing` runs an older tree's).
Not a benchmark itself (`run_all` runs ``bench_*.py`` only)."""

from __future__ import annotations

import functools
import time
from typing import Any

__all__ = ["EXPECTED", "QUERY", "SCENARIO", "thread_timed", "weather_tool"]

SCENARIO = {
    "settings": {"chunk_chars": 8},
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "The weather in {city} is {outputs.get_weather}.",
        }
    ],
}
QUERY = "What is the weather in {city}?"
EXPECTED = "The weather in {city} is sunny, 21 C."


def weather_tool() -> Any:
    """The conversation's tool, made with the `bridge` the worker imported."""
    from bridge import manifest

    @manifest(description="Current weather of a city")
    def get_weather(city: str) -> str:
        """Weather.

        Args:
            city: City name
        """
        return "sunny, 21 C"

    return get_weather


def thread_timed(spent: dict[str, float], owner: Any, name: str, part: str) -> None:
    """Wrap `owner.name` so the thread CPU of each call, whichever thread makes it, adds to
    `spent[part]`."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[part] += time.thread_time() - start

    setattr(owner, name, wrapper)
