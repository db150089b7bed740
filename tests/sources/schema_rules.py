"""What every tool schema sent to a platform must satisfy (checked on generated schemas)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

from bridge.tools.schema import to_dialect
from bridge.tools.schema_walk import types_of, walk
from bridge.tools.spec import ToolSpec

__all__ = ["appbuilder_problems", "check_tool"]


def appbuilder_problems(schema: dict[str, Any]) -> list[str]:
    """Broken appbuilder rules: no $ref/$defs, objects with properties, arrays with items."""
    problems: list[str] = []

    def visit(node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node or "$defs" in node or "definitions" in node:
            problems.append(f"reference left in {node}")
        kinds = types_of(node)
        if "object" in kinds and "properties" not in node:
            problems.append(f"object without properties: {node}")
        if "array" in kinds and "items" not in node:
            problems.append(f"array without items: {node}")
        return node

    walk(schema, visit)
    return problems


def check_tool(spec: ToolSpec) -> dict[str, Any]:
    """Assert the spec's schema is valid JSON Schema and fits the appbuilder dialect."""
    Draft202012Validator.check_schema(spec.parameters)
    described = to_dialect(spec, "appbuilder")["function"]
    Draft202012Validator.check_schema(described["parameters"])
    assert appbuilder_problems(described["parameters"]) == [], spec.name
    assert appbuilder_problems(spec.parameters) == [], spec.name
    return described
