"""One router module per resource: conversations, tools, health (and metrics), console."""

__all__: list[str] = []
