"""The daemon's fast path (`bridge.daemon.fastpath`) answers exactly as FastAPI would.

Two daemons on the same emulator and tools, one with the fast path (the default) and one
without (``TOOLBRIDGE_FASTPATH=0``), get the same requests, hostile ones included: the status,
the error code and message, the headers that matter and the shape of each answer must be the
same. Ids (conversations, requests) and timings differ by nature and are left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, start_daemon

KEY = "fastpath-test-key-0123456789abcdef"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")


@pytest.fixture(scope="module")
def pair(
    emulator: Emulator, tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    folder = tmp_path_factory.mktemp("fastpath")
    fast = start_daemon(emulator, tools_dir, folder / "fast.db", api_key=KEY)
    try:
        plain = start_daemon(
            emulator, tools_dir, folder / "plain.db", api_key=KEY, env={"TOOLBRIDGE_FASTPATH": "0"}
        )
        try:
            yield fast, plain
        finally:
            plain.stop()
    finally:
        fast.stop()


def _shape(response: requests.Response) -> dict[str, Any]:
    """What must be equal: status, content type, the challenge header, the body without ids."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    text = UUID.sub("<id>", json.dumps(body, sort_keys=True))
    text = re.sub(
        r'"(duration_ms|created_at|updated_at|started_at|finished_at|at)": [^,}]+',
        r'"\1": <t>',
        text,
    )
    text = re.sub(r'"(message_id|request_id)": [^,}]+', r'"\1": <n>', text)
    return {
        "status": response.status_code,
        "type": response.headers.get("content-type"),
        "challenge": response.headers.get("www-authenticate"),
        "retry": response.headers.get("retry-after"),
        "body": text,
    }


def _both(
    pair: tuple[DaemonProcess, DaemonProcess], method: str, path: str, **kwargs: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    fast, plain = pair
    answers = []
    for daemon in (fast, plain):
        headers = {"Authorization": f"Bearer {KEY}", **kwargs.pop("headers", {})}
        target = path.replace("{cid}", daemon.new_conversation()) if "{cid}" in path else path
        answers.append(
            _shape(
                requests.request(method, daemon.url + target, headers=headers, timeout=60, **kwargs)
            )
        )
        kwargs["headers"] = {k: v for k, v in headers.items() if k != "Authorization"} | (
            {"Authorization": headers["Authorization"]} if "Authorization" in headers else {}
        )
    return answers[0], answers[1]


CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("create", "/v1/conversations", {"json": {}}),
    ("create with end user", "/v1/conversations", {"json": {"end_user_id": "ada"}}),
    ("create, unknown field", "/v1/conversations", {"json": {"nope": 1}}),
    ("create, end user not a string", "/v1/conversations", {"json": {"end_user_id": 5}}),
    (
        "create, not JSON",
        "/v1/conversations",
        {"data": b"{oops", "headers": {"Content-Type": "application/json"}},
    ),
    ("create, a JSON list", "/v1/conversations", {"json": [1, 2]}),
    (
        "create, text/plain",
        "/v1/conversations",
        {"data": b"{}", "headers": {"Content-Type": "text/plain"}},
    ),
    ("ask", "/v1/conversations/{cid}/messages", {"json": {"query": "weather in Paris"}}),
    (
        "ask, charset",
        "/v1/conversations/{cid}/messages",
        {
            "data": json.dumps({"query": "weather in Tokyo"}).encode(),
            "headers": {"Content-Type": "application/json; charset=utf-8"},
        },
    ),
    ("ask, no query", "/v1/conversations/{cid}/messages", {"json": {}}),
    ("ask, empty query", "/v1/conversations/{cid}/messages", {"json": {"query": ""}}),
    ("ask, query not a string", "/v1/conversations/{cid}/messages", {"json": {"query": ["a"]}}),
    (
        "ask, unknown tool_choice",
        "/v1/conversations/{cid}/messages",
        {"json": {"query": "hi", "tool_choice": "rm_rf"}},
    ),
    ("ask, unknown field", "/v1/conversations/{cid}/messages", {"json": {"query": "hi", "x": 1}}),
    (
        "ask, NUL and surrogates",
        "/v1/conversations/{cid}/messages",
        {"data": b'{"query": "a\\u0000b\\ud800"}', "headers": {"Content-Type": "application/json"}},
    ),
    (
        "ask, deep JSON",
        "/v1/conversations/{cid}/messages",
        {
            "data": b'{"query": ' + b"[" * 5000 + b"]" * 5000 + b"}",
            "headers": {"Content-Type": "application/json"},
        },
    ),
    (
        "ask, unknown conversation",
        "/v1/conversations/00000000-0000-0000-0000-000000000000/messages",
        {"json": {"query": "hi"}},
    ),
    ("ask, bad id", "/v1/conversations/..%2F..%2Fetc/messages", {"json": {"query": "hi"}}),
    ("ask, body too large", "/v1/conversations/{cid}/messages", {"json": {"query": "x" * 200_000}}),
    (
        "ask, no key",
        "/v1/conversations/{cid}/messages",
        {"json": {"query": "hi"}, "headers": {"Authorization": ""}},
    ),
    (
        "ask, wrong key",
        "/v1/conversations/{cid}/messages",
        {
            "json": {"query": "hi"},
            "headers": {"Authorization": "Bearer wrong-key-0123456789abcdef"},
        },
    ),
    (
        "ask, basic scheme",
        "/v1/conversations/{cid}/messages",
        {"json": {"query": "hi"}, "headers": {"Authorization": f"Basic {KEY}"}},
    ),
    (
        "create, wrong key",
        "/v1/conversations",
        {"json": {}, "headers": {"Authorization": "Bearer nope"}},
    ),
]


@pytest.mark.parametrize(("label", "path", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_the_fast_path_answers_as_fastapi_does(
    pair: tuple[DaemonProcess, DaemonProcess], label: str, path: str, kwargs: dict[str, Any]
) -> None:
    fast, plain = _both(pair, "POST", path, **kwargs)
    assert fast == plain, label


def test_both_daemons_say_whether_the_fast_path_is_on(
    pair: tuple[DaemonProcess, DaemonProcess],
) -> None:
    fast, plain = pair
    # The same conversation asked twice through each: the answers (and the journal) agree.
    answers = []
    for daemon in (fast, plain):
        cid = daemon.new_conversation()
        reply = daemon.ask(cid, "weather in Paris")
        detail = daemon.request("GET", f"/v1/conversations/{cid}").json()
        answers.append(
            (reply.status_code, reply.json()["answer"], [m["status"] for m in detail["messages"]])
        )
    assert answers[0] == answers[1] == (200, "Paris: 18 degrees", ["finished"])


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.dictionaries(
        st.sampled_from(["query", "stream", "tool_choice", "end_user_id", "x"]), JSON, max_size=4
    )
)
def test_property_any_message_body_gets_the_same_answer_both_ways(
    pair: tuple[DaemonProcess, DaemonProcess], body: dict[str, Any]
) -> None:
    body.pop("stream", None)  # a streamed answer is FastAPI's on both daemons
    fast, plain = _both(pair, "POST", "/v1/conversations/{cid}/messages", json=body)
    assert fast == plain
