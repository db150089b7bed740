"""The console's files: the page loads `main.js` as an ES module, and every module any of them
imports is served as JavaScript under the page's CSP (no build step, nothing missing)."""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from bridge.daemon.errors import install_error_handlers
from bridge.daemon.routers.console import router


def _client() -> TestClient:
    app = FastAPI()
    app.include_router(router)
    install_error_handlers(app)
    return TestClient(app)


def test_every_imported_module_is_served_as_javascript() -> None:
    client = _client()
    page = client.get("/")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    entry = re.findall(r'<script type="module" src="/console/([\w.-]+)"></script>', page.text)
    assert entry == ["main.js"]
    seen: set[str] = set()
    todo = list(entry)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        response = client.get(f"/console/{name}")
        assert response.status_code == 200, name
        assert response.headers["content-type"].startswith("text/javascript"), name
        todo += re.findall(r'^import [^;]*? from "\./([\w.-]+)";', response.text, re.M | re.S)
    assert {"main.js", "api.js", "events.js", "approvals.js", "conversations.js"} <= seen
    assert client.get("/console/style.css").headers["content-type"].startswith("text/css")


def test_other_names_are_not_found() -> None:
    client = _client()
    assert client.get("/console/app.py").status_code == 404
    assert client.get("/console/index.html.bak").status_code == 404
