"""Malformed HTTP tools manifests fail at load time, naming the file, the line or key, and what
was expected; a literal secret is refused and never echoed."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from bridge.errors import UsageError
from bridge.loading import load_tools
from bridge.sources import DocumentError, load_http_manifest

GOOD_TOOL = """\
  - name: get_item
    url: /items/{item_id}
    parameters:
      type: object
      properties:
        item_id: {type: integer}
      required: [item_id]
"""


def write(tmp_path: Path, text: str, name: str = "tools.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problem(tmp_path: Path, text: str, name: str = "tools.yaml") -> str:
    path = write(tmp_path, text, name)
    with pytest.raises(DocumentError) as info:
        load_http_manifest(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    return message


def test_a_good_manifest_loads(tmp_path: Path) -> None:
    manifest = load_http_manifest(
        write(tmp_path, "base_url: http://127.0.0.1:9\ntools:\n" + GOOD_TOOL)
    )
    assert [tool.name for tool in manifest.tools] == ["get_item"]


def test_missing_tools_key(tmp_path: Path) -> None:
    message = problem(tmp_path, "base_url: http://127.0.0.1:9\n")
    assert "top level: missing required key 'tools'" in message


def test_missing_key_of_a_tool_names_its_line(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\ntools:\n" + GOOD_TOOL + "  - name: second\n"
    message = problem(tmp_path, text)
    assert "line 10: tools[1]: missing required key 'url'" in message


def test_unknown_key_lists_the_expected_ones(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\ntools:\n" + GOOD_TOOL + "    metod: POST\n"
    message = problem(tmp_path, text)
    assert "line 10: tools[0]: unknown key 'metod'; expected one of: name, description, method" in (
        message
    )


def test_wrong_type_with_line_and_value(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\ntimeout: soon\ntools:\n" + GOOD_TOOL
    message = problem(tmp_path, text)
    assert "line 2: timeout: should be a valid number" in message
    assert '(got "soon")' in message


def test_bad_method(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\ntools:\n" + GOOD_TOOL + "    method: FETCH\n"
    message = problem(tmp_path, text)
    assert "line 10: tools[0].method: should be 'GET', 'POST', 'PUT', 'PATCH', 'DELETE' or " in (
        message
    )
    assert '(got "FETCH")' in message


def test_bad_yaml_gives_line_and_column(tmp_path: Path) -> None:
    message = problem(tmp_path, "tools:\n  - name: x\n    url: [unclosed\n")
    assert "invalid YAML: line 4, column 1" in message


def test_bad_json_gives_line_and_column(tmp_path: Path) -> None:
    message = problem(tmp_path, '{"tools": [\n  {"name": "x",}\n]}\n', name="tools.json")
    assert "line 2, column 16: invalid JSON" in message


def test_json_problems_have_lines_too(tmp_path: Path) -> None:
    text = (
        '{\n  "base_url": "http://127.0.0.1:9",\n  "tools": [\n'
        '    {"name": "x y", "url": "/a"}\n  ]\n}\n'
    )
    message = problem(tmp_path, text, name="tools.json")
    assert "line 4: tools[0].name: string should match pattern" in message


def test_empty_file(tmp_path: Path) -> None:
    message = problem(tmp_path, "")
    assert "the file is empty; expected a mapping with a 'tools' list" in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DocumentError, match=r"no such file: .*nope\.yaml"):
        load_http_manifest(tmp_path / "nope.yaml")


def test_url_placeholder_without_parameter(tmp_path: Path) -> None:
    text = """\
    base_url: http://127.0.0.1:9
    tools:
      - name: get_item
        url: /items/{item_id}
    """
    message = problem(tmp_path, text)
    assert "line 3: tools[0]: url placeholder {item_id} has no parameter 'item_id'" in message


def test_path_url_needs_a_base_url(tmp_path: Path) -> None:
    message = problem(tmp_path, "tools:\n" + GOOD_TOOL)
    assert "url '/items/{item_id}' is a path, so the manifest needs a base_url" in message


def test_url_must_be_http(tmp_path: Path) -> None:
    message = problem(tmp_path, "tools:\n  - name: x\n    url: ftp://host/file\n")
    assert "must be an absolute http:// or https:// URL" in message


def test_literal_secret_is_refused_and_not_echoed(tmp_path: Path) -> None:
    text = (
        "base_url: http://127.0.0.1:9\n"
        "auth: {type: bearer, token: sk-literal-secret-value}\n"
        "tools:\n" + GOOD_TOOL
    )
    message = problem(tmp_path, text)
    assert "line 2: auth.token value: must be a ${ENV_NAME} reference" in message
    assert "sk-literal-secret-value" not in message


def test_unknown_auth_type(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\nauth: {type: oauth}\ntools:\n" + GOOD_TOOL
    message = problem(tmp_path, text)
    assert "line 2: auth: " in message
    assert "'bearer', 'basic', 'api_key', 'none'" in message


def test_parameters_must_be_an_object_schema(tmp_path: Path) -> None:
    text = """\
    base_url: http://127.0.0.1:9
    tools:
      - name: x
        url: /x
        parameters: {type: array}
    """
    message = problem(tmp_path, text)
    assert 'line 5: tools[0].parameters: must be a JSON Schema with "type": "object"' in message


def test_parameters_must_be_valid_json_schema(tmp_path: Path) -> None:
    text = """\
    base_url: http://127.0.0.1:9
    tools:
      - name: x
        url: /x
        parameters: {type: object, properties: {a: {type: strng}}}
    """
    message = problem(tmp_path, text)
    assert "tools[0].parameters: is not a valid JSON Schema at properties/a/type" in message


def test_duplicate_tool_names(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\ntools:\n" + GOOD_TOOL + GOOD_TOOL
    message = problem(tmp_path, text)
    assert "tools[1]: the tool name 'get_item' is used twice" in message


def test_location_of_an_unknown_parameter(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\ntools:\n" + GOOD_TOOL + "    locations: {page: query}\n"
    message = problem(tmp_path, text)
    assert "locations.page: no parameter 'page' in parameters.properties (parameters: item_id)" in (
        message
    )


def test_get_cannot_have_a_body(tmp_path: Path) -> None:
    text = """\
    base_url: http://127.0.0.1:9
    tools:
      - name: x
        url: /x
        parameters: {type: object, properties: {a: {type: string}}}
        locations: {a: body}
    """
    message = problem(tmp_path, text)
    assert "locations.a: a GET request has no body; use 'query' instead" in message


def test_bad_location_value(tmp_path: Path) -> None:
    text = """\
    base_url: http://127.0.0.1:9
    tools:
      - name: x
        url: /x
        parameters: {type: object, properties: {a: {type: string}}}
        locations: {a: form}
    """
    message = problem(tmp_path, text)
    assert "line 6: tools[0].locations.a.in: should be 'path', 'query', 'header', 'cookie'" in (
        message
    )


def test_allow_hosts_entry_with_a_scheme(tmp_path: Path) -> None:
    text = "base_url: http://127.0.0.1:9\nallow_hosts: ['http://x.example']\ntools:\n" + GOOD_TOOL
    message = problem(tmp_path, text)
    assert "line 2: allow_hosts: 'http://x.example' is not a host" in message


def test_several_problems_are_reported_at_once(tmp_path: Path) -> None:
    text = """\
    timeout: -1
    tools:
      - name: a
        url: /a
        method: FETCH
    """
    message = problem(tmp_path, text)
    assert "(2 problems)" in message or "(3 problems)" in message
    assert "line 1: timeout:" in message
    assert "line 5: tools[0].method:" in message


def test_load_tools_reports_the_same_error(tmp_path: Path) -> None:
    path = write(tmp_path, "tools: 3\n")
    with pytest.raises(UsageError, match=r"line 1: tools: should be a valid list"):
        load_tools([str(path)])


# --- credentials are never parameters the model fills in ------------------------------------


def test_a_credential_header_parameter_is_refused_with_the_way_to_move_it(tmp_path: Path) -> None:
    text = """\
    base_url: http://127.0.0.1:9
    tools:
      - name: list_items
        url: /items
        parameters:
          type: object
          properties:
            q: {type: string}
            api_key_header: {type: string}
        locations:
          api_key_header: {in: header, name: X-API-Key}
    """
    message = problem(tmp_path, text)
    assert (
        "line 9: tools[0]: parameters.properties.api_key_header: the header 'X-API-Key' looks "
        "like a credential; remove it from parameters and write headers: {X-API-Key: "
        '"${X_API_KEY}"}'
    ) in message
    assert "set X_API_KEY where toolbridge runs (or use an auth: entry)" in message


@pytest.mark.parametrize(
    ("method", "name", "location", "entry"),
    [
        ("GET", "token", "", 'query: {token: "${TOKEN}"}'),  # a GET argument goes in the query
        ("POST", "access_token", "query", 'query: {access_token: "${ACCESS_TOKEN}"}'),
        ("GET", "sessionid", "cookie", 'headers: {Cookie: "sessionid=${SESSIONID}"}'),
        ("DELETE", "Authorization", "header", 'headers: {Authorization: "${AUTHORIZATION}"}'),
    ],
)
def test_every_place_outside_the_body_is_checked(
    tmp_path: Path, method: str, name: str, location: str, entry: str
) -> None:
    tool: dict[str, object] = {
        "name": "t",
        "method": method,
        "url": "/t",
        "parameters": {"type": "object", "properties": {name: {"type": "string"}}},
    }
    if location:
        tool["locations"] = {name: location}
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"base_url": "http://127.0.0.1:9", "tools": [tool]}))
    with pytest.raises(DocumentError) as info:
        load_http_manifest(path)
    assert f"parameters.properties.{name}: the " in str(info.value)
    assert entry in str(info.value)


def test_cursors_body_fields_and_path_segments_named_like_tokens_are_allowed(
    tmp_path: Path,
) -> None:
    text = """\
    base_url: http://127.0.0.1:9
    query: {api_key: "${SHOP_KEY}"}
    headers: {X-API-Key: "${SHOP_KEY}", Cookie: "sid=${SHOP_SID}"}
    tools:
      - name: list_items
        url: /items
        parameters:
          type: object
          properties:
            next_page_token: {type: string}
            max_tokens: {type: integer}
      - name: set_password
        method: POST
        url: /users/{token}/password
        parameters:
          type: object
          properties:
            token: {type: string, description: The one-time link token of the reset mail.}
            password: {type: string}
          required: [token]
    """
    manifest = load_http_manifest(write(tmp_path, text))
    assert manifest.query == {"api_key": "${SHOP_KEY}"}
    assert [tool.name for tool in manifest.tools] == ["list_items", "set_password"]
