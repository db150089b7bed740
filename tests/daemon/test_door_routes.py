"""Every route of the daemon is guarded by exactly one rule, and no caller ever lists, is
offered in a conversation, or runs a tool outside its list (a property over generated callers
files, against a real daemon reloading them on SIGHUP)."""

from __future__ import annotations

import fnmatch
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from bridge.access import Permission
from bridge.daemon.app import create_app
from bridge.daemon.permissions import ROUTE_PERMISSIONS, authorize
from bridge.daemon.settings import load_settings
from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, wait_for
from tests.daemon.test_door import call, door_daemon, write_callers


def _flat(routes: list[Any]) -> Iterator[Any]:
    """The routes, those of included routers too (however FastAPI keeps them)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _flat(inner.routes)
        else:
            yield route


def test_every_route_has_exactly_one_rule_and_runs_the_door(
    emulator: Emulator, tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**emulator.env(), "TB_TOOLS_DIR": str(tools_dir)}.items():
        monkeypatch.setenv(name, value)
    settings = load_settings(
        {"tools": [str(tools_dir / "daemon_tools.py")], "db": ":memory:"}, config=None
    )
    app = create_app(settings)
    # The door is the app's own dependency: every route runs it, included routers' too.
    assert [d.dependency for d in app.router.dependencies] == [authorize]
    served: set[tuple[str, str]] = set()
    for route in _flat(app.routes):
        if isinstance(route, APIRoute):
            served |= {(method, route.path) for method in route.methods}
        else:
            assert isinstance(route, Route) and route.path == "/openapi.json", route
    assert served == set(ROUTE_PERMISSIONS), (
        f"routes without a rule: {sorted(served - set(ROUTE_PERMISSIONS))}; "
        f"rules without a route: {sorted(set(ROUTE_PERMISSIONS) - served)}"
    )
    app.state.service.tools.close()
    app.state.service.platform.close()
    app.state.service.journal.close()


# --- the property --------------------------------------------------------------------------------

TOOLS: dict[str, dict[str, Any]] = {
    "get_weather": {"city": "Oslo"},
    "lookup": {"key": "k"},
    "hello": {"name": "h"},
    "use_session": {"note": "n"},
}
ASKS = {"get_weather": "weather in Oslo", "lookup": "lookup k", "hello": "hello h"}
PATTERNS = st.sampled_from([*TOOLS, "*", "*e*", "l*", "h?llo", "get_*", "nothing"])
ROLES = st.sampled_from(["converse", "read_all", "call_tools", "approve", "observe", "admin"])
CALLER = st.fixed_dictionaries(
    {
        "roles": st.lists(ROLES, max_size=3, unique=True),
        "tools": st.none() | st.lists(PATTERNS, max_size=3, unique=True),
    }
)
CALLERS = st.dictionaries(
    st.sampled_from(["ann", "ben", "cat", "dan"]), CALLER, min_size=1, max_size=3
)


@pytest.fixture(scope="module")
def reloading(
    emulator: Emulator, tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaemonProcess]:
    folder = tmp_path_factory.mktemp("door-property")
    yield from door_daemon(emulator, tools_dir, folder, {"zed": {"roles": []}})


def _allows(patterns: list[str], name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(callers=CALLERS)
def test_no_caller_sees_or_runs_a_tool_outside_its_list(
    reloading: DaemonProcess, callers: dict[str, dict[str, Any]]
) -> None:
    daemon = reloading
    reloads = daemon.log.count("callers reloaded")
    write_callers(daemon.callers, callers)  # type: ignore[attr-defined]
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: daemon.log.count("callers reloaded") > reloads, "the reload")
    for name, entry in callers.items():
        roles = set(entry["roles"])
        admin = "admin" in roles
        # a caller without a tools list has its roles' tools: every one, with these roles
        tools = ["*"] if entry["tools"] is None else entry["tools"]
        can = {str(p) for p in Permission if admin or str(p) in roles}
        mine = [t for t in TOOLS if _allows(tools, t)]

        listed = call(daemon, name, "GET", "/v1/tools")
        if can & {"converse", "read_all", "call_tools"}:
            names = [t["name"] for t in listed.json()["tools"]]
            assert set(names) <= set(mine) | {"charge", "send_email", "slow_step"}
            assert all(_allows(tools, n) for n in names), (names, tools)
        else:
            assert listed.status_code == 403

        for tool, arguments in TOOLS.items():
            ran = call(
                daemon, name, "POST", f"/v1/tools/{tool}/call", json={"arguments": arguments}
            )
            if "call_tools" not in can:
                assert ran.status_code == 403, ran.text
            elif tool in mine:
                assert ran.status_code == 200, ran.text
            else:
                assert ran.status_code == 404, ran.text

        if "converse" in can:
            created = call(daemon, name, "POST", "/v1/conversations", json={})
            assert created.status_code == 201, created.text
            cid = created.json()["conversation_id"]
            for query in ASKS.values():
                sent = call(
                    daemon,
                    name,
                    "POST",
                    f"/v1/conversations/{cid}/messages",
                    json={"query": query},
                )
                assert sent.status_code == 200, sent.text
            detail = call(daemon, name, "GET", f"/v1/conversations/{cid}").json()
            called = {c["name"] for c in detail["tool_calls"]}
            assert called <= set(mine), (called, tools)
            assert called == {t for t in ASKS if t in mine}
