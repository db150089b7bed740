"""What leaves the daemon as JSON: every body through one redaction step.

A tool may return anything, a platform token read from the environment included (any
prompt-injected ``fetch`` or ``read`` tool can), and the model may repeat it in its arguments
and answers. The daemon hands such data on as it is made, so the one step that keeps
registered secrets (`bridge.errors.register_secret`: the platform token, the daemon's API
keys, HTTP tools' ``${ENV}`` credentials, the database password) from clients is applied
where data goes out:

- JSON responses: `PublicJSONResponse`, the app's default response class, and the class of
  every JSON answer a route or `bridge.daemon.fastpath` builds itself (`MaskedJSONResponse`
  for a run's result, which was masked for its ``done`` event: once is enough);
- Server-Sent Events: `bridge.daemon.hub.EventHub.publish` and
  `bridge.daemon.runs.RunHandle.publish`, where every event is made;
- answer text streamed piece by piece: `bridge.daemon.runs.StreamedText` holds back what may
  be the start of a secret until the next piece shows;
- logs (`bridge.daemon.logs.RedactingFilter`), the approval webhook, the metrics' labels and
  ``mcp-serve``'s results each pass their text through `bridge.errors.redact`.

What the agent platform is sent is not redacted: a tool's output is the model's input, and
the daemon does not change what a tool returns (the journal keeps it redacted).
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from bridge.errors import redact_data

__all__ = ["MaskedJSONResponse", "PublicJSONResponse", "json_data"]


def json_data(model: BaseModel, **options: Any) -> Any:
    """``model.model_dump(mode="json", **options)``, also for a model holding a lone surrogate
    in a dict key (arguments a platform sent as a ``\\ud800`` escape), which pydantic refuses
    to encode: such data is made valid text and masked first (`bridge.errors.redact_data`).
    The usual case costs one dump, as before."""
    try:
        return model.model_dump(mode="json", **options)
    except UnicodeEncodeError:
        return to_jsonable_python(redact_data(model.model_dump(**options)))


class PublicJSONResponse(JSONResponse):
    """A JSON response whose content has registered secrets masked and every string made
    valid UTF-8 text (`bridge.errors.redact_data`) before it is encoded."""

    def render(self, content: Any) -> bytes:
        return super().render(redact_data(content))


class MaskedJSONResponse(JSONResponse):
    """A JSON response whose content already passed `bridge.errors.redact_data` where it was
    made (a run's result, masked once for its ``done`` event): it is encoded as it is, not
    masked a second time."""
