"""Fault injection for crash tests: hold the process right after a journal step.

``TOOLBRIDGE_FAILPOINT=STEP:MARKER[,STEP:MARKER...]``: the first time the journal durably
writes STEP (see `STEPS`: "received", "started", "finished", "submitting" (before the outputs
are posted), "submitted" (once the platform accepted them), ...), the writing thread creates
the file MARKER and then blocks forever, so a test can `kill -9` the daemon at exactly that
point. Each point fires once; other threads go on. Unset (the normal case) it costs nothing;
set, the daemon logs a warning at start.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from bridge.errors import UsageError

__all__ = ["ENV_VAR", "STEPS", "failpoint_from_env"]

logger = logging.getLogger(__name__)

ENV_VAR = "TOOLBRIDGE_FAILPOINT"
STEPS = (
    "conversation",
    "message",
    "received",
    "started",
    "finished",
    "submitting",
    "submitted",
    "message_end",
    "platform_conversation",
    "platform_state",
)


def failpoint_from_env(
    env: Mapping[str, str] | None = None, *, release: threading.Event | None = None
) -> Callable[[str], None] | None:
    """The journal `on_write` hook the environment asks for, or None.

    Args:
        env: default `os.environ`.
        release: lets a held thread go on once set (a test that runs the daemon in its own
            process and ends it); default: held until the process is killed.

    Raises:
        UsageError: the variable is set but malformed.
    """
    value = (os.environ if env is None else env).get(ENV_VAR, "")
    if not value:
        return None
    points: dict[str, Path] = {}
    for item in value.split(","):
        step, _, marker = item.strip().partition(":")
        if step not in STEPS or not marker:
            raise UsageError(
                f"{ENV_VAR}={value!r}: expected STEP:MARKER_FILE[,...] with STEP one of "
                f"{', '.join(STEPS)}"
            )
        points[step] = Path(marker)
    logger.warning("failpoints active: the daemon hangs after journal steps %s", sorted(points))
    lock = threading.Lock()

    def hold(name: str) -> None:
        with lock:
            marker = points.pop(name, None)
        if marker is None:
            return
        marker.write_text(f"{name} {os.getpid()}\n", encoding="utf-8")
        (release or threading.Event()).wait()  # until the test kills the process

    return hold
