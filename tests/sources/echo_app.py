"""A small HTTP API for the source tests: echoes requests, fails, redirects, waits for company."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

__all__ = ["EchoState", "create_echo_app"]


class EchoState:
    """What the app saw: hits per path, and a barrier two concurrent requests meet at."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.headers: dict[str, dict[str, str]] = {}
        """The headers of the last request to each /echo path, as sent."""
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(2, timeout=20)

    def hit(self, path: str) -> None:
        with self.lock:
            self.hits[path] += 1


def create_echo_app(state: EchoState) -> Starlette:
    async def echo(request: Request) -> Response:
        state.hit(request.url.path)
        state.headers[request.url.path] = {k.lower(): v for k, v in request.headers.items()}
        body: Any = None
        raw = await request.body()
        if raw:
            body = await request.json()
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": [[k, v] for k, v in request.query_params.multi_items()],
                "headers": {k.lower(): v for k, v in request.headers.items()},
                "cookies": dict(request.cookies),
                "json": body,
            }
        )

    async def status(request: Request) -> Response:
        state.hit(request.url.path)
        code = int(request.path_params["code"])
        detail = request.query_params.get("detail", f"detail for {code}")
        return PlainTextResponse(detail, status_code=code)

    async def redirect(request: Request) -> Response:
        state.hit(request.url.path)
        code = int(request.query_params.get("code", "302"))
        return RedirectResponse(request.query_params["to"], status_code=code)

    async def loop(request: Request) -> Response:
        state.hit(request.url.path)
        return RedirectResponse("/loop", status_code=302)

    async def big(request: Request) -> Response:
        state.hit(request.url.path)
        return PlainTextResponse("x" * int(request.query_params.get("n", "1000")))

    async def items(request: Request) -> Response:
        state.hit(request.url.path)
        return JSONResponse(
            {"data": {"items": [{"name": "alpha", "n": 1}, {"name": "beta", "n": 2}]}}
        )

    async def text(request: Request) -> Response:
        state.hit(request.url.path)
        return PlainTextResponse("plain words")

    async def page(request: Request) -> Response:
        state.hit(request.url.path)
        html = (
            "<html><head><title>VPN</title><style>p {color: red}</style>"
            "<script>var secret = 1;</script></head><body><h1>VPN setup</h1>"
            "<p>Install the client,&nbsp;then <b>sign in</b>.</p><p>Call IT if it fails.</p>"
            "</body></html>"
        )
        return Response(html, media_type="text/html")

    async def binary(request: Request) -> Response:
        state.hit(request.url.path)
        return Response(b"\x89PNG\r\n\x1a\n", media_type="image/png")

    async def empty(request: Request) -> Response:
        state.hit(request.url.path)
        return Response(status_code=204)

    def meet(request: Request) -> Response:
        # A sync endpoint runs in the threadpool: two requests in flight at once meet here;
        # one alone waits for the barrier's timeout and fails.
        state.hit(request.url.path)
        try:
            state.barrier.wait()
        except threading.BrokenBarrierError:
            return PlainTextResponse("alone", status_code=500)
        return PlainTextResponse("met")

    async def client(request: Request) -> Response:
        state.hit(request.url.path)
        assert request.client is not None
        return JSONResponse({"port": request.client.port})

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(
        routes=[
            Route("/echo/{rest:path}", echo, methods=methods),
            Route("/status/{code:int}", status, methods=methods),
            Route("/redirect", redirect, methods=methods),
            Route("/loop", loop),
            Route("/big", big),
            Route("/items", items),
            Route("/text", text),
            Route("/empty", empty, methods=methods),
            Route("/page", page),
            Route("/binary", binary),
            Route("/meet", meet),
            Route("/client", client),
        ]
    )
