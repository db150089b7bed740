"""OpenAPI security requirements -> the `auth` of a declarative HTTP tool.

Supported: HTTP bearer, HTTP basic, and API keys sent in a header. The secret itself is never
in the document, so the auth refers to environment variables named after the scheme:
``BearerAuth`` -> ``${<SCHEME>_TOKEN}``, basic -> ``${<SCHEME>_USERNAME}`` and
``${<SCHEME>_PASSWORD}``, an API key -> ``${<SCHEME>}`` (``APIKeyHeader`` -> ``API_KEY_HEADER``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.sources._credentials import env_name
from bridge.sources._http_manifest import ApiKeyAuth, BasicAuth, BearerAuth
from bridge.sources._schema import resolve_pointer

__all__ = ["env_name", "operation_auth"]


def operation_auth(
    document: Mapping[str, Any], op: Mapping[str, Any], label: str, notes: list[str]
) -> BearerAuth | BasicAuth | ApiKeyAuth | None:
    """The auth for one operation: its first supported security alternative, or None.

    An empty alternative (``{}``) makes security optional: no auth. When no alternative is
    supported (OAuth2, cookies...), a note says the operation is called without auth.
    """
    requirements = op.get("security", document.get("security"))
    if not isinstance(requirements, list) or not requirements:
        return None
    schemes = (document.get("components") or {}).get("securitySchemes") or {}
    seen: list[str] = []
    for requirement in requirements:
        if not isinstance(requirement, dict):
            continue
        if not requirement:
            return None
        if len(requirement) != 1:
            seen.append(" + ".join(requirement))
            continue
        name = str(next(iter(requirement)))
        seen.append(name)
        scheme = schemes.get(name)
        if isinstance(scheme, dict) and isinstance(scheme.get("$ref"), str):
            try:
                scheme = resolve_pointer(document, scheme["$ref"])
            except KeyError:
                continue
        if not isinstance(scheme, dict):
            continue
        auth = _auth(name, scheme)
        if auth is not None:
            return auth
    notes.append(
        f"{label}: none of its security schemes ({', '.join(seen)}) is supported (bearer, "
        "basic, API key in a header); it is called without authentication"
    )
    return None


def _auth(name: str, scheme: Mapping[str, Any]) -> BearerAuth | BasicAuth | ApiKeyAuth | None:
    kind = str(scheme.get("type", "")).lower()
    env = env_name(name)
    if kind == "http":
        how = str(scheme.get("scheme", "")).lower()
        if how == "bearer":
            return BearerAuth(type="bearer", token=f"${{{env}_TOKEN}}")
        if how == "basic":
            return BasicAuth(
                type="basic", username=f"${{{env}_USERNAME}}", password=f"${{{env}_PASSWORD}}"
            )
    if kind == "apikey" and scheme.get("in") == "header" and scheme.get("name"):
        return ApiKeyAuth(type="api_key", header=str(scheme["name"]), key=f"${{{env}}}")
    return None
