"""The AppBuilder SDK's own tool shape (dialect "appbuilder-sdk"), for byte parity.

`appbuilder.Manifest.from_function` (SDK 1.1.5) does not emit JSON Schema: every property repeats
its `name`, `type` is a Python type string and `required` is also a per-property bool (see
docs/wire/appbuilder.md, "Manifests in the SDK's own shape"). This module reproduces it from
the signature, quirks included, except that the order of the decorators does not matter and
an injected `ToolContext` is left out.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any, Protocol, Union, get_args, get_origin

from pydantic.fields import FieldInfo

__all__ = ["ParamNote", "sdk_view"]

_SDK_NAMES: dict[Any, str] = {
    dict: "Dict",
    list: "List",
    set: "Set",
    tuple: "Tuple",
    Union: "Union",
    Any: "Any",
    int: "int",
    str: "str",
    float: "float",
    bool: "bool",
}


def _sdk_name(obj: Any) -> str:
    try:
        found = _SDK_NAMES.get(obj)
    except TypeError:  # unhashable metadata
        found = None
    if found:
        return found
    name = getattr(obj, "__name__", None)
    return name if isinstance(name, str) else str(obj)


def _sdk_type(annotation: Any, required: bool) -> tuple[str, bool]:
    """The SDK's Python-type string for an annotation (reproduced quirks included)."""
    if hasattr(annotation, "__forward_arg__"):
        return str(annotation.__forward_arg__), required
    origin, args = get_origin(annotation), get_args(annotation)
    parent = _sdk_name(origin) if origin is not None else _sdk_name(annotation)
    if not args:
        return parent, required
    results = [_sdk_type(arg, required) for arg in args]
    names = [result[0] for result in results]
    if "NoneType" in names:
        names.remove("NoneType")
        required = False
        if parent == "Union":
            text = f"Optional[{names[0]}]" if len(names) == 1 else f"Union[{', '.join(names)}]"
        else:
            text = f"{parent}[{', '.join(names)}]"
        return text, required
    if parent == "Union":
        required = not all(not result[1] for result in results)
    return f"{parent}[{', '.join(names)}]", required


def _sdk_parameter(param: inspect.Parameter) -> tuple[str, bool, Any]:
    annotation = param.annotation
    description: Any = None
    if annotation is inspect.Parameter.empty:
        type_, required = "Any", True
    elif isinstance(annotation, str):
        type_, required = annotation, True
    else:
        type_, required = _sdk_type(annotation, True)
        metadata = getattr(annotation, "__metadata__", None)
        if metadata:
            first = metadata[0]
            description = first.description if isinstance(first, FieldInfo) else first
    if param.default is not inspect.Parameter.empty:
        required = False
    return type_, required, description


_READ = object()


class ParamNote(Protocol):
    """What `@manifest_parameter` recorded about one parameter."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str | None: ...
    @property
    def type(self) -> str | None: ...
    @property
    def required(self) -> bool | None: ...


def sdk_view(
    fn: Any,
    sig: inspect.Signature,
    *,
    name: str,
    description: str | None,
    skip: str | None,
    decorated: bool,
    notes: Sequence[ParamNote],
    decorator_description: str | None,
    doc: Any = _READ,
) -> dict[str, Any]:
    """What `appbuilder.Manifest.from_function` (SDK 1.1.5) returns, made order-independent.

    Args:
        fn: The function (its raw annotations and `__doc__` are used, as the SDK does).
        sig: Its signature.
        name: The tool name.
        description: An explicit description (overrides the decorator's and the docstring).
        skip: The `ToolContext` parameter, never shown.
        decorated: Whether `@manifest` was applied; without it the SDK ignores
            `@manifest_parameter` and reads descriptions from `Annotated` instead.
        notes: The `@manifest_parameter` records, in the order they were applied.
        decorator_description: `@manifest(description=...)`.
        doc: The function's docstring when it was registered (else read from `fn` now).
    """
    decls = {note.name: note for note in notes} if decorated else {}
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    for param in sig.parameters.values():
        if param.name in ("self", skip):
            continue
        type_, is_required, text = _sdk_parameter(param)
        if decorated:
            decl = decls.get(param.name)
            text = decl.description if decl else None
            if type_ == "Any" and decl is not None and decl.type:
                type_ = decl.type
        properties[param.name] = {
            "name": param.name,
            "type": type_ or "Any",
            "description": text,
            "required": is_required,
        }
        if is_required:
            required.append(param.name)
    for decl in decls.values():
        if decl.name in properties or decl.name == skip:
            continue
        is_required = decl.required is not False
        properties[decl.name] = {
            "name": decl.name,
            "type": decl.type,
            "description": decl.description,
            "required": is_required,
        }
        if is_required:
            required.append(decl.name)
    if description is None and decorated:
        description = decorator_description
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or (getattr(fn, "__doc__", None) if doc is _READ else doc),
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }
