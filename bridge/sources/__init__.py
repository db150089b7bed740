"""Tool sources that are not Python functions (declarative HTTP, OpenAPI, MCP)."""

__all__: list[str] = []
