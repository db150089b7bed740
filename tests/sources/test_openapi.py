"""OpenAPI import: the Petstore 3.0 example, a document full of hard cases ($ref cycles,
allOf, collisions, unsupported bodies), operation selection, servers, and the
`toolbridge import-openapi` command. Every generated schema is valid JSON Schema and fits
the appbuilder dialect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from bridge.cli import app
from bridge.errors import UsageError
from bridge.loading import load_tools
from bridge.sources import DocumentError, HttpToolSource, load_http_manifest
from bridge.sources.openapi import openapi_manifest, parse_openapi_spec, read_openapi
from tests.sources.schema_rules import check_tool

DATA = Path(__file__).resolve().parents[1] / "data"
PETSTORE = DATA / "petstore.yaml"
CYCLE = DATA / "openapi_cycle.yaml"


def tools_of(path: Path, **options: Any) -> tuple[dict[str, Any], list[str]]:
    manifest, notes = openapi_manifest(read_openapi(str(path)), source=str(path), **options)
    source = HttpToolSource(manifest, origin=str(path))
    try:
        described = {spec.name: check_tool(spec) for spec in source.specs()}
    finally:
        source.close()
    return described, notes


def test_petstore_becomes_three_tools_with_exact_schemas() -> None:
    described, notes = tools_of(PETSTORE)
    assert notes == []
    assert list(described) == ["listPets", "createPets", "showPetById"]
    assert described["listPets"] == {
        "name": "listPets",
        "description": "List all pets",
        "parameters": {
            "type": "object",
            "properties": {
                "limit": {
                    "type": "integer",
                    "maximum": 100,
                    "format": "int32",
                    "description": "How many items to return at one time (max 100)",
                }
            },
            "required": [],
        },
    }
    assert described["createPets"]["parameters"] == {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "format": "int64"},
            "name": {"type": "string"},
            "tag": {"type": "string"},
        },
        "required": ["id", "name"],
    }
    assert described["showPetById"]["parameters"] == {
        "type": "object",
        "properties": {"petId": {"type": "string", "description": "The id of the pet to retrieve"}},
        "required": ["petId"],
    }


def test_petstore_manifest_points_at_its_server() -> None:
    manifest, _ = openapi_manifest(read_openapi(str(PETSTORE)), source=str(PETSTORE))
    assert manifest.base_url == "http://petstore.swagger.io/v1"
    assert manifest.allow_hosts == ["petstore.swagger.io"]
    assert [(t.method, t.url) for t in manifest.tools] == [
        ("GET", "/pets"),
        ("POST", "/pets"),
        ("GET", "/pets/{petId}"),
    ]
    assert manifest.auth is None


def test_ref_cycles_are_cut_with_a_note() -> None:
    described, notes = tools_of(CYCLE)
    assert "replaceNode: the recursive reference to 'Node' was cut" in notes
    body = described["replaceNode"]["parameters"]["properties"]["body"]
    assert body["properties"]["name"] == {"type": "string"}
    cut = body["properties"]["parent"]
    assert cut["type"] == "object"
    assert cut["description"].startswith("(recursive: the same shape as Node, cut here")
    children = body["properties"]["children"]
    assert children["type"] == "array"
    assert children["items"]["description"].startswith("(recursive: the same shape as Node")


def test_hard_cases_of_the_importer() -> None:
    described, notes = tools_of(CYCLE)
    assert list(described) == ["get_node", "replaceNode", "addNode", "get_node_2"]
    # An operationId with spaces is sanitised; a collision gets a suffix and a note.
    assert any("both become the tool name 'get_node'" in note for note in notes)
    assert "POST /photos skipped: its request body (multipart/form-data) is not JSON" in notes
    get_node = described["get_node"]["parameters"]
    assert list(get_node["properties"]) == ["nodeId", "X-Request-Id"]  # Accept is ignored
    # A query parameter clashing with a body field: the body becomes one `body` argument.
    assert list(described["replaceNode"]["parameters"]["properties"]) == ["nodeId", "name", "body"]
    # allOf of objects is merged; readOnly fields are not sent; examples kept.
    add = described["addNode"]["parameters"]
    assert list(add["properties"]) == ["name", "parent"]
    assert add["required"] == ["name"]
    assert add["properties"]["name"] == {"type": "string", "examples": ["Engineering"]}
    # OpenAPI 3.0 keywords become JSON Schema 2020-12.
    assert described["get_node_2"]["parameters"]["properties"]["limit"] == {
        "type": ["integer", "null"],
        "minimum": 1,
        "exclusiveMaximum": 50,
    }


def test_servers_security_and_locations_of_the_hard_document() -> None:
    manifest, _ = openapi_manifest(read_openapi(str(CYCLE)), source=str(CYCLE))
    assert manifest.base_url == "https://org.example:8443/api"  # server variables filled in
    tools = {tool.name: tool for tool in manifest.tools}
    assert manifest.auth is None, "operations differ, so auth is per tool"
    bearer = tools["get_node"].auth
    assert bearer is not None and bearer.model_dump() == {
        "type": "bearer",
        "token": "${BEARER_AUTH_TOKEN}",
    }
    api_key = tools["addNode"].auth
    assert api_key is not None and api_key.model_dump() == {
        "type": "api_key",
        "header": "X-Org-Key",
        "key": "${API_KEY}",
    }
    assert tools["get_node_2"].auth is None  # `security: []` opts out
    assert {k: v.model_dump(by_alias=True) for k, v in tools["replaceNode"].locations.items()} == {
        "name": {"in": "query", "name": None},
        "body": {"in": "whole_body", "name": None},
    }
    assert tools["get_node"].locations["X-Request-Id"].in_ == "header"


def test_include_by_operation_id_and_tag() -> None:
    described, _ = tools_of(CYCLE, include=["replaceNode", "write"])
    assert list(described) == ["replaceNode", "addNode"]
    described, _ = tools_of(CYCLE, include=["get node"])  # the raw operationId works too
    assert list(described) == ["get_node"]


def test_include_that_matches_nothing() -> None:
    with pytest.raises(UsageError) as info:
        openapi_manifest(read_openapi(str(PETSTORE)), source="p.yaml", include=["listDogs"])
    message = str(info.value)
    assert "--include listDogs matches no operationId or tag" in message
    assert "operationIds: createPets, listPets, showPetById; tags: pets" in message


def test_server_url_override_and_relative_servers(tmp_path: Path) -> None:
    manifest, _ = openapi_manifest(
        read_openapi(str(PETSTORE)), source="p", server_url="http://127.0.0.1:8300/v2/"
    )
    assert manifest.base_url == "http://127.0.0.1:8300/v2"
    assert manifest.allow_hosts == ["127.0.0.1:8300"]
    relative = {"openapi": "3.1.0", "servers": [{"url": "/api"}], "paths": {"/x": {"get": {}}}}
    with pytest.raises(UsageError, match=r"relative and the document is a file; pass "):
        openapi_manifest(relative, source="doc.json")
    fetched, _ = openapi_manifest(relative, source="http://10.1.2.3:9000/docs/openapi.json")
    assert fetched.base_url == "http://10.1.2.3:9000/api"
    assert fetched.tools[0].name == "get_x"  # no operationId: method and path


def test_documents_that_are_not_openapi_3(tmp_path: Path) -> None:
    swagger = tmp_path / "swagger.json"
    swagger.write_text('{"swagger": "2.0", "paths": {}}', encoding="utf-8")
    with pytest.raises(
        DocumentError, match=r"expected an OpenAPI 3\.0 or 3\.1 document .* swagger"
    ):
        read_openapi(str(swagger))
    broken = tmp_path / "broken.yaml"
    broken.write_text("openapi: 3.0.0\npaths:\n  /a: [\n", encoding="utf-8")
    with pytest.raises(DocumentError, match=r"broken.yaml: invalid YAML: line 4, column 1"):
        read_openapi(str(broken))
    with pytest.raises(DocumentError, match="no such file"):
        read_openapi(str(tmp_path / "none.yaml"))


def test_parse_openapi_spec() -> None:
    spec = parse_openapi_spec(
        "'my docs/api.json' --include a,b --include tickets --server-url http://h:1"
    )
    assert (spec.source, spec.include, spec.server_url) == (
        "my docs/api.json",
        ("a", "b", "tickets"),
        "http://h:1",
    )
    with pytest.raises(UsageError, match=r"unexpected '--tag'; expected openapi:PATH_OR_URL"):
        parse_openapi_spec("api.json --tag x")
    with pytest.raises(UsageError, match="--server-url needs a value"):
        parse_openapi_spec("api.json --server-url")
    with pytest.raises(UsageError, match="openapi: needs a document"):
        parse_openapi_spec("")


def test_openapi_spec_loads_with_options() -> None:
    spec = f"openapi:{PETSTORE} --include showPetById --server-url http://127.0.0.1:9/v1"
    with load_tools([spec]) as box:
        assert box.names() == ["showPetById"]
        [described] = box.manifests()
    assert described["function"]["parameters"]["required"] == ["petId"]


def test_import_openapi_writes_an_equivalent_manifest(tmp_path: Path) -> None:
    out = tmp_path / "manifests" / "org.yaml"
    runner = CliRunner()
    result = runner.invoke(
        app, ["import-openapi", str(CYCLE), "-o", str(out), "--allow-host", "backup.example"]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 4 tools to" in result.stderr
    assert "note: POST /photos skipped" in result.stderr
    text = out.read_text(encoding="utf-8")
    assert text.startswith("# HTTP tools generated by `toolbridge import-openapi` from ")
    written = load_http_manifest(out)
    direct, _ = openapi_manifest(read_openapi(str(CYCLE)), source=str(CYCLE))
    assert written.allow_hosts == ["org.example:8443", "backup.example"]
    assert written.tools == direct.tools
    again = runner.invoke(app, ["import-openapi", str(CYCLE), "-o", str(out)])
    assert again.exit_code == 2
    assert "exists; pass --force to overwrite it" in again.stderr
    forced = runner.invoke(app, ["import-openapi", str(PETSTORE), "-o", str(out), "--force"])
    assert forced.exit_code == 0, forced.output
    assert [t.name for t in load_http_manifest(out).tools] == [
        "listPets",
        "createPets",
        "showPetById",
    ]


def test_import_openapi_to_stdout_and_its_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["import-openapi", str(PETSTORE), "--include", "pets"])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.stdout)
    assert [tool["name"] for tool in data["tools"]] == ["listPets", "createPets", "showPetById"]
    missing = runner.invoke(app, ["import-openapi", str(tmp_path / "none.json")])
    assert missing.exit_code == 2
    assert "no such file" in missing.stderr
