"""The daemon's door with a callers file: real `toolbridge serve` processes.

Each caller has one permission (or none, or admin); every route is asked by every caller and
answers 403 exactly when the route's rule (`bridge.daemon.permissions.ROUTE_PERMISSIONS`) does
not let it in. Then: conversations belong to their creator (another caller gets 404, a caller
with ``read_all`` reads them), each caller sees and runs its own tools only (listing, direct
calls, the tools offered in its conversations), rate limits answer 429 with ``Retry-After``,
the daemon-wide event stream shows a caller without ``read_all`` its own conversations only,
legacy key files are admin callers, and SIGHUP reloads the callers file (a broken one keeps
the callers in use).
"""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, executions, start_daemon, wait_for

# The callers file as the daemon reads it: one place, `write_callers`.


def key_of(name: str) -> str:
    return f"{name}-key-0123456789abcdef"


def write_callers(path: Path, callers: dict[str, dict[str, Any]]) -> Path:
    """A callers file: each caller's key is `key_of(name)` (kept as its SHA-256), its
    permissions (`roles`: permission names) and `tools` (None or absent: every tool) in a role
    of its own, and its rate limits (`messages`, `tool_calls`)."""
    lines: list[str] = []
    for name, entry in callers.items():
        tools = entry.get("tools")
        lines += [
            f"[roles.{json.dumps('of-' + name)}]",
            f"permissions = {json.dumps(entry.get('roles', []))}",
            f"tools = {json.dumps(['*'] if tools is None else tools)}",
            "",
            f"[callers.{json.dumps(name)}]",
            f"key_sha256 = {json.dumps(hashlib.sha256(key_of(name).encode()).hexdigest())}",
            f"roles = {json.dumps(['of-' + name])}",
        ]
        rate = {k: entry[k] for k in ("messages", "tool_calls") if k in entry}
        if rate:
            lines.append(
                "rate = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in rate.items()) + " }"
            )
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def as_(name: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key_of(name)}"} if name else {}


CALLERS: dict[str, dict[str, Any]] = {
    "alice": {"roles": ["converse"], "tools": ["get_weather", "lookup"]},
    "bob": {"roles": ["converse"]},
    "reader": {"roles": ["read_all"]},
    "support": {"roles": ["converse", "read_all"]},
    "caller": {"roles": ["call_tools"], "tools": ["lookup"]},
    "approver": {"roles": ["approve"]},
    "watcher": {"roles": ["observe"]},
    "boss": {"roles": ["admin"]},
    "nobody": {"roles": []},
    "chatty": {"roles": ["converse"], "messages": "2/hour"},
    "busy": {"roles": ["call_tools"], "tool_calls": "1/hour"},
}


@pytest.fixture(scope="module")
def door(
    emulator: Emulator, tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaemonProcess]:
    folder = tmp_path_factory.mktemp("door")
    yield from door_daemon(emulator, tools_dir, folder, CALLERS)


def door_daemon(
    emulator: Emulator, tools_dir: Path, folder: Path, callers: dict[str, dict[str, Any]]
) -> Iterator[DaemonProcess]:
    """A daemon behind a caller file (kept as ``proc.callers`` for rewrites and SIGHUP), with
    the extra tools; stopped when the generator is closed."""
    path = write_callers(folder / "callers.toml", callers)
    proc = start_daemon(
        emulator,
        tools_dir,
        folder / "journal.db",
        "--tools",
        str(tools_dir / "extra_tools.py"),
        "--callers",
        str(path),
    )
    proc.callers = path  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        proc.stop()


def call(daemon: DaemonProcess, who: str | None, method: str, path: str, **kw: Any) -> Any:
    headers = {**as_(who), **kw.pop("headers", {})}
    return requests.request(method, daemon.url + path, headers=headers, timeout=60, **kw)


# --- every route, every permission ---------------------------------------------------------------

MISSING = "no-such-conversation"
C, R, T, A, OBS = "converse", "read_all", "call_tools", "approve", "observe"
ROUTES: list[tuple[str, str, dict[str, Any], set[str]]] = [
    ("POST", "/v1/conversations", {"json": {}}, {C}),
    ("GET", "/v1/conversations", {}, {C, R}),
    ("GET", f"/v1/conversations/{MISSING}", {}, {C, R}),
    ("POST", f"/v1/conversations/{MISSING}/messages", {"json": {"query": "hi"}}, {C}),
    ("GET", f"/v1/conversations/{MISSING}/events", {}, {C, R}),
    ("GET", "/v1/events", {"stream": True}, {C, R}),
    ("GET", "/v1/tools", {}, {C, R, T}),
    ("POST", "/v1/tools/lookup/call", {"json": {"arguments": {"key": "k"}}}, {T}),
    ("GET", "/v1/tools/calls", {}, {T, R}),
    ("POST", "/v1/tools/reload", {}, set()),
    ("GET", "/v1/approvals", {}, {A}),
    ("GET", "/v1/approvals/nope", {}, {A}),
    ("POST", "/v1/approvals/nope", {"json": {"decision": "approve"}}, {A}),
    ("GET", "/v1/info", {}, {OBS}),
    ("GET", "/metrics", {}, {OBS}),
]
ONE_PERMISSION = {"alice": C, "reader": R, "caller": T, "approver": A, "watcher": OBS}


def _route_id(value: object) -> str:
    # Sorted: a set's order differs between processes (xdist workers must agree on the ids).
    return ",".join(sorted(value)) if isinstance(value, (set, frozenset)) else str(value)


@pytest.mark.parametrize(("method", "path", "kw", "rule"), ROUTES, ids=_route_id)
def test_each_route_lets_in_exactly_the_callers_its_rule_names(
    door: DaemonProcess, method: str, path: str, kw: dict[str, Any], rule: set[str]
) -> None:
    for who in [*ONE_PERMISSION, "boss", "nobody"]:
        response = call(door, who, method, path, **kw)
        with response:
            allowed = who == "boss" or ONE_PERMISSION.get(who) in rule
            if allowed:
                assert response.status_code not in (401, 403), (who, response.text)
            else:
                assert response.status_code == 403, (who, response.status_code)
                error = response.json()["error"]
                assert error["code"] == "forbidden" and repr(who) in error["message"]
                assert "Traceback" not in response.text
    # No credentials, or a key nobody has: 401 asking for one.
    for headers in ({}, {"Authorization": "Bearer not-a-key-of-anyone-at-all"}):
        with call(door, None, method, path, headers=headers, **kw) as response:
            assert response.status_code == 401, response.text
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/", "/console/main.js"])
def test_probes_and_the_console_page_need_no_credentials(door: DaemonProcess, path: str) -> None:
    assert call(door, None, "GET", path).status_code not in (401, 403)


# --- ownership -----------------------------------------------------------------------------------


def test_a_conversation_is_its_creators_and_hidden_from_other_callers(
    door: DaemonProcess,
) -> None:
    created = call(door, "alice", "POST", "/v1/conversations", json={})
    assert created.status_code == 201, created.text
    cid = created.json()["conversation_id"]
    answered = call(
        door,
        "alice",
        "POST",
        f"/v1/conversations/{cid}/messages",
        json={"query": "weather in Oslo"},
    )
    assert answered.status_code == 200, answered.text

    # bob: as if it did not exist, to read, to follow, to send to, and not in his list
    for method, path, kw in [
        ("GET", f"/v1/conversations/{cid}", {}),
        ("GET", f"/v1/conversations/{cid}/events", {}),
        ("POST", f"/v1/conversations/{cid}/messages", {"json": {"query": "weather in Rome"}}),
        # streamed: FastAPI's route, not the fast path, answers it
        (
            "POST",
            f"/v1/conversations/{cid}/messages",
            {"json": {"query": "weather in Rome", "stream": True}},
        ),
    ]:
        response = call(door, "bob", method, path, **kw)
        assert response.status_code == 404, (path, response.text)
        assert response.json()["error"]["code"] == "conversation_not_found"
    listed = call(door, "bob", "GET", "/v1/conversations").json()
    assert cid not in {c["conversation_id"] for c in listed["items"]}

    # alice lists and reads hers; its creator is journaled
    mine = call(door, "alice", "GET", "/v1/conversations").json()["items"]
    assert cid in {c["conversation_id"] for c in mine}
    assert all(c["created_by"] == "alice" for c in mine)
    detail = call(door, "alice", "GET", f"/v1/conversations/{cid}").json()
    assert detail["conversation"]["created_by"] == "alice"
    assert detail["messages"][0]["sent_by"] == "alice"

    # a reader (read_all) sees it, and may not send to it
    seen = call(door, "reader", "GET", f"/v1/conversations/{cid}")
    assert seen.status_code == 200 and seen.json()["messages"][0]["query"] == "weather in Oslo"
    everything = call(door, "reader", "GET", "/v1/conversations").json()["items"]
    assert cid in {c["conversation_id"] for c in everything}
    # a caller who may read every conversation, and converse, still sends only to its own
    other = call(door, "support", "POST", f"/v1/conversations/{cid}/messages", json={"query": "x"})
    assert other.status_code == 403, other.text
    assert "only the caller who opened it" in other.json()["error"]["message"]
    # an admin may send to any conversation (as itself)
    sent = call(door, "boss", "POST", f"/v1/conversations/{cid}/messages", json={"query": "hi"})
    assert sent.status_code == 200, sent.text
    assert (
        call(door, "alice", "GET", f"/v1/conversations/{cid}").json()["messages"][-1]["sent_by"]
        == "boss"
    )


# --- tools per caller ----------------------------------------------------------------------------


def test_a_caller_lists_and_calls_only_its_tools(door: DaemonProcess) -> None:
    names = [t["name"] for t in call(door, "alice", "GET", "/v1/tools").json()["tools"]]
    assert names == ["get_weather", "lookup"]
    assert [t["name"] for t in call(door, "caller", "GET", "/v1/tools").json()["tools"]] == [
        "lookup"
    ]
    everything = [t["name"] for t in call(door, "boss", "GET", "/v1/tools").json()["tools"]]
    assert {"get_weather", "lookup", "charge", "hello"} <= set(everything)

    ran = call(door, "caller", "POST", "/v1/tools/lookup/call", json={"arguments": {"key": "a"}})
    assert ran.status_code == 200 and ran.json()["error"] is None, ran.text
    # A tool outside its list does not exist for it (404), and does not run.
    hidden = call(
        door, "caller", "POST", "/v1/tools/get_weather/call", json={"arguments": {"city": "x"}}
    )
    assert hidden.status_code == 404, hidden.text
    assert hidden.json()["error"]["code"] == "tool_not_found"
    assert "get_weather" not in hidden.json()["error"]["message"].split("tools are:")[1]
    # alice may run lookup in a conversation, but has no call_tools: no direct call
    refused = call(door, "alice", "POST", "/v1/tools/lookup/call", json={"arguments": {"key": "a"}})
    assert refused.status_code == 403
    # The direct call is journaled with its caller.
    calls = call(door, "caller", "GET", "/v1/tools/calls").json()["items"]
    assert calls and {c["called_by"] for c in calls} == {"caller"}


def test_a_conversation_offers_only_its_owners_tools(door: DaemonProcess, tools_dir: Path) -> None:
    cid = call(door, "alice", "POST", "/v1/conversations", json={}).json()["conversation_id"]
    # hello is not alice's: it is not offered to the agent, so the agent does not call it
    answered = call(
        door, "alice", "POST", f"/v1/conversations/{cid}/messages", json={"query": "hello zed"}
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["answer"] != "hello zed"  # what hello would have said
    detail = call(door, "alice", "GET", f"/v1/conversations/{cid}").json()
    assert [c["name"] for c in detail["tool_calls"]] == []
    # ... while lookup, which is, runs
    looked = call(
        door, "alice", "POST", f"/v1/conversations/{cid}/messages", json={"query": "lookup k9"}
    )
    assert looked.status_code == 200, looked.text
    assert any("lookup k9" in line for line in executions(tools_dir))
    # forcing a tool outside its list is refused as an unknown tool
    forced = call(
        door,
        "alice",
        "POST",
        f"/v1/conversations/{cid}/messages",
        json={"query": "hello zed", "tool_choice": {"name": "hello"}},
    )
    assert forced.status_code == 422 and forced.json()["error"]["code"] == "unknown_tool"


# --- rate limits ---------------------------------------------------------------------------------


def test_messages_and_direct_calls_over_the_rate_get_429_with_retry_after(
    door: DaemonProcess,
) -> None:
    cid = call(door, "chatty", "POST", "/v1/conversations", json={}).json()["conversation_id"]
    path = f"/v1/conversations/{cid}/messages"
    for _ in range(2):
        assert call(door, "chatty", "POST", path, json={"query": "hi"}).status_code == 200
    over = call(door, "chatty", "POST", path, json={"query": "hi"})
    assert over.status_code == 429, over.text
    assert over.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(over.headers["Retry-After"]) <= 3600
    assert "2/hour" in over.json()["error"]["message"]

    ok = call(door, "busy", "POST", "/v1/tools/lookup/call", json={"arguments": {"key": "b"}})
    assert ok.status_code == 200, ok.text
    again = call(door, "busy", "POST", "/v1/tools/lookup/call", json={"arguments": {"key": "b"}})
    assert again.status_code == 429 and int(again.headers["Retry-After"]) >= 1


# --- the daemon-wide stream ----------------------------------------------------------------------


def events_until(daemon: DaemonProcess, who: str, stop: str) -> list[tuple[str, dict[str, Any]]]:
    """The /v1/events a caller gets, read until a `run_ended` of conversation `stop`."""
    seen: list[tuple[str, dict[str, Any]]] = []
    with call(daemon, who, "GET", "/v1/events?after=0", stream=True) as response:
        assert response.status_code == 200
        name = ""
        for line in response.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                seen.append((name, data))
                if name == "run_ended" and data.get("conversation_id") == stop:
                    break
    return seen


def test_the_event_stream_shows_a_caller_without_read_all_only_its_conversations(
    door: DaemonProcess,
) -> None:
    theirs = call(door, "alice", "POST", "/v1/conversations", json={}).json()["conversation_id"]
    call(door, "alice", "POST", f"/v1/conversations/{theirs}/messages", json={"query": "hi"})
    mine = call(door, "bob", "POST", "/v1/conversations", json={}).json()["conversation_id"]
    call(door, "bob", "POST", f"/v1/conversations/{mine}/messages", json={"query": "hi"})
    bobs = events_until(door, "bob", mine)
    about = {d.get("conversation_id") for _, d in bobs} - {None}
    assert about == {mine}, about
    readers = events_until(door, "reader", mine)
    assert {theirs, mine} <= {d.get("conversation_id") for _, d in readers}


# --- legacy keys and reloads ---------------------------------------------------------------------


def test_a_legacy_key_file_is_admin_callers(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(f"ops: {key_of('ops')}\n", encoding="utf-8")
    daemon = start_daemon(emulator, tools_dir, tmp_path / "j.db", "--api-key-file", str(keys))
    try:
        for method, path, kw, _ in ROUTES:
            with call(daemon, "ops", method, path, **kw) as response:
                assert response.status_code not in (401, 403), (path, response.text)
        assert call(daemon, None, "GET", "/v1/tools").status_code == 401
    finally:
        daemon.stop()


def test_sighup_reloads_the_callers_file_and_a_broken_one_keeps_the_callers(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    path = write_callers(tmp_path / "callers.toml", {"alice": {"roles": ["converse"]}})
    daemon = start_daemon(emulator, tools_dir, tmp_path / "j.db", "--callers", str(path))
    try:
        assert call(daemon, "carol", "GET", "/v1/approvals").status_code == 401
        write_callers(path, {"alice": {"roles": ["converse"]}, "carol": {"roles": ["approve"]}})
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "callers reloaded" in daemon.log, "the reload")
        assert call(daemon, "carol", "GET", "/v1/approvals").status_code == 200
        assert call(daemon, "alice", "GET", "/v1/approvals").status_code == 403

        path.write_text('[callers.carol]\nkey = "a-literal-key-0123456789"\nroles = ["admin"]\n')
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "were not reloaded" in daemon.log, "the refused reload")
        assert call(daemon, "carol", "GET", "/v1/approvals").status_code == 200
        assert call(daemon, "alice", "GET", "/v1/conversations").status_code == 200
        assert daemon.proc.poll() is None
    finally:
        daemon.stop()


def test_a_broken_callers_file_stops_the_daemon_at_start(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "callers.toml"
    path.write_text(f'[callers.alice]\nroles = ["fly"]\nkey_sha256 = "{"ab" * 32}"\n')
    daemon = DaemonProcess(
        [
            "--tools",
            str(tools_dir / "daemon_tools.py"),
            "--port",
            "0",
            "--db",
            ":memory:",
            "--callers",
            str(path),
        ],
        env={**emulator.env(), "TB_TOOLS_DIR": str(tools_dir)},
        wait=False,
    )
    assert daemon.wait_exit() != 0
    assert "'fly'" in daemon.log and "Traceback" not in daemon.log


def test_oidc_issuer_needs_an_audience(emulator: Emulator, tools_dir: Path) -> None:
    daemon = DaemonProcess(
        [
            "--tools",
            str(tools_dir / "daemon_tools.py"),
            "--port",
            "0",
            "--db",
            ":memory:",
            "--oidc-issuer",
            "https://idp.example",
        ],
        env={**emulator.env(), "TB_TOOLS_DIR": str(tools_dir)},
        wait=False,
    )
    assert daemon.wait_exit() != 0
    assert "--oidc-issuer needs --oidc-audience" in daemon.log


def test_settings_need_issuer_and_audience_together_and_callers_count_as_credentials() -> None:
    from bridge.daemon.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="--oidc-audience needs --oidc-issuer"):
        load_settings({"oidc_audience": "toolbridge"}, config=None, env={})
    off_loopback = load_settings(
        {"host": "0.0.0.0", "callers": "callers.toml"}, config=None, env={}
    )
    assert off_loopback.authenticates and not off_loopback.four_eyes
    assert load_settings({}, config=None, env={"TOOLBRIDGE_FOUR_EYES": "1"}).four_eyes
    with pytest.raises(SettingsError, match="needs an API key"):
        load_settings({"host": "0.0.0.0"}, config=None, env={})


def test_an_identity_providers_token_names_a_caller_with_the_callers_files_roles(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    from tests.support.idp import AUDIENCE, IdentityProvider

    roles = tmp_path / "callers.toml"
    roles.write_text(
        '[roles.chat]\npermissions = ["converse"]\ntools = ["lookup"]\n\n'
        '[roles.readers]\npermissions = ["read_all"]\n\n'
        "[callers.ops]\n"
        f'key_sha256 = "{hashlib.sha256(key_of("ops").encode()).hexdigest()}"\n'
        'roles = ["admin"]\n',
        encoding="utf-8",
    )
    with IdentityProvider() as idp:
        daemon = start_daemon(
            emulator,
            tools_dir,
            tmp_path / "j.db",
            "--callers",
            str(roles),
            "--oidc-issuer",
            idp.issuer,
            "--oidc-audience",
            AUDIENCE,
        )
        try:
            token = {"Authorization": f"Bearer {idp.token(sub='erin', roles=['chat'])}"}
            created = call(daemon, None, "POST", "/v1/conversations", json={}, headers=token)
            assert created.status_code == 201, created.text
            assert created.json()["conversation_id"]
            tools = call(daemon, None, "GET", "/v1/tools", headers=token).json()["tools"]
            assert [t["name"] for t in tools] == ["lookup"]
            assert call(daemon, None, "GET", "/v1/approvals", headers=token).status_code == 403
            listed = call(daemon, None, "GET", "/v1/conversations", headers=token).json()
            assert {c["created_by"] for c in listed["items"]} == {"erin"}
            # a key of the callers file still works beside the tokens
            assert call(daemon, "ops", "GET", "/v1/approvals").status_code == 200
            forged = {"Authorization": "Bearer a.b.c"}
            assert call(daemon, None, "GET", "/v1/tools", headers=forged).status_code == 401
        finally:
            daemon.stop()
