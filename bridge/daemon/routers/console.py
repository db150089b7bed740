"""The web console: one static page, its style and its scripts (ES modules, `main.js` loading
the others), no build step."""

from __future__ import annotations

import functools
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from bridge.daemon.errors import ApiError

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
"""What the console directory serves, by file suffix (its page is served at /)."""
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _read(name: str) -> bytes:
    return resources.files("bridge.daemon").joinpath("console").joinpath(name).read_bytes()


@functools.cache
def _files() -> dict[str, str]:
    """Each servable file of the console directory and its media type."""
    folder = resources.files("bridge.daemon").joinpath("console")
    return {
        entry.name: _TYPES[suffix]
        for entry in folder.iterdir()
        if entry.is_file() and (suffix := "." + entry.name.rpartition(".")[2]) in _TYPES
    }


@router.get("/")
def index() -> Response:
    """The console page (it asks for the API key itself when the daemon needs one)."""
    return Response(
        _read("index.html"),
        media_type="text/html; charset=utf-8",
        headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-cache"},
    )


@router.get("/console/{name}")
def asset(name: str) -> Response:
    """The page's scripts and style."""
    media_type = _files().get(name)
    if media_type is None:
        raise ApiError(404, "not_found", f"no console file {name!r}")
    return Response(_read(name), media_type=media_type, headers={"Cache-Control": "no-cache"})
