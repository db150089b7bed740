"""Write an `HttpManifest` as the YAML a person would write: short, ordered, block text."""

from __future__ import annotations

from typing import Any

import yaml

from bridge.sources._http_manifest import HttpManifest, HttpTool, Location, ResponseSpec

__all__ = ["manifest_data", "manifest_yaml"]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks; never YAML aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _location(where: Location) -> Any:
    return where.in_ if where.name is None else {"in": where.in_, "name": where.name}


def _auth(auth: Any) -> Any:
    return None if auth is None else auth.model_dump(mode="json", exclude_defaults=False)


def _tool(tool: HttpTool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": tool.name,
        "description": tool.description,
        "method": tool.method,
        "url": tool.url,
        "parameters": tool.parameters,
    }
    if tool.locations:
        out["locations"] = {name: _location(where) for name, where in tool.locations.items()}
    if tool.headers:
        out["headers"] = dict(tool.headers)
    if tool.query:
        out["query"] = dict(tool.query)
    if tool.auth is not None:
        out["auth"] = _auth(tool.auth)
    if tool.timeout is not None:
        out["timeout"] = tool.timeout
    if tool.response != ResponseSpec():
        out["response"] = tool.response.model_dump(mode="json", exclude_none=True)
    if tool.confirm:
        out["confirm"] = True
    return out


def manifest_data(manifest: HttpManifest) -> dict[str, Any]:
    """The manifest as plain data, in the order of the file format, defaults left out."""
    defaults = HttpManifest.model_fields
    out: dict[str, Any] = {}
    if manifest.base_url is not None:
        out["base_url"] = manifest.base_url
    if manifest.allow_hosts is not None:
        out["allow_hosts"] = list(manifest.allow_hosts)
    if manifest.headers:
        out["headers"] = dict(manifest.headers)
    if manifest.query:
        out["query"] = dict(manifest.query)
    if manifest.auth is not None:
        out["auth"] = _auth(manifest.auth)
    for key in ("timeout", "max_output_chars", "max_response_bytes"):
        value = getattr(manifest, key)
        if value != defaults[key].default:
            out[key] = value
    out["tools"] = [_tool(tool) for tool in manifest.tools]
    return out


def manifest_yaml(manifest: HttpManifest, *, comment: str = "") -> str:
    """YAML text that `load_http_manifest` reads back into an equal manifest."""
    header = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    body = yaml.dump(
        manifest_data(manifest),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
        default_flow_style=False,
    )
    return header + body
