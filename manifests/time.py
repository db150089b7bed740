"""Ready-made tools: the current time anywhere, and time zone conversion (IANA names).

    toolbridge run "what time is it in Tokyo?" --tools manifests/time.py

Tools: `current_time`, `convert_time`, `find_timezones`. Unknown zones and malformed times are
refused with a message that says what was expected (and suggests close zone names). Uses the
standard library's `zoneinfo`; where the system has no time zone database (Windows, slim
containers), `pip install tzdata`.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from bridge.tools import manifest

__all__ = ["convert_time", "current_time", "find_timezones"]

_TIME = re.compile(r"(\d{1,2}):(\d{2})")


@lru_cache(maxsize=1)
def _zones() -> frozenset[str]:
    zones = frozenset(available_timezones())
    if not zones:
        raise RuntimeError("no time zone database on this machine: pip install tzdata")
    return zones


def _zone(name: str, argument: str) -> ZoneInfo:
    if name in _zones():
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    close = difflib.get_close_matches(name, sorted(_zones()), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise ValueError(
        f"{argument}: unknown time zone {name!r}; expected an IANA name such as Europe/Paris, "
        f"Asia/Shanghai or UTC{hint}"
    )


def _describe(moment: datetime) -> dict[str, Any]:
    offset = moment.utcoffset() or timedelta(0)
    dst = moment.dst()
    return {
        "timezone": str(moment.tzinfo),
        "datetime": moment.isoformat(timespec="seconds"),
        "weekday": moment.strftime("%A"),
        "utc_offset": _offset(offset),
        "is_dst": bool(dst),
    }


def _offset(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{rest:02d}"


@manifest
def current_time(timezone: str = "UTC") -> dict[str, Any]:
    """The current date and time in a time zone.

    Args:
        timezone: IANA time zone name, such as Europe/Paris, America/New_York or UTC.
    """
    return _describe(datetime.now(_zone(timezone, "timezone")))


@manifest
def convert_time(
    time: str, source_timezone: str, target_timezone: str, date: str | None = None
) -> dict[str, Any]:
    """Convert a wall-clock time from one time zone to another.

    Args:
        time: The time in the source zone, 24-hour HH:MM (e.g. 09:30 or 18:05).
        source_timezone: IANA name of the zone the time is given in.
        target_timezone: IANA name of the zone to convert to.
        date: The day, YYYY-MM-DD (default: today in the source zone); it matters around
            daylight saving changes.
    """
    source = _zone(source_timezone, "source_timezone")
    target = _zone(target_timezone, "target_timezone")
    match = _TIME.fullmatch(time.strip())
    if not match or int(match.group(1)) > 23 or int(match.group(2)) > 59:
        raise ValueError(f"time: expected 24-hour HH:MM such as 09:30 or 18:05 (got {time!r})")
    if date is None:
        day = datetime.now(source).date()
    else:
        try:
            day = dt.date.fromisoformat(date.strip())
        except ValueError:
            raise ValueError(
                f"date: expected YYYY-MM-DD such as 2025-03-30 (got {date!r})"
            ) from None
    start = datetime(
        day.year, day.month, day.day, int(match.group(1)), int(match.group(2)), tzinfo=source
    )
    moved = start.astimezone(target)
    difference = (moved.utcoffset() or timedelta(0)) - (start.utcoffset() or timedelta(0))
    return {
        "source": _describe(start),
        "target": _describe(moved),
        "time_difference": _offset(difference),
    }


@manifest
def find_timezones(query: str, limit: int = 20) -> list[str]:
    """IANA time zone names that contain `query` (case-insensitive), e.g. "tokyo" or "america/".

    Args:
        query: Part of a zone name; a city name works for most zones.
        limit: Most names to return (1-100).
    """
    if not query.strip():
        raise ValueError("query: expected part of a zone name, such as 'paris' or 'america/'")
    if not 1 <= limit <= 100:
        raise ValueError(f"limit: expected 1 to 100 (got {limit})")
    wanted = query.strip().casefold().replace(" ", "_")
    return sorted(zone for zone in _zones() if wanted in zone.casefold())[:limit]
