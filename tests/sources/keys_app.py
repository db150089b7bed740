"""A FastAPI app that takes its credentials the common way: `Header(...)`, a query key and a
session cookie, declared as plain parameters with no securityScheme. It records what arrived."""

# No `from __future__ import annotations`: FastAPI reads the route annotations at runtime.
import threading
from typing import Annotated, Any

from fastapi import Cookie, FastAPI, Header, HTTPException, Query
from pydantic import BaseModel

__all__ = ["KeysState", "create_keys_app"]


class KeysState:
    """The credentials each request carried, in order."""

    def __init__(self, api_key: str, authorization: str) -> None:
        self.api_key = api_key
        self.authorization = authorization
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def record(self, **values: Any) -> None:
        with self.lock:
            self.seen.append(values)


class NewItem(BaseModel):
    name: str


def create_keys_app(state: KeysState) -> FastAPI:
    app = FastAPI(title="Keys", version="1.0.0")

    def check(x_api_key: str, authorization: str) -> None:
        if x_api_key != state.api_key or authorization != state.authorization:
            raise HTTPException(status_code=401, detail="wrong X-API-Key or Authorization")

    @app.get("/items", operation_id="list_items")
    def list_items(
        x_api_key: Annotated[str, Header()],
        authorization: Annotated[str, Header()],
        page_token: Annotated[str | None, Query(description="Cursor of the next page.")] = None,
        x_request_id: Annotated[str | None, Header()] = None,
    ) -> dict[str, Any]:
        """List items, a page at a time."""
        state.record(
            op="list_items",
            x_api_key=x_api_key,
            authorization=authorization,
            page_token=page_token,
            x_request_id=x_request_id,
        )
        check(x_api_key, authorization)
        return {"items": ["alpha", "beta"], "page_token": page_token, "next": "p-2"}

    @app.post("/items", operation_id="create_item")
    def create_item(
        item: NewItem,
        x_api_key: Annotated[str, Header()],
        authorization: Annotated[str, Header()],
    ) -> dict[str, Any]:
        """Create an item."""
        state.record(op="create_item", x_api_key=x_api_key, authorization=authorization)
        check(x_api_key, authorization)
        return {"created": item.name}

    @app.get("/legacy", operation_id="legacy_search")
    def legacy_search(
        q: str,
        api_key: Annotated[str, Query()],
        session_id: Annotated[str, Cookie()],
        theme: Annotated[str | None, Cookie()] = None,
    ) -> dict[str, Any]:
        """An older endpoint: the key in the query string, a session cookie."""
        state.record(op="legacy_search", api_key=api_key, session_id=session_id, theme=theme)
        return {"q": q, "theme": theme}

    return app
