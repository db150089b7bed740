"""Daemon logging: request ids on every record, secrets masked, text or JSON lines.

The daemon's request id (``X-Request-Id``) lives in a context variable set by the middleware
and copied into the worker thread that runs the conversation, so every record of a request,
platform adapter logs included, carries it. Records about a run add ``conversation_id`` and
``platform_request_id`` (the agent platform's id) with ``extra=``, which correlates the two.
JSON lines also carry the ``trace_id`` and ``span_id`` of the span current where the record
was made (`bridge.tracing`), when there is one: a log line leads to its trace.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

from bridge.errors import redact, valid_text
from bridge.tracing import current_ids

__all__ = [
    "JsonFormatter",
    "RedactingFilter",
    "RequestIdFilter",
    "configure_logging",
    "request_id_var",
]

request_id_var: ContextVar[str | None] = ContextVar("toolbridge_request_id", default=None)

_CONTEXT_FIELDS = ("request_id", "conversation_id", "platform_request_id", "message_id")
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"


class RequestIdFilter(logging.Filter):
    """Adds `request_id` (from the context) and the other correlation fields to a record,
    and `replica` (the daemon's replica id) when one is given."""

    def __init__(self, replica: str | None = None) -> None:
        super().__init__()
        self.replica = replica

    def filter(self, record: logging.LogRecord) -> bool:
        if self.replica is not None and getattr(record, "replica", None) is None:
            record.replica = self.replica
        _note_trace(record)
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id_var.get() or "-"
        for name in _CONTEXT_FIELDS[1:]:
            if not hasattr(record, name):
                setattr(record, name, None)
        return True


class RedactingFilter(logging.Filter):
    """Masks tokens and registered secrets in the message and the traceback text, and makes
    them text any stream can write (`valid_text`: a tool's lone surrogate included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad %-format must not lose the record
            message = str(record.msg)
        record.msg = redact(valid_text(message))
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(valid_text(record.exc_text))
        return True


def _note_trace(record: logging.LogRecord) -> None:
    """Put the current span's ids on `record` (where it is made: a handler on another thread
    would see another context), once."""
    if not hasattr(record, "trace_id"):
        ids = current_ids()
        record.trace_id, record.span_id = ids if ids is not None else (None, None)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, correlation ids (the trace's
    included), error."""

    def format(self, record: logging.LogRecord) -> str:
        _note_trace(record)
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value not in (None, "-"):
                entry[name] = value
        for name in (
            "trace_id",
            "span_id",
            "replica",
            "method",
            "path",
            "status",
            "duration_ms",
            "outcome",
            "tool",
        ):
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_text:
            entry["error"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(
    *, json_lines: bool, verbose: bool = False, replica: str | None = None
) -> None:
    """Send every log record to stderr, filtered and formatted for the daemon.

    `replica`: the daemon's replica id, a field of every JSON line (logs of several replicas
    gathered in one place stay apart); text lines name it once, at start.

    Replaces the root logger's handlers (the CLI's `basicConfig` one included); uvicorn's
    loggers propagate to it (the server is started with ``log_config=None``).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter(replica))
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(_TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # Neither format shows where a record was made (file, line, function), nor its thread or
    # process: skip finding them for each record, as the logging HOWTO's "Optimization"
    # section suggests (the frame walk is a third of a record's cost, and the daemon logs
    # each request).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Per-request access lines come from our middleware; uvicorn's would duplicate them.
    logging.getLogger("uvicorn.access").disabled = True
    for noisy in ("urllib3", "httpx", "httpcore", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
