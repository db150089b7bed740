"""The console endpoints of the one emulated app: what the SDK's app listing reads.

`describe_apps` (``POST /v2/app?Action=DescribeApps``), `describe_app` (``POST
/v2/app?Action=DescribeApp``) and `app_list` (``GET /v2/apps``) build the bodies the official
SDK's ``describe_apps``, ``describe_app`` and ``get_app_list`` parse (their pydantic models are in
``appbuilder/core/console/appbuilder_client/data_class.py``). The emulator serves one app, so the
first page holds it and any page after a cursor (``marker``, ``after``, ``before``) is empty.
"""

from __future__ import annotations

from typing import Any

from bridge.emulator.scenario import App

__all__ = ["app_list", "describe_app", "describe_apps", "overview"]


def overview(app_id: str, app: App, updated: int) -> dict[str, Any]:
    """One ``AppOverview``: the list entry of an app (``updateTime`` in seconds)."""
    return {
        "id": app_id,
        "name": app.name,
        "description": app.description,
        "appType": app.type,
        "isPublished": True,
        "updateTime": updated,
    }


def describe_apps(
    request_id: str, app_id: str, app: App, updated: int, *, max_keys: int, marker: str | None
) -> dict[str, Any]:
    """The ``DescribeAppsResponse`` body; a page after a `marker` is empty."""
    data = [] if marker else [overview(app_id, app, updated)]
    return {
        "requestId": request_id,
        "marker": marker or "",
        "isTruncated": False,
        "nextMarker": "",
        "maxKeys": max_keys,
        "data": data,
    }


def describe_app(request_id: str, app_id: str, app: App) -> dict[str, Any]:
    """The ``DescribeAppResponse`` body of the one app."""
    return {
        "requestId": request_id,
        "id": app_id,
        "name": app.name,
        "description": app.description,
        "instruction": app.instruction,
        "prologue": app.prologue,
        "exampleQueries": list(app.example_queries),
        "followupQueries": {},
        "components": [
            {"code": c.code, "name": c.display_name, "description": c.description}
            for c in app.components
        ],
        "knowledgeBaseConfig": None,
        "modelConfig": None,
        "background": None,
    }


def app_list(
    request_id: str, app_id: str, app: App, updated: int, *, after: str, before: str
) -> dict[str, Any]:
    """The ``GET /v2/apps`` body: ``{request_id, data}``; a page after a cursor is empty."""
    data = [] if after or before else [overview(app_id, app, updated)]
    return {"request_id": request_id, "data": data}
