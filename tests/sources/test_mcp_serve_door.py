"""`toolbridge mcp-serve` behind the real door, end to end: real processes, real files.

Each test starts ``python -m bridge mcp-serve`` with a TOML caller file (keys as SHA-256
digests), a ``.cedar`` policy file and a SQLite journal for the audit record (``--audit-db``),
drives it with the official MCP client (streamable HTTP, or stdio), and reads the audit record
back with ``toolbridge audit verify`` and ``toolbridge audit export``. The OIDC test names its
callers with tokens of a loopback identity provider (`tests.support.idp`).

The tools come from two sources, named by their SPECs (``FILE source=NAME``): ``bank`` (the
``get_*`` lookups and ``transfer``) and ``ops`` (``restart``), so that a role's
``source:bank`` pattern and a Cedar ``resource in Source::"bank"`` are decided on them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest
import requests
from mcp import Client, StdioServerParameters, types
from mcp.client.streamable_http import streamable_http_client

from tests.support.idp import IdentityProvider, running
from tests.support.mcp_door import ROOT, McpServe

BANK_TOOLS = '''
from pathlib import Path

from bridge.tools import manifest


@manifest(read_only=True)
def get_balance(account: str) -> str:
    """An account's balance."""
    return f"balance of {account}: 42"


@manifest(read_only=True)
def get_rate(currency: str) -> str:
    """An exchange rate."""
    return f"1 {currency} = 1.1 EUR"


@manifest
def transfer(amount: int, to: str, note: str = "") -> str:
    """Move money (and leave a line in the ledger file the note names)."""
    if note:
        with Path(note).open("a", encoding="utf-8") as ledger:
            ledger.write(f"{amount} to {to}\\n")
    return f"moved {amount} to {to}"
'''

OPS_TOOLS = '''
from bridge.tools import manifest


@manifest
def restart(service: str) -> str:
    """Restart a service."""
    return f"restarted {service}"
'''

POLICY = """\
@id("bank")
permit (principal, action == Action::"call", resource in Source::"bank");

@id("closed-account")
@reason("account ACME-7 is closed")
forbid (principal, action == Action::"call", resource == Tool::"get_balance")
when { context.arguments has account && context.arguments.account == "ACME-7" };

@id("mid-transfers")
@approval("required")
permit (principal, action == Action::"call", resource == Tool::"transfer")
when { context.arguments has amount && context.arguments.amount > 10 };

@id("no-big-transfers")
@reason("transfers over 100 need finance")
forbid (principal, action == Action::"call", resource == Tool::"transfer")
when { context.arguments has amount && context.arguments.amount > 100 };
"""

KEYS = {
    "sam": "sam-key-7f3c9a1e5b2d4c6f",
    "ada": "ada-key-2b8e4d1f9c3a7e5d",
    "aud": "aud-key-5d9c1e7a3f2b8c4e",
    "rex": "rex-key-9a4f2c7e1d5b3a8f",
    "max": "max-key-3e7b1a9d5c2f8e4a",
}
ROLES = {"sam": "support", "ada": "admin", "aud": "auditor", "rex": "support", "max": "admin"}
RATES = {"rex": '{ tool_calls = "2/minute" }', "max": '{ tool_calls = "1/minute" }'}

BANK = ["get_balance", "get_rate", "transfer"]


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def caller_file(path: Path) -> Path:
    """support: the ``get_*`` tools; auditor: the tools of the source ``bank``; admin (built
    in): every tool. ``rex`` may call two tools a minute, ``max`` one. ``zoe@example.com`` has
    no key: only the identity provider names her."""
    lines = [
        "[roles.support]",
        'permissions = ["call_tools"]',
        'tools = ["get_*"]',
        "",
        "[roles.auditor]",
        'permissions = ["call_tools"]',
        'tools = ["source:bank"]',
        "",
    ]
    for name, key in KEYS.items():
        lines += [f"[callers.{name}]", f'key_sha256 = "{sha256(key)}"']
        lines += [f'roles = ["{ROLES[name]}"]']
        lines += [f"rate = {RATES[name]}"] if name in RATES else []
        lines += [""]
    lines += ['[callers."zoe@example.com"]', 'roles = ["support"]', ""]
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@dataclass
class Files:
    tools: list[str]  # --tools SPECs
    callers: Path
    policy: Path
    db: Path
    ledger: Path

    def door_args(self) -> list[str]:
        args = [arg for spec in self.tools for arg in ("--tools", spec)]
        return [*args, "--policy", str(self.policy), "--audit-db", str(self.db)]


@pytest.fixture
def files(tmp_path: Path) -> Files:
    bank, ops = tmp_path / "bank_tools.py", tmp_path / "ops_tools.py"
    bank.write_text(BANK_TOOLS, encoding="utf-8")
    ops.write_text(OPS_TOOLS, encoding="utf-8")
    policy = tmp_path / "bank.cedar"
    policy.write_text(POLICY, encoding="utf-8")
    return Files(
        tools=[f"{bank} source=bank", f"{ops} source=ops"],
        callers=caller_file(tmp_path / "callers.toml"),
        policy=policy,
        db=tmp_path / "journal.db",
        ledger=tmp_path / "ledger.txt",
    )


def as_caller(url: str, credential: str, body: Callable[[Client], Any], **options: Any) -> Any:
    """Run `body` with the official client sending ``Authorization: Bearer <credential>``."""

    async def main() -> Any:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {credential}"})
        transport = streamable_http_client(url, http_client=http)
        async with http, Client(transport, **options) as client:
            return await body(client)

    return asyncio.run(asyncio.wait_for(main(), 60))


async def names(client: Client) -> list[str]:
    return [tool.name for tool in (await client.list_tools()).tools]


def text(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def outcome(result: types.CallToolResult) -> tuple[bool, str]:
    return bool(result.is_error), text(result)


def toolbridge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def exported(db: Path) -> list[dict[str, Any]]:
    """The audit record, after `toolbridge audit verify` found it intact."""
    verified = toolbridge("audit", "verify", "--db", str(db))
    assert verified.returncode == 0, (verified.stdout, verified.stderr)
    assert verified.stdout.startswith("intact: "), verified.stdout
    export = toolbridge("audit", "export", "--db", str(db), "--format", "jsonl")
    assert export.returncode == 0, export.stderr
    return [json.loads(line) for line in export.stdout.splitlines()]


def digest_of(arguments: dict[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256(canonical)


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "door-e2e", "version": "1"},
    },
}
HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def test_the_policy_file_checks_against_the_tools_and_their_sources(files: Files) -> None:
    args = [arg for spec in files.tools for arg in ("--tools", spec)]
    checked = toolbridge("policy", "check", str(files.policy), *args)
    assert (checked.returncode, checked.stdout.strip()) == (0, "ok: 4 policies"), checked.stderr
    # Without source=bank, the first SPEC's tools come from its file's stem: no source bank.
    unnamed = [files.tools[0].removesuffix(" source=bank"), files.tools[1]]
    args = [arg for spec in unnamed for arg in ("--tools", spec)]
    wrong = toolbridge("policy", "check", str(files.policy), *args)
    assert wrong.returncode == 1, (wrong.stdout, wrong.stderr)
    assert 'Source::"bank"' in wrong.stdout + wrong.stderr


def test_keys_roles_policy_and_audit_record_end_to_end(files: Files) -> None:
    with McpServe("--callers", str(files.callers), *files.door_args()) as served:
        assert served.url, served.process.poll()
        url = served.url

        # Each caller lists only its roles' tools: support the get_* ones, the auditor the
        # source bank's (not ops' restart), admin every tool.
        assert as_caller(url, KEYS["sam"], names) == ["get_balance", "get_rate"]
        assert as_caller(url, KEYS["aud"], names) == BANK
        assert as_caller(url, KEYS["ada"], names) == [*BANK, "restart"]

        async def support(client: Client) -> list[types.CallToolResult]:
            return [
                await client.call_tool(
                    "transfer", {"amount": 5, "to": "ACME", "note": str(files.ledger)}
                ),
                await client.call_tool("get_balance", {"account": "ACME-7"}),
                await client.call_tool("get_balance", {"account": "ACME-1"}),
            ]

        hidden, closed, balance = as_caller(url, KEYS["sam"], support)
        assert outcome(hidden) == (
            True,
            "Unknown tool 'transfer'. Available tools: get_balance, get_rate.",
        )
        assert outcome(closed) == (
            True,
            "refused by policy closed-account: account ACME-7 is closed",
        )
        assert outcome(balance) == (False, "balance of ACME-1: 42")

        async def admin(client: Client) -> list[types.CallToolResult]:
            note = str(files.ledger)
            return [
                await client.call_tool("transfer", {"amount": 500, "to": "ACME", "note": note}),
                await client.call_tool("transfer", {"amount": 5, "to": "ACME", "note": note}),
                await client.call_tool("restart", {"service": "crm"}),
            ]

        big, small, restart = as_caller(url, KEYS["ada"], admin)
        assert outcome(big) == (
            True,
            "refused by policy no-big-transfers: transfers over 100 need finance",
        )
        assert outcome(small) == (False, "moved 5 to ACME")
        # Only `resource in Source::"bank"` permits: a tool of the source ops is permitted by none.
        assert outcome(restart) == (True, "refused by policy: no policy permits this call")

        async def auditor(client: Client) -> list[types.CallToolResult]:
            return [
                await client.call_tool("restart", {"service": "crm"}),
                await client.call_tool("get_rate", {"currency": "USD"}),
            ]

        not_its_source, rate = as_caller(url, KEYS["aud"], auditor)
        assert outcome(not_its_source) == (
            True,
            "Unknown tool 'restart'. Available tools: get_balance, get_rate, transfer.",
        )
        assert outcome(rate) == (False, "1 USD = 1.1 EUR")
        entries = exported(files.db)  # read while the server has the journal open
    # Only the allowed transfer ran.
    assert files.ledger.read_text(encoding="utf-8") == "5 to ACME\n"

    assert [(e["kind"], e["outcome"], e["caller"], e["via"], e["tool"]) for e in entries] == [
        ("identity", "forbidden", "sam", "key", "transfer"),
        ("policy", "refuse", "sam", "key", "get_balance"),
        ("tool", "refused", "sam", "key", "get_balance"),
        ("policy", "allow", "sam", "key", "get_balance"),
        ("tool", "ok", "sam", "key", "get_balance"),
        ("policy", "refuse", "ada", "key", "transfer"),
        ("tool", "refused", "ada", "key", "transfer"),
        ("policy", "allow", "ada", "key", "transfer"),
        ("tool", "ok", "ada", "key", "transfer"),
        ("policy", "refuse", "ada", "key", "restart"),
        ("tool", "refused", "ada", "key", "restart"),
        ("identity", "forbidden", "aud", "key", "restart"),
        ("policy", "allow", "aud", "key", "get_rate"),
        ("tool", "ok", "aud", "key", "get_rate"),
    ]
    refused = entries[1]
    assert refused["detail"] == {
        "policies": ["closed-account"],
        "reason": "account ACME-7 is closed",
    }
    assert refused["arguments"] == {"account": "ACME-7"}
    assert refused["arguments_sha256"] == digest_of({"account": "ACME-7"})
    assert entries[7]["detail"] == {"policies": ["bank"], "reason": ""}
    assert entries[7]["arguments_sha256"] == digest_of(
        {"amount": 5, "to": "ACME", "note": str(files.ledger)}
    )
    assert entries[9]["detail"] == {"policies": [], "reason": ""}
    assert all(e["arguments_sha256"] for e in entries)
    # The record (and the server's log) holds no key.
    raw = json.dumps(entries) + served.stderr
    for key in KEYS.values():
        assert key not in raw


class Host:
    """An MCP host's user, who accepts every call it is asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content={})


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_an_approval_policy_asks_the_hosts_user_and_records_one_call(
    files: Files, mode: str
) -> None:
    with McpServe("--callers", str(files.callers), *files.door_args()) as served:
        assert served.url, served.process.poll()
        host = Host()
        note = str(files.ledger)
        asked = as_caller(
            served.url,
            KEYS["ada"],
            lambda client: client.call_tool("transfer", {"amount": 50, "to": "ACME", "note": note}),
            elicitation_callback=host,
            mode=mode,
        )
        unasked = as_caller(
            served.url,
            KEYS["ada"],
            lambda client: client.call_tool("transfer", {"amount": 60, "to": "ACME", "note": note}),
            mode=mode,
        )
        entries = exported(files.db)
    assert outcome(asked) == (False, "moved 50 to ACME")
    assert len(host.asked) == 1 and "'transfer'" in host.asked[0]
    assert unasked.is_error is True
    assert "did not declare the elicitation capability" in text(unasked)
    assert files.ledger.read_text(encoding="utf-8") == "50 to ACME\n"

    # From the 2026-07-28 protocol on, the question goes back as the call's answer
    # (InputRequiredResult) and the client calls again with the host's answer: the policy
    # decides that request too. Before, the server asks in the middle of the call.
    decided = [("policy", "approval", "ada", "transfer")] * (2 if mode == "auto" else 1)
    asked_entries = len(decided) + 2
    assert [(e["kind"], e["outcome"], e["caller"], e["tool"]) for e in entries] == [
        *decided,
        ("approval", "approved", "ada", "transfer"),
        ("tool", "ok", "ada", "transfer"),
        ("policy", "approval", "ada", "transfer"),
        ("approval", "rejected", "ada", "transfer"),
        ("tool", "refused", "ada", "transfer"),
    ]
    assert entries[0]["detail"] == {"policies": ["mid-transfers"], "reason": ""}
    # The entries of one call share its id, across the requests that carried it.
    calls = [e["call_id"] for e in entries]
    assert len(set(calls[:asked_entries])) == 1 and len(set(calls[asked_entries:])) == 1, calls
    assert calls[0] != calls[-1]


def test_a_callers_rate_from_the_caller_file_refuses_calls_over_it(files: Files) -> None:
    with McpServe("--callers", str(files.callers), *files.door_args()) as served:
        assert served.url, served.process.poll()

        async def three(client: Client) -> list[types.CallToolResult]:
            return [await client.call_tool("get_rate", {"currency": "USD"}) for _ in range(3)]

        first, second, third = as_caller(served.url, KEYS["rex"], three)
        entries = exported(files.db)
    assert outcome(first) == outcome(second) == (False, "1 USD = 1.1 EUR")
    assert third.is_error is True
    assert text(third).startswith(
        "not run: caller 'rex' is over its limit of 2/minute tool calls; retry in "
    ), text(third)
    assert text(third).count("retry in") == 1, text(third)
    assert [(e["kind"], e["outcome"], e["caller"], e["tool"]) for e in entries] == [
        ("policy", "allow", "rex", "get_rate"),
        ("tool", "ok", "rex", "get_rate"),
        ("policy", "allow", "rex", "get_rate"),
        ("tool", "ok", "rex", "get_rate"),
        ("identity", "rate_limited", "rex", "get_rate"),
    ]
    assert entries[-1]["detail"]["retry_after"] >= 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_call_answered_in_a_later_request_counts_once_against_the_rate(
    files: Files, mode: str
) -> None:
    with McpServe("--callers", str(files.callers), *files.door_args()) as served:
        assert served.url, served.process.poll()
        host = Host()

        async def two(client: Client) -> list[types.CallToolResult]:
            return [
                await client.call_tool("transfer", {"amount": 50, "to": "ACME"}),
                await client.call_tool("transfer", {"amount": 5, "to": "ACME"}),
            ]

        approved, over = as_caller(
            served.url, KEYS["max"], two, elicitation_callback=host, mode=mode
        )
    # One call a minute: the approved call (asked, answered) runs, the next one is refused.
    assert outcome(approved) == (False, "moved 50 to ACME")
    assert len(host.asked) == 1
    assert over.is_error is True
    assert text(over).startswith("not run: caller 'max' is over its limit of 1/minute"), text(over)


def test_sighup_reads_the_caller_file_again(files: Files) -> None:
    newcomer_key = "new-key-8c2e6a4f1b9d7e3a"
    with McpServe("--callers", str(files.callers), *files.door_args()) as served:
        assert served.url, served.process.poll()
        assert as_caller(served.url, KEYS["sam"], names) == ["get_balance", "get_rate"]

        def status(key: str) -> int:
            headers = dict(HEADERS, Authorization=f"Bearer {key}")
            answer = requests.post(served.url, data=json.dumps(INIT), headers=headers, timeout=30)
            return answer.status_code

        assert status(newcomer_key) == 401
        # sam goes; a new caller comes (an auditor); a file with a mistake is not taken.
        text_now = files.callers.read_text(encoding="utf-8")
        without_sam = text_now.replace(f'[callers.sam]\nkey_sha256 = "{sha256(KEYS["sam"])}"\n'
                                       'roles = ["support"]\n', "")  # fmt: skip
        assert without_sam != text_now
        files.callers.write_text(
            without_sam + "[callers.newcomer]\n"
            f'key_sha256 = "{sha256(newcomer_key)}"\nroles = ["auditors"]\n',
            encoding="utf-8",
        )
        served.process.send_signal(signal.SIGHUP)
        # The mistake (role 'auditors') is logged; sam still calls, the newcomer does not.
        deadline = time.monotonic() + 30
        while "were not reloaded" not in served.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "roles: unknown role 'auditors'" in served.log(), served.log()
        assert (status(KEYS["sam"]), status(newcomer_key)) == (200, 401)

        files.callers.write_text(
            without_sam + "[callers.newcomer]\n"
            f'key_sha256 = "{sha256(newcomer_key)}"\nroles = ["auditor"]\n',
            encoding="utf-8",
        )
        served.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while status(newcomer_key) != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert as_caller(served.url, newcomer_key, names) == BANK
        assert status(KEYS["sam"]) == 401
        assert served.process.poll() is None  # reloaded, not stopped
    for key in [*KEYS.values(), newcomer_key]:
        assert key not in served.stderr


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    yield from running()


def test_tokens_of_an_identity_provider_name_callers_of_the_caller_file(
    files: Files, idp: IdentityProvider
) -> None:
    with McpServe(
        "--callers", str(files.callers), "--oidc-issuer", idp.issuer,
        "--oidc-audience", idp.audience, *files.door_args(),
    ) as served:  # fmt: skip
        assert served.url, served.process.poll()
        url = served.url
        metadata_url = served.base + "/.well-known/oauth-protected-resource/mcp"

        # A caller the file names (no key: the token names her) takes the file's roles.
        zoe = idp.token(sub="zoe@example.com")
        assert as_caller(url, zoe, names) == ["get_balance", "get_rate"]
        # A caller the file does not name holds the file's roles its token lists.
        newcomer = idp.token(sub="newcomer", roles=["support"])

        async def lookups(client: Client) -> tuple[list[str], Any, Any]:
            return (
                await names(client),
                await client.call_tool("get_balance", {"account": "ACME-7"}),
                await client.call_tool("transfer", {"amount": 5, "to": "ACME"}),
            )

        listed, closed, hidden = as_caller(url, newcomer, lookups)
        assert listed == ["get_balance", "get_rate"]
        assert outcome(closed) == (
            True,
            "refused by policy closed-account: account ACME-7 is closed",
        )
        assert outcome(hidden) == (
            True,
            "Unknown tool 'transfer'. Available tools: get_balance, get_rate.",
        )
        # Keys still name their callers next to the identity provider.
        assert as_caller(url, KEYS["sam"], names) == ["get_balance", "get_rate"]

        hostile = {
            "another audience": idp.token(sub="zoe@example.com", aud="another-service"),
            "expired": idp.token(sub="zoe@example.com", exp=-3600, iat=-7200),
            "alg none": idp.unsigned(sub="zoe@example.com", roles=["admin"]),
        }
        for what, token in hostile.items():
            answer = requests.post(
                url,
                data=json.dumps(INIT),
                headers=dict(HEADERS, Authorization=f"Bearer {token}"),
                timeout=30,
            )
            assert answer.status_code == 401, (what, answer.status_code, answer.text)
            challenge = answer.headers["WWW-Authenticate"]
            assert challenge.startswith("Bearer "), (what, challenge)
            assert f'resource_metadata="{metadata_url}"' in challenge, (what, challenge)

        bare = requests.post(url, data=json.dumps(INIT), headers=HEADERS, timeout=30)
        assert bare.status_code == 401, bare.text
        assert f'resource_metadata="{metadata_url}"' in bare.headers["WWW-Authenticate"]

        document = requests.get(metadata_url, timeout=30).json()
        assert document["resource"] == url
        assert [server.rstrip("/") for server in document["authorization_servers"]] == [idp.issuer]
        entries = exported(files.db)

    tokens = [zoe, newcomer, *hostile.values()]
    assert [(e["kind"], e["outcome"], e["caller"], e["via"], e["tool"]) for e in entries] == [
        ("policy", "refuse", "newcomer", "oidc", "get_balance"),
        ("tool", "refused", "newcomer", "oidc", "get_balance"),
        ("identity", "forbidden", "newcomer", "oidc", "transfer"),
        ("identity", "unauthorized", None, None, None),
        ("identity", "unauthorized", None, None, None),
        ("identity", "unauthorized", None, None, None),
    ]
    raw = json.dumps(entries) + served.stderr
    for token in tokens:
        assert token not in raw


def test_over_stdio_the_policy_refuses_and_the_record_names_the_local_caller(
    files: Files,
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bridge", "mcp-serve", *files.door_args()],
        cwd=str(ROOT),
    )

    async def main() -> tuple[list[str], Any, Any, Any]:
        async with Client(params) as client:
            return (
                await names(client),
                await client.call_tool("transfer", {"amount": 500, "to": "ACME"}),
                await client.call_tool("get_balance", {"account": "ACME-1"}),
                await client.call_tool("restart", {"service": "crm"}),
            )

    listed, big, balance, restart = asyncio.run(asyncio.wait_for(main(), 90))
    # The person who started the server is the caller local, in the role admin: every tool.
    assert listed == [*BANK, "restart"]
    assert outcome(big) == (
        True,
        "refused by policy no-big-transfers: transfers over 100 need finance",
    )
    assert outcome(balance) == (False, "balance of ACME-1: 42")
    assert outcome(restart) == (True, "refused by policy: no policy permits this call")
    entries = exported(files.db)
    assert [(e["kind"], e["outcome"], e["caller"], e["via"], e["tool"]) for e in entries] == [
        ("policy", "refuse", "local", "local", "transfer"),
        ("tool", "refused", "local", "local", "transfer"),
        ("policy", "allow", "local", "local", "get_balance"),
        ("tool", "ok", "local", "local", "get_balance"),
        ("policy", "refuse", "local", "local", "restart"),
        ("tool", "refused", "local", "local", "restart"),
    ]
    assert entries[0]["detail"] == {
        "policies": ["no-big-transfers"],
        "reason": "transfers over 100 need finance",
    }
