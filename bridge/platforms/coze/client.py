"""HTTP for the Coze adapter: its `Transport` (Bearer token, ``x-tt-logid``, Coze's error
bodies) and the ``{code, msg, data}`` envelope every JSON answer comes in."""

from __future__ import annotations

import json as jsonlib
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import requests

from bridge.errors import PlatformStatusError, ProtocolError
from bridge.platforms._body import read_body
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._transport import ErrorAnswer, Files, Transport, trim
from bridge.platforms.coze.models import classify, error_for_code
from bridge.platforms.retry import RetryPolicy
from bridge.tracing import Tracing

__all__ = ["LOGID", "CozeClient"]

LOGID = "x-tt-logid"

_T = TypeVar("_T")


class CozeClient:
    """Sends requests to one Coze API root and reads their JSON envelopes.

    Args:
        base_url: The API root, e.g. ``https://api.coze.cn``.
        bearer: The ``Authorization`` header value (``Bearer <token>``).
        connect_timeout, idle_timeout, retry_policy, session, sleep: As `Transport` takes them.
        limits: The bounds each JSON answer is read within (its time, as a stream's).
    """

    def __init__(
        self,
        base_url: str,
        bearer: str,
        *,
        connect_timeout: float,
        idle_timeout: float,
        retry_policy: RetryPolicy,
        session: requests.Session | None,
        sleep: Callable[[float], None],
        limits: StreamLimits,
    ) -> None:
        self.base_url = base_url
        self.stream_limits = limits
        self.http = Transport(
            label="Coze",
            headers={"Authorization": bearer},
            connect_timeout=connect_timeout,
            idle_timeout=idle_timeout,
            retry_policy=retry_policy,
            read_status_error=status_error,
            request_id_header=LOGID,
            config_hint="check the base URL (--base-url or COZE_API_BASE) and the token",
            session=session,
            sleep=sleep,
            base_url=base_url,
        )

    def use_tracing(self, tracing: Tracing) -> None:
        """Send the client spans of its requests to `tracing`."""
        self.http.tracing = tracing

    def close(self) -> None:
        """Close the HTTP session if this client created it."""
        self.http.close()

    def json(
        self,
        method: str,
        path: str,
        operation: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        files: Callable[[], Files] | None = None,
    ) -> Any:
        """The ``data`` of the answer to one request (see `envelope`)."""
        url = self.base_url + path
        # Bounded as an answer is (run_timeout), so a server trickling it cannot hang a run.
        budget = self.stream_limits.budget(f"Coze {operation}: the answer of {url}")
        try:
            response = self.http.request(
                method,
                url,
                json=json,
                params=params,
                files=files,
                stream=False,
                operation=operation,
                budget=budget,
            )
        finally:
            budget.close()
        return self.envelope(response, url, operation, self.http.request_id(response))

    def shaped(
        self, validate: Callable[[Any], _T], data: Any, path: str, operation: str, logid: str | None
    ) -> _T:
        """`data` read as the model `validate` builds; a `ProtocolError` naming what was
        called and which fields are wrong when it is not of that shape."""
        with self.http.errors(self.base_url + path, operation=operation, request_id=logid):
            return validate(data)

    def envelope(
        self,
        response: requests.Response,
        url: str,
        operation: str,
        logid: str | None,
        budget: RunBudget | None = None,
    ) -> Any:
        """The ``data`` of a ``{code, msg, data}`` answer; an error for a non-zero code."""
        with self.http.errors(url, operation=operation, request_id=logid):
            content = read_body(response) if budget is None else budget.body(response)
            text = content.decode("utf-8")
            body = jsonlib.loads(text)
        if not isinstance(body, dict):
            # Valid JSON but no envelope (a string, a list, null): a proxy or a wrong base URL.
            raise ProtocolError(
                f"Coze {operation}: {url} answered {type(body).__name__} JSON "
                f"{trim(text, 100)!r}; expected an object with code, msg and data: check the "
                "base URL (--base-url or COZE_API_BASE)",
                request_id=logid,
                body=trim(text),
            )
        code = body.get("code", 0)
        if isinstance(code, int) and code != 0:
            raise error_for_code(
                code,
                str(body.get("msg", "")),
                where=f"Coze {operation}: {url}",
                request_id=logid,
                status=response.status_code,
                body=trim(text),
            )
        return body.get("data")


def status_error(answer: ErrorAnswer) -> PlatformStatusError:
    """An HTTP error status: its class from the status, the words from Coze's body."""
    body = answer.json()
    code, msg = body.get("code"), body.get("msg")
    if isinstance(code, int) and code:
        return answer.error(str(msg or ""), code=str(code), hint=classify(code)[1])
    return answer.error(None, hint="check the base URL (--base-url or COZE_API_BASE)")
