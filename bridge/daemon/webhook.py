"""`--approval-webhook`: tell a chat-ops endpoint about each new approval request.

One background thread posts ``{"event": "approval_requested", "approval": {...},
"approve_url": ".../v1/approvals/{id}"}`` with a short timeout, retrying a few times with
backoff on connection errors, 429 and 5xx. It never blocks or fails a run: a full queue or a
post that keeps failing is logged and dropped. The decision still comes through the API.

The URL may carry a credential (chat webhooks often put one in the path), so logs show only
its origin.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from bridge.errors import redact_data

__all__ = ["ApprovalWebhook"]

logger = logging.getLogger(__name__)


class ApprovalWebhook:
    """Posts JSON payloads to one URL from a background thread.

    Args:
        url: where to post.
        timeout: seconds per attempt (connect and read).
        attempts: tries per payload (1 = no retry).
        backoff: seconds before the second attempt, doubled for each further one.
        max_queued: payloads waiting beyond this are dropped (logged).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        attempts: int = 3,
        backoff: float = 0.5,
        max_queued: int = 1000,
    ) -> None:
        import requests

        self.url = url
        parts = urlsplit(url)
        self.origin = f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"
        self.timeout = timeout
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self._session = requests.Session()
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(max_queued)
        self._closed = threading.Event()
        self._thread = threading.Thread(
            target=self._work, name="toolbridge-approval-webhook", daemon=True
        )
        self._thread.start()

    def __repr__(self) -> str:
        return f"ApprovalWebhook({self.origin!r})"

    def send(self, payload: dict[str, Any]) -> None:
        """Queue one payload, its secrets masked (`redact_data`); never blocks."""
        if self._closed.is_set():
            return
        try:
            self._queue.put_nowait(redact_data(payload))
        except queue.Full:
            logger.error(
                "approval webhook %s: %d posts are waiting; this one is dropped",
                self.origin,
                self._queue.qsize(),
            )

    def close(self, timeout: float = 2.0) -> None:
        """Stop after the posts already queued (waits up to `timeout` seconds)."""
        if self._closed.is_set():
            return
        self._closed.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        self._thread.join(timeout)
        self._session.close()

    def _work(self) -> None:
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            try:
                self._post(payload)
            except Exception:  # never let one payload stop the thread
                logger.exception("approval webhook %s: unexpected error", self.origin)

    def _post(self, payload: dict[str, Any]) -> None:
        import requests

        what = payload.get("approval", {}).get("approval_id", "?")
        problem = ""
        for attempt in range(1, self.attempts + 1):
            if attempt > 1:
                time.sleep(self.backoff * 2 ** (attempt - 2))
            try:
                response = self._session.post(
                    self.url, json=payload, timeout=self.timeout, allow_redirects=False
                )
            except requests.RequestException as exc:
                problem = type(exc).__name__
                continue
            if response.status_code < 300:
                logger.info("approval webhook %s: told about approval %s", self.origin, what)
                return
            problem = f"HTTP {response.status_code}"
            if response.status_code != 429 and response.status_code < 500:
                break  # the endpoint refuses this payload: retrying changes nothing
        logger.error(
            "approval webhook %s: could not post approval %s (%s); it is still answerable "
            "through the API",
            self.origin,
            what,
            problem,
        )
