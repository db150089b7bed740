"""The Tools layer: describe local functions as tools (manifests, JSON Schema) and register them.

from bridge.tools import Toolbox, manifest

@manifest
def get_weather(city: str) -> str:
    '''Current weather of a city.'''

Toolbox([get_weather]).manifests("appbuilder")
"""

from __future__ import annotations

from bridge.tools.context import ConversationScope, PoolExhaustedError, ToolContext
from bridge.tools.dispatch import Dispatcher
from bridge.tools.function_spec import build_spec
from bridge.tools.manifest import Manifest, manifest, manifest_parameter, manifest_return
from bridge.tools.schema import DIALECTS, to_dialect
from bridge.tools.spec import ArgumentError, ToolError, ToolOptions, ToolSpec
from bridge.tools.toolbox import Toolbox
from bridge.tools.toolsets import Toolset

__all__ = [
    "DIALECTS",
    "ArgumentError",
    "ConversationScope",
    "Dispatcher",
    "Manifest",
    "PoolExhaustedError",
    "ToolContext",
    "ToolError",
    "ToolOptions",
    "ToolSpec",
    "Toolbox",
    "Toolset",
    "build_spec",
    "manifest",
    "manifest_parameter",
    "manifest_return",
    "to_dialect",
]
