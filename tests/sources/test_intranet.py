"""End to end: an intranet FastAPI app on loopback, its generated /openapi.json imported as
tools, and conversations on the emulator that call them (chained), directly, through an edited
manifest file, and through `toolbridge run`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from bridge import Bridge
from bridge._serve import ServerHandle, serve_in_thread
from bridge.cli import app as cli
from bridge.emulator import Emulator
from bridge.loading import load_tools
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.tools import Toolbox
from examples.intranet.app import create_app
from tests.sources.schema_rules import check_tool

KEY = "intranet-test-key-7c21"

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "name": "ticket for a colleague",
            "match": r"ticket for (?P<name>\w+) about (?P<topic>.+)",
            "steps": [
                {"tool": "search_employees", "arguments": {"q": "{name}"}},
                {
                    "tool": "create_ticket",
                    "arguments": {
                        "title": "{topic}",
                        "priority": "high",
                        "assignee_id": "{outputs.search_employees[0].id}",
                    },
                },
            ],
            "answer": (
                "Ticket {outputs.create_ticket.id} ({outputs.create_ticket.status}) is assigned "
                "to {outputs.search_employees[0].name} in {outputs.search_employees[0].office}."
            ),
        },
        {
            "name": "unknown employee",
            "match": r"employee (?P<id>\d+)",
            "steps": [{"tool": "get_employee", "arguments": {"employee_id": "{id}"}}],
            "answer": "The directory says: {outputs.get_employee}",
        },
        {
            "name": "write without a key",
            "match": r"quick ticket (?P<topic>.+)",
            "steps": [{"tool": "create_ticket", "arguments": {"title": "{topic}"}}],
            "answer": "The help desk says: {outputs.create_ticket}",
        },
    ]
}


@pytest.fixture(scope="module")
def intranet() -> Iterator[ServerHandle]:
    with serve_in_thread(create_app(api_key=KEY)) as handle:
        yield handle


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture
def box(intranet: ServerHandle) -> Iterator[Toolbox]:
    with load_tools([f"openapi:{intranet.base_url}/openapi.json"]) as toolbox:
        yield toolbox


def bridge_for(emu: Emulator, toolbox: Toolbox) -> Bridge:
    platform = AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )
    return Bridge(platform, toolbox)


def test_the_generated_openapi_document_becomes_valid_tools(box: Toolbox) -> None:
    assert box.names() == [
        "search_employees",
        "get_employee",
        "list_tickets",
        "create_ticket",
        "get_ticket",
        "update_ticket",
    ]
    for spec in box:
        check_tool(spec)
    create = box.get("create_ticket")
    assert create is not None
    assert create.parameters["required"] == ["title"]
    assert create.parameters["properties"]["priority"]["enum"] == ["low", "normal", "high"]


def test_a_chained_conversation_calls_the_intranet(
    box: Toolbox,
    emulator: Emulator,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("INTRANET_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    with bridge_for(emulator, box) as bridge:
        result = bridge.ask("please open a ticket for Chloé about the printer on floor 2 jams")
    assert [run.name for run in result.tool_runs] == ["search_employees", "create_ticket"]
    assert all(run.error is None for run in result.tool_runs), result.tool_runs
    assert result.rounds == 2
    ticket = json.loads(result.tool_runs[1].output)
    assert ticket["assignee_id"] == 3
    assert ticket["title"] == "the printer on floor 2 jams"
    assert ticket["reporter"] == "api-client"
    assert result.answer == f"Ticket {ticket['id']} (open) is assigned to Chloé Dubois in Lyon."
    everything = caplog.text + result.model_dump_json()
    assert KEY not in everything


def test_an_error_status_reaches_the_agent_and_the_conversation_goes_on(
    box: Toolbox, emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTRANET_KEY", "wrong-key-1234")
    with bridge_for(emulator, box) as bridge:
        missing = bridge.ask("who is employee 99?")
        refused = bridge.ask("quick ticket coffee machine")
    [lookup] = missing.tool_runs
    assert lookup.error == "tool_error"
    assert "HTTP 404 Not Found from GET " in lookup.output
    assert "no employee with id 99" in lookup.output
    assert missing.answer.startswith("The directory says: HttpToolError: HTTP 404")
    [write] = refused.tool_runs
    assert write.error == "tool_error"
    assert "HTTP 401 Unauthorized" in write.output
    assert "wrong-key-1234" not in refused.model_dump_json()


def test_import_edit_and_run_from_the_command_line(
    intranet: ServerHandle, emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = CliRunner()
    out = tmp_path / "manifests" / "intranet.yaml"
    imported = runner.invoke(
        cli,
        [
            "import-openapi",
            f"{intranet.base_url}/openapi.json",
            "-o",
            str(out),
            "--include",
            "directory",
            "--include",
            "create_ticket",
        ],
    )
    assert imported.exit_code == 0, imported.output
    # The edit a user would make: a clearer description for the agent.
    data = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert [tool["name"] for tool in data["tools"]] == [
        "search_employees",
        "get_employee",
        "create_ticket",
    ]
    data["tools"][0]["description"] = "Find colleagues by part of their name."
    data["allow_hosts"] = ["intranet.example"]  # ...and the host it will have in production
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    monkeypatch.setenv("INTRANET_KEY", KEY)
    result = runner.invoke(
        cli,
        [
            "run",
            "open a ticket for Bob about expense report stuck",
            "--tools",
            str(out),
            "--app-id",
            emulator.app_id,
            "--token",
            emulator.token,
            "--base-url",
            emulator.base_url,
            "--allow-host",
            intranet.host,  # the test server is not intranet.example
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["answer"].endswith("is assigned to Bob Chen in Beijing.")
    sent = [r.json for r in emulator.requests if isinstance(r.json, dict) and r.json.get("tools")]
    described = {t["function"]["name"]: t["function"] for t in sent[-1]["tools"]}
    assert described["search_employees"]["description"] == "Find colleagues by part of their name."
