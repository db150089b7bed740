"""No secret the daemon knows leaves it: a real `toolbridge serve` whose tools hand them out.

The daemon runs with every kind of secret it knows: the platform token (the emulator's), API
keys from a key file, an HTTP tool's ``${ENV}`` credential, and the PostgreSQL journal's
password. Its tools do what any prompt-injected ``read`` tool can: ``leak`` returns an
environment variable holding one of them, ``echo`` says back what the model sent, ``send`` (a
confirm tool) waits for a person's approval with it in its arguments. The test follows
``GET /v1/events`` from the start, sends messages (JSON and streamed), calls tools directly,
decides the approval (the webhook receives it), reads every GET route of the OpenAPI document,
and requires that none of the secrets appears in any byte the daemon sent: responses, events,
webhook posts and its own log.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, wait_for
from tests.daemon.test_approvals import Receiver
from tests.support.postgres import PostgresServer

TOOLS = '''
"""Tools that hand out what they can read: the environment, what the model sent."""

import os

from bridge import manifest


@manifest(description="Read a setting from the environment.")
def leak(name: str) -> str:
    """Leak.

    Args:
        name: The variable.
    """
    return f"value: {os.environ[name]}"


@manifest(description="Say it back.")
def echo(text: str) -> str:
    """Echo.

    Args:
        text: Anything.
    """
    return text


@manifest(description="Send a text somewhere: a person approves each call.", confirm=True)
def send(text: str) -> str:
    """Send.

    Args:
        text: Anything.
    """
    return f"sent {text}"
'''

MANIFEST = """\
base_url: http://127.0.0.1:9
headers: {Authorization: "Bearer ${TB_SECRET_HTTP}"}
tools:
  - name: status
    description: The service's status.
    url: /status
"""

SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 3},
    "rules": [
        {
            "match": r"leak (?P<name>\w+)",
            "steps": [{"tool": "leak", "arguments": {"name": "{name}"}}],
            "answer": "leaked {outputs.leak}",
        },
        {
            "match": r"echo (?P<text>\S+)",
            "steps": [{"tool": "echo", "arguments": {"text": "{text}"}}],
            "answer": "echoed {outputs.echo}",
        },
        {
            "match": r"send (?P<text>\S+)",
            "steps": [{"tool": "send", "arguments": {"text": "{text}"}}],
            "answer": "{outputs.send}",
        },
    ],
}

PLATFORM_TOKEN = "platform-" + secrets.token_hex(16)
ALICE = "alice-" + secrets.token_hex(16)
BOB = "bob-" + secrets.token_hex(16)
HTTP_CREDENTIAL = "http-cred-" + secrets.token_hex(16)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, token=PLATFORM_TOKEN) as emu:
        yield emu


class Follower:
    """``GET /v1/events`` read on a thread: every byte the daemon sends there."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.raw = bytearray()
        self.response = daemon.request("GET", "/v1/events", stream=True, timeout=120)
        assert self.response.status_code == 200, self.response.text
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        wait_for(lambda: b"event: hello" in self.raw, "the hub's hello")

    def _read(self) -> None:
        with contextlib.suppress(requests.RequestException, AttributeError):
            for chunk in self.response.raw.stream(1024, decode_content=True):
                self.raw.extend(chunk)

    def count(self, name: str) -> int:
        return bytes(self.raw).count(f"event: {name}\n".encode())

    def close(self) -> None:
        self.response.close()
        self.thread.join(timeout=10)


def _get_routes(daemon: DaemonProcess) -> list[str]:
    """Every GET path of the daemon's OpenAPI document (the SSE ones are read separately)."""
    document = daemon.request("GET", "/openapi.json").json()
    return [
        path
        for path, operations in document["paths"].items()
        if "get" in operations and path != "/v1/events"
    ]


def test_no_secret_leaves_the_daemon(
    emulator: Emulator, tmp_path: Path, postgres: PostgresServer
) -> None:
    tools = tmp_path / "leaky_tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    manifest = tmp_path / "service.yaml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    keys = tmp_path / "keys.txt"
    keys.write_text(f"alice: {ALICE}\nbob: {BOB}\n", encoding="utf-8")
    receiver = Receiver()
    dsn = postgres.create_database(f"secrets_{secrets.token_hex(6)}")
    kinds = {
        "PLATFORM": PLATFORM_TOKEN,
        "ALICE": ALICE,
        "BOB": BOB,
        "HTTP": HTTP_CREDENTIAL,
        "DB": postgres.password,
    }
    env = {
        **emulator.env(),
        **{f"TB_SECRET_{kind}": value for kind, value in kinds.items()},
    }
    daemon = DaemonProcess(
        [
            "--tools",
            str(tools),
            "--tools",
            str(manifest),
            "--port",
            "0",
            "--db",
            dsn,
            "--api-key-file",
            str(keys),
            "--approval-webhook",
            receiver.url,
        ],
        env=env,
        api_key=ALICE,
    )
    sent: list[bytes] = []
    try:
        follower = Follower(daemon)
        cid = daemon.new_conversation()
        runs = 0
        for kind in kinds:
            # The tool's output holds the secret: the result's tool_runs and answer.
            answer = daemon.ask(cid, f"leak TB_SECRET_{kind}")
            runs += 1
            assert answer.status_code == 200, answer.text
            assert answer.json()["tool_runs"][0]["output"] == "value: [secure]"
            sent.append(answer.content)
        for value in kinds.values():
            # The model's arguments, the query and the streamed answer hold it.
            with daemon.request(
                "POST",
                f"/v1/conversations/{cid}/messages",
                json={"query": f"echo {value}", "stream": True},
                stream=True,
            ) as streamed:
                assert streamed.status_code == 200, streamed.text
                sent.append(streamed.content)
            runs += 1
        for kind, value in kinds.items():
            for name, arguments in (
                ("leak", {"name": f"TB_SECRET_{kind}"}),
                ("echo", {"text": value}),
            ):
                direct = daemon.request(
                    "POST", f"/v1/tools/{name}/call", json={"arguments": arguments}
                )
                assert direct.status_code == 200, direct.text
                assert "[secure]" in direct.json()["output"]
                sent.append(direct.content)

        # A confirm call waits for a person with the secret in its arguments: the approval's
        # events, the webhook's post and the decision's answer hold it.
        asking: dict[str, requests.Response] = {}
        thread = threading.Thread(
            target=lambda: asking.update(r=daemon.ask(cid, f"send {PLATFORM_TOKEN}"))
        )
        thread.start()
        pending = wait_for(
            lambda: daemon.request("GET", "/v1/approvals", params={"status": "pending"}).json()[
                "items"
            ],
            "the approval request",
        )
        decided = daemon.request(
            "POST", f"/v1/approvals/{pending[0]['approval_id']}", json={"decision": "approve"}
        )
        assert decided.status_code == 200, decided.text
        sent.append(decided.content)
        thread.join(timeout=60)
        assert asking["r"].status_code == 200, asking["r"].text
        sent.append(asking["r"].content)
        runs += 1
        wait_for(lambda: receiver.bodies, "the approval webhook's post")

        wait_for(lambda: follower.count("run_ended") >= runs, "every run's end on /v1/events")
        follower.close()
        sent.append(bytes(follower.raw))
        assert follower.count("tool_call_finished") >= runs
        for path in _get_routes(daemon):
            path = path.replace("{conversation_id}", cid).replace(
                "{approval_id}", pending[0]["approval_id"]
            )
            response = daemon.request("GET", path)
            assert response.status_code == 200, (path, response.text)
            sent.append(response.content)
        sent.append(daemon.request("GET", "/").content)
    finally:
        daemon.stop()
        receiver.close()
    sent.append(repr(receiver.bodies).encode())
    sent.append(daemon.log.encode())

    everything = b"\n".join(sent)
    assert b"[secure]" in everything
    for kind, value in kinds.items():
        assert value.encode() not in everything, f"the {kind} secret left the daemon"
    # The platform got the tools' real outputs: redaction is for what reaches clients.
    assert any(PLATFORM_TOKEN in str(r.json) for r in emulator.requests)
