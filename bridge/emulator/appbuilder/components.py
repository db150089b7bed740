"""The app's own components (scenario ``app.components``), run when ``tool_choice`` names one.

A component runs on the platform, not on the client: nothing is pending, the response shows
the call and its result, and the agent replies with the result ("组件结论可直接作为回复"). The
arguments are ``tool_choice.function.input``; the SDK documents that the input may be left out
when the component has no inputs or exactly one required input, which the query then fills.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.emulator.appbuilder import wire
from bridge.emulator.scenario import Component
from bridge.emulator.templates import TemplateError, render
from bridge.emulator.toolinfo import coerce, tool_info

__all__ = ["ComponentCall", "ComponentError", "call_component", "component_events"]

AGENT = "ChatAgent"


class ComponentError(ValueError):
    """A ``tool_choice`` the component cannot run with; the message says what was expected."""


@dataclass(frozen=True)
class ComponentCall:
    """One run of a component: its arguments and its result."""

    code: str
    name: str
    arguments: dict[str, Any]
    output: str


def call_component(component: Component, given: Mapping[str, Any], query: str) -> ComponentCall:
    """Run `component` with the ``tool_choice`` input `given` for `query`.

    Raises:
        ComponentError: an input the component does not take, or required inputs missing
            (beyond the one the query may fill).
    """
    info = tool_info(component.code, component.description, component.parameters)
    names = [p.name for p in info.params]
    unknown = [k for k in given if k not in names]
    if unknown:
        raise ComponentError(
            f"tool_choice.function.input has {', '.join(map(repr, unknown))}, which component "
            f"{component.code!r} does not take (its inputs: {', '.join(names) or 'none'})"
        )
    arguments = {k: coerce(v, info.param(k)) for k, v in given.items()}
    missing = [p.name for p in info.params if p.required and p.name not in arguments]
    required = [p for p in info.params if p.required]
    if len(required) == 1 and missing:
        arguments[missing[0]] = coerce(query, required[0])
    elif missing:
        raise ComponentError(
            f"tool_choice.function.input misses the required input(s) {', '.join(missing)} of "
            f"component {component.code!r}; only a single required input may be left to the "
            "query"
        )
    ordered = {n: arguments[n] for n in names if n in arguments}
    return ComponentCall(
        component.code, component.display_name, ordered, _output(component, ordered, query)
    )


def _output(component: Component, arguments: dict[str, Any], query: str) -> str:
    if component.answer is None:
        shown = json.dumps(arguments, ensure_ascii=False)
        return f"(emulated component {component.code}) {shown}"
    try:
        return render(component.answer, {**arguments, "query": query}, {})
    except TemplateError as exc:  # checked at load time; kept for a clear message anyway
        raise ComponentError(f"component {component.code!r}: answer: {exc}") from None


def component_events(call: ComponentCall, next_event_id: Callable[[], str]) -> list[dict[str, Any]]:
    """The events before the agent's answer: the call, then the component's own run."""

    def event(
        event_type: str, status: str, content_type: str, outputs: dict[str, Any]
    ) -> dict[str, Any]:
        return wire.event(
            event_id=next_event_id(),
            event_type=event_type,
            status=status,
            content_type=content_type,
            outputs=outputs,
        )

    text = {"arguments": call.arguments, "component_code": call.code, "component_name": call.name}
    return [
        event(AGENT, "done", "function_call", {"text": text}),
        event(call.code, "preparing", "status", {}),
        event(call.code, "done", "text", {"text": call.output}),
        event(call.code, "success", "status", {}),
    ]
