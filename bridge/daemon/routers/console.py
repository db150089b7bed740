"""The web console: one static page and its script and style, no build step."""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from bridge.daemon.errors import ApiError

__all__ = ["router"]

router = APIRouter(include_in_schema=False)

_FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


def _read(name: str) -> bytes:
    return resources.files("bridge.daemon").joinpath("console").joinpath(name).read_bytes()


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
    """The page's script and style."""
    media_type = _FILES.get(name)
    if media_type is None:
        raise ApiError(404, "not_found", f"no console file {name!r}")
    return Response(_read(name), media_type=media_type, headers={"Cache-Control": "no-cache"})
