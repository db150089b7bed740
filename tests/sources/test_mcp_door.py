"""`mcp-serve` behind the door: bearer credentials through the MCP SDK's `TokenVerifier`, the
OAuth protected resource metadata (RFC 9728), each caller's own tools, the policy's decision on
each `tools/call` and the audit record of it.

A real streamable HTTP endpoint (`mcp_http_app` on uvicorn, loopback, ephemeral port) driven by
the official MCP client; the door, the policy and the audit record are small implementations of
their interfaces (`tests.support.mcp_door`), to test `mcp_server`'s own logic. The command's
flag checks run `toolbridge mcp-serve`; the command behind the real door, policy and audit
record (files, processes) is tested in `test_mcp_serve_door`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import requests
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client

from bridge._serve import ServerHandle, serve_in_thread
from bridge.access import Permission, Principal
from bridge.sources.mcp_server import mcp_http_app, mcp_server
from bridge.tools import manifest
from bridge.tools.toolbox import Toolbox
from tests.support.mcp_door import Entries, KeyDoor, RulePolicy, caller

ISSUER = "https://idp.example.test/realms/tools"
RESOURCE = "https://mcp.example.test/mcp"
METADATA = "https://mcp.example.test/.well-known/oauth-protected-resource/mcp"


@manifest
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@manifest
def touch(path: str) -> str:
    """Create a marker file (the side effect a refused call must not have)."""
    Path(path).write_text("ran", encoding="utf-8")
    return f"touched {Path(path).name}"


@manifest
def transfer(amount: int) -> str:
    """Move money."""
    return f"moved {amount}"


ALICE = caller("alice", "*")
BOB = caller("bob", "add", "trans*")


class Served:
    def __init__(self, handle: ServerHandle, door: KeyDoor, policy: RulePolicy, audit: Entries):
        self.url = handle.base_url + "/mcp"
        self.base = handle.base_url
        self.door = door
        self.policy = policy
        self.audit = audit


@pytest.fixture
def served() -> Iterator[Served]:
    door = KeyDoor({"alice-key": ALICE, "bob-key": BOB, "slow-key": caller("slow", "*")},
                   limited=("slow",))  # fmt: skip
    policy, audit = RulePolicy(), Entries()
    toolbox = Toolbox([add, touch, transfer])
    app = mcp_http_app(
        toolbox, door=door, policy=policy, audit=audit, issuer=ISSUER, resource_url=RESOURCE
    )
    with serve_in_thread(app) as handle:
        yield Served(handle, door, policy, audit)


def as_caller(url: str, key: str, body: Callable[[Client], Any], **options: Any) -> Any:
    """Run `body` with the official client sending ``Authorization: Bearer <key>``."""

    async def main() -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"})
        async with http, Client(streamable_http_client(url, http_client=http), **options) as client:
            return await body(client)

    return asyncio.run(asyncio.wait_for(main(), 60))


def text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "door-test", "version": "1"},
    },
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-key", "Basic YWxpY2U6eA=="])
def test_without_a_callers_credential_the_answer_is_401_naming_the_metadata(
    served: Served, authorization: str | None
) -> None:
    headers = dict(HEADERS, **({"Authorization": authorization} if authorization else {}))
    answer = requests.post(served.url, data=json.dumps(INIT), headers=headers, timeout=30)
    assert answer.status_code == 401, answer.text
    challenge = answer.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{METADATA}"' in challenge
    assert answer.json()["error"] == "invalid_token"


def test_a_refused_credential_is_an_identity_entry_in_the_audit_record(served: Served) -> None:
    headers = dict(HEADERS, Authorization="Bearer wrong-key")
    answer = requests.post(served.url, data=json.dumps(INIT), headers=headers, timeout=30)
    assert answer.status_code == 401
    assert served.door.asked == ["Bearer wrong-key"]
    [entry] = served.audit.events
    assert (entry.kind, entry.outcome, entry.caller) == ("identity", "unauthorized", None)
    assert entry.detail["reason"] == "unknown key"
    assert "wrong-key" not in json.dumps(entry.detail)


def test_the_protected_resource_metadata_names_the_identity_provider(served: Served) -> None:
    answer = requests.get(served.base + "/.well-known/oauth-protected-resource/mcp", timeout=30)
    assert answer.status_code == 200, answer.text
    document = answer.json()
    assert document["resource"] == RESOURCE
    assert document["authorization_servers"] == [ISSUER]
    assert document["bearer_methods_supported"] == ["header"]


def test_each_caller_lists_only_its_own_tools(served: Served) -> None:
    async def names(client: Client) -> list[str]:
        return [tool.name for tool in (await client.list_tools()).tools]

    assert as_caller(served.url, "alice-key", names) == ["add", "touch", "transfer"]
    assert as_caller(served.url, "bob-key", names) == ["add", "transfer"]


def test_a_tool_outside_the_callers_list_is_an_unknown_tool(served: Served, tmp_path: Path) -> None:
    marker = tmp_path / "marker.txt"

    async def body(client: Client) -> tuple[Any, Any, Any]:
        hidden = await client.call_tool("touch", {"path": str(marker)})
        unknown = await client.call_tool("nope", {})
        added = await client.call_tool("add", {"a": 1, "b": 2})
        return hidden, unknown, added

    hidden, unknown, added = as_caller(served.url, "bob-key", body)
    assert not marker.exists()
    assert hidden.is_error is True
    assert text(hidden) == "Unknown tool 'touch'. Available tools: add, transfer."
    assert text(unknown) == "Unknown tool 'nope'. Available tools: add, transfer."
    assert (added.is_error, text(added)) == (False, "3")
    assert ("identity", "forbidden", "bob") in served.audit.kinds("touch")
    # The caller that may run it does.
    touched = as_caller(
        served.url, "alice-key", lambda client: client.call_tool("touch", {"path": str(marker)})
    )
    assert (touched.is_error, text(touched)) == (False, "touched marker.txt")


def test_a_call_the_policy_refuses_names_the_policy_and_its_reason(served: Served) -> None:
    result = as_caller(
        served.url, "bob-key", lambda client: client.call_tool("transfer", {"amount": 500})
    )
    assert result.is_error is True
    assert text(result) == "refused by policy big-transfers: transfers over 100 need finance"
    assert served.audit.kinds("transfer") == [
        ("policy", "refuse", "bob"),
        ("tool", "refused", "bob"),
    ]
    policy_entry = served.audit.events[0]
    assert policy_entry.detail == {
        "policies": ["big-transfers"],
        "reason": "transfers over 100 need finance",
    }
    assert policy_entry.arguments == {"amount": 500}
    assert policy_entry.via == "key"


def test_the_policy_sees_the_call_its_caller_and_the_session(served: Served) -> None:
    # Sessions are of the 2025-11-25 protocol (and earlier): the session is the conversation.
    result = as_caller(
        served.url,
        "bob-key",
        lambda client: client.call_tool("transfer", {"amount": 5}),
        mode="legacy",
    )
    assert (result.is_error, text(result)) == (False, "moved 5")
    [(who, facts)] = served.policy.seen
    assert who == "bob"
    assert (facts.tool, dict(facts.arguments), facts.platform, facts.end_user) == (
        "transfer",
        {"amount": 5},
        "mcp",
        "bob",
    )
    assert served.audit.kinds("transfer") == [("policy", "allow", "bob"), ("tool", "ok", "bob")]
    assert len(facts.conversation) >= 16  # the MCP session id
    assert served.audit.events[0].conversation_id == facts.conversation


def test_a_session_belongs_to_the_caller_that_opened_it(served: Served) -> None:
    opened = requests.post(
        served.url,
        data=json.dumps(INIT),
        headers=dict(HEADERS, Authorization="Bearer alice-key"),
        timeout=30,
    )
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}
    headers = dict(HEADERS, **{"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"})
    borrowed = requests.post(
        served.url,
        data=json.dumps(listing),
        headers=dict(headers, Authorization="Bearer bob-key"),
        timeout=30,
    )
    assert borrowed.status_code == 404, borrowed.text


def test_a_caller_without_call_tools_sees_no_tools(tmp_path: Path) -> None:
    observer = Principal(name="watcher", permissions=frozenset({Permission.OBSERVE}))
    door, audit = KeyDoor({"watch-key": observer}), Entries()
    app = mcp_http_app(Toolbox([add, touch]), door=door, audit=audit)
    marker = tmp_path / "marker.txt"

    async def body(client: Client) -> tuple[list[Any], Any]:
        listed = (await client.list_tools()).tools
        return listed, await client.call_tool("touch", {"path": str(marker)})

    with serve_in_thread(app) as handle:
        listed, refused = as_caller(handle.base_url + "/mcp", "watch-key", body)
    assert listed == []
    assert (refused.is_error, text(refused)) == (
        True,
        "Unknown tool 'touch'. No tools are available.",
    )
    assert not marker.exists()
    assert audit.kinds() == [("identity", "forbidden", "watcher")]


class Host:
    """An MCP host's user who accepts every question."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content={})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_the_policy_sends_to_approval_asks_the_hosts_user(served: Served, mode: str) -> None:
    host = Host()
    asked = as_caller(
        served.url,
        "bob-key",
        lambda client: client.call_tool("transfer", {"amount": 50}),
        mode=mode,
        elicitation_callback=host,
    )
    assert (asked.is_error, text(asked)) == (False, "moved 50")
    assert len(host.asked) == 1 and "'transfer'" in host.asked[0]
    assert ("approval", "approved", "bob") in served.audit.kinds("transfer")

    unasked = as_caller(
        served.url, "bob-key", lambda client: client.call_tool("transfer", {"amount": 60}),
        mode=mode,
    )  # fmt: skip
    assert unasked.is_error is True
    assert "did not declare the elicitation capability" in text(unasked)
    assert served.audit.kinds("transfer")[-2:] == [
        ("approval", "rejected", "bob"),
        ("tool", "refused", "bob"),
    ]


def test_a_caller_over_its_rate_is_told_when_to_retry(served: Served) -> None:
    result = as_caller(
        served.url, "slow-key", lambda client: client.call_tool("add", {"a": 1, "b": 1})
    )
    assert result.is_error is True
    assert text(result) == "not run: slow is over its tool call rate; retry in 7 s"
    assert served.audit.kinds("add") == [("identity", "rate_limited", "slow")]
    assert served.policy.seen == []


def test_keys_without_an_identity_provider_still_need_a_credential() -> None:
    door = KeyDoor({"alice-key": ALICE, "bob-key": BOB})
    app = mcp_http_app(Toolbox([add, touch]), door=door)
    with serve_in_thread(app) as handle:
        url = handle.base_url + "/mcp"
        refused = requests.post(url, data=json.dumps(INIT), headers=HEADERS, timeout=30)

        async def names(client: Client) -> list[str]:
            return [tool.name for tool in (await client.list_tools()).tools]

        listed = as_caller(url, "bob-key", names)
        no_metadata = requests.get(
            handle.base_url + "/.well-known/oauth-protected-resource/mcp", timeout=30
        )
    assert refused.status_code == 401
    # No authorization server to name: no metadata, and the challenge does not point to any.
    assert refused.headers["WWW-Authenticate"].startswith("Bearer ")
    assert "resource_metadata" not in refused.headers["WWW-Authenticate"]
    assert no_metadata.status_code == 404
    assert listed == ["add"]


def test_over_stdio_the_caller_is_local_and_the_policy_applies() -> None:
    policy, audit = RulePolicy(), Entries()
    server = mcp_server(Toolbox([add, transfer]), policy=policy, audit=audit)

    async def main() -> tuple[list[str], Any]:
        async with Client(server) as client:
            listed = [tool.name for tool in (await client.list_tools()).tools]
            return listed, await client.call_tool("transfer", {"amount": 500})

    listed, refused = asyncio.run(asyncio.wait_for(main(), 60))
    assert listed == ["add", "transfer"]
    assert text(refused) == "refused by policy big-transfers: transfers over 100 need finance"
    [(who, facts)] = policy.seen
    assert (who, facts.platform, facts.end_user, facts.conversation) == (
        "local",
        "mcp",
        "local",
        "",
    )
    assert audit.events[0].via == "local"


# --- the command: `toolbridge mcp-serve --transport http` with the door's flags ----------------

ROOT = Path(__file__).resolve().parents[2]


def mcp_serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", "mcp-serve", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["--host", "0.0.0.0", "--allow-remote"],
        ["--host", "10.1.2.3", "--allow-remote", "--policy", "rules.cedar"],
        ["--host", "::", "--allow-remote", "--audit-db", "audit.db"],
    ],
)
def test_allow_remote_without_authentication_is_refused(args: list[str]) -> None:
    done = mcp_serve("--tools", str(ROOT / "tests" / "data" / "serve_tools.py"),
                     "--transport", "http", "--port", "0", *args)  # fmt: skip
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line.endswith(
        "--allow-remote needs authentication (--callers, --api-key-file or --oidc-issuer)"
    ), line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--transport", "http", "--oidc-issuer", ISSUER],
         "--oidc-issuer and --oidc-audience go together"),
        (["--transport", "http", "--host", "0.0.0.0", "--allow-remote", "--oidc-issuer", ISSUER,
          "--oidc-audience", "tools"],
         "--oidc-issuer on a non-loopback --host needs --resource-url"),
        (["--callers", "callers.toml"], "--callers, --api-key-file and --oidc-issuer are for "
         "--transport http"),
    ],
)  # fmt: skip
def test_door_flag_mistakes_are_usage_errors(args: list[str], said: str) -> None:
    done = mcp_serve("--tools", str(ROOT / "tests" / "data" / "serve_tools.py"), *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert said in done.stderr


class Broken:
    """`Records` whose store is down."""

    def record(self, event: Any) -> None:
        raise OSError("disk full")

    def stage(self, event: Any) -> None:
        self.record(event)


def test_a_call_that_cannot_be_recorded_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "marker.txt"
    server = mcp_server(Toolbox([touch]), policy=RulePolicy(), audit=Broken())

    async def main() -> Any:
        async with Client(server) as client:
            return await client.call_tool("touch", {"path": str(marker)})

    result = asyncio.run(asyncio.wait_for(main(), 60))
    assert (result.is_error, text(result)) == (
        True,
        "not run: the audit record could not be written",
    )
    assert not marker.exists()


def test_yes_does_not_skip_a_policys_approval() -> None:
    audit = Entries()
    server = mcp_server(Toolbox([transfer]), yes=True, policy=RulePolicy(), audit=audit)

    async def main() -> tuple[Any, Any]:
        async with Client(server, mode="legacy") as client:  # no elicitation: nobody to ask
            return (
                await client.call_tool("transfer", {"amount": 50}),
                await client.call_tool("transfer", {"amount": 5}),
            )

    unasked, small = asyncio.run(asyncio.wait_for(main(), 60))
    assert unasked.is_error is True
    assert "did not declare the elicitation capability" in text(unasked)
    assert (small.is_error, text(small)) == (False, "moved 5")
    assert audit.kinds("transfer")[:3] == [
        ("policy", "approval", "local"),
        ("approval", "rejected", "local"),
        ("tool", "refused", "local"),
    ]
