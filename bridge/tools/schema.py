"""JSON Schema for tool arguments: one builder (pydantic) and thin dialect transforms.

`build_arguments` turns a list of `Param`s into a pydantic model, built once, which gives both the
canonical JSON Schema of the arguments object and the `validate` callable of a `ToolSpec`.
`model_arguments` does the same for a pydantic-model tool. Every dialect (`DIALECTS`) is a
transform of that canonical schema (see `bridge.tools._dialects`); `to_dialect` renders a spec
in one and caches the result per spec, so listing manifests again costs a copy, not a rebuild.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import types
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaWarningKind
from pydantic_core import PydanticUndefined

from bridge.tools._dialects import (
    DIALECTS,
    appbuilder_parameters,
    remember_output,
    replace_spec,
    to_dialect,
)
from bridge.tools._json import compat_annotation
from bridge.tools._shapes import (
    Shape,
    ShapeCache,
    fill,
    placeholder,
    placeholders,
    shape_key,
)
from bridge.tools._validate import ArgumentValidator, LazyValidator
from bridge.tools.schema_walk import is_null, kinds, strip_titles

__all__ = [
    "DIALECTS",
    "NO_DEFAULT",
    "ArgumentsSchema",
    "Param",
    "build_arguments",
    "model_arguments",
    "remember_output",
    "replace_spec",
    "to_dialect",
]

logger = logging.getLogger(__name__)


NO_DEFAULT: Any = inspect.Parameter.empty
"""Marks a `Param` without a default (a required argument)."""


_NONE_TYPE = type(None)


# Lax on purpose: models send 42 for a string id and "3" for a number. Unknown keys are
# reported before validation (with the accepted names), so the model itself ignores them.
_CONFIG = ConfigDict(coerce_numbers_to_str=True, extra="ignore")

SHAPES = ShapeCache()
"""The arguments models built so far, by shape (see `bridge.tools._shapes`)."""


@dataclass(frozen=True)
class Param:
    """One argument of a tool, as the schema builder needs it."""

    name: str
    annotation: Any = Any
    """The resolved type hint (`Any` when the parameter is not annotated)."""
    default: Any = NO_DEFAULT
    """The Python default; `NO_DEFAULT` makes the argument required. May be a pydantic `Field`."""
    description: str | None = None
    """Wins over any description inside the annotation; None leaves the annotation's own."""
    enum: tuple[Any, ...] | None = None
    """Allowed values (shown as `enum` and enforced by validation)."""
    example: Any = NO_DEFAULT
    """One example value, shown as `examples`."""


@dataclass(frozen=True)
class ArgumentsSchema:
    """What the builder produces for one tool."""

    parameters: dict[str, Any]
    """Canonical JSON Schema of the arguments object (may hold `$defs`, never `title`s)."""
    validate: Callable[[dict[str, Any]], dict[str, Any]]
    """Checks and coerces raw arguments into keyword arguments; raises `ArgumentError`."""
    model: type[BaseModel]
    appbuilder: Callable[[], dict[str, Any]] | None = None
    """Makes the appbuilder dialect's arguments schema from one shared by tools of this shape
    (None: render it from `parameters`)."""


class _SchemaGenerator(GenerateJsonSchema):
    """Logs instead of warning: a default that is not JSON is simply left out of the schema."""

    def emit_warning(self, kind: JsonSchemaWarningKind, detail: str) -> None:
        logger.debug("JSON Schema: %s (%s)", detail, kind)

    def encode_default(self, dft: Any) -> Any:
        # pydantic builds a TypeAdapter per default; most defaults are already plain JSON.
        if _plain_json(dft, 0):
            return dft
        return super().encode_default(dft)


def _plain_json(value: Any, depth: int) -> bool:
    kind = type(value)
    if kind in (str, int, bool) or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth > 3:
        return False
    if kind is list:
        return all(_plain_json(item, depth + 1) for item in value)
    if kind is dict:
        return all(type(k) is str and _plain_json(v, depth + 1) for k, v in value.items())
    return False


_NOTHING: frozenset[str] = frozenset()


def build_arguments(
    params: Sequence[Param],
    *,
    model_name: str,
    ignored: Collection[str] = (),
    problems: list[str],
    strict: bool = True,
    var_keyword: str | None = None,
    reserved: Collection[str] = (),
) -> ArgumentsSchema | None:
    """Build the arguments model, its canonical schema and its validator.

    Args:
        params: The tool's arguments, in signature order.
        model_name: Name of the generated pydantic model (shows only in debugging).
        ignored: Argument names that are silently dropped when the model sends them (the names
            of `*args`/`**kwargs`, decorator-only parameters).
        problems: Receives one readable line per problem; nothing is returned when it grows.
        strict: Refuse arguments that are not `params`. False passes them, as given, to the
            function's `**kwargs` (`var_keyword`, its name), and the schema says
            `additionalProperties: true`.
        var_keyword: The name of the function's `**kwargs` parameter, if it has one.
        reserved: Names never passed to `**kwargs` (the ToolContext parameter, `self`/`cls`):
            with `strict=False` the model could otherwise name them.

    Returns:
        The schema and validator, or None when a problem was found.
    """
    start = len(problems)
    if not strict and var_keyword is None:
        problems.append(
            "strict=False passes arguments the tool does not declare to the function's "
            "**kwargs, but it has no **kwargs parameter; add one, or leave strict on"
        )
    explicit = {p.name for p in params if isinstance(p.default, FieldInfo)}
    found = shape_key(params, NO_DEFAULT)
    shape = SHAPES.get(found[0]) if found is not None else None
    if shape is None:
        shape = _build_shape(params, problems, model_name, start)
        if shape is None or len(problems) > start:
            return None
        if found is not None:
            SHAPES.put(found[0], dataclasses.replace(shape, kept=found[1]))
    elif len(problems) > start:
        return None
    texts = {
        placeholder(index): param.description
        for index, param in enumerate(params)
        if param.description is not None
    }
    parameters = fill(shape, texts)
    model = shape.model
    keys = {f"p{i}": p.name for i, p in enumerate(params)}
    optional = {p.name for p in params if _has_default(p.default)} - shape.nullable

    validator = _ValidatorRecipe(
        model,
        keys,
        parameters,
        # Kept until the validator is built: the usual empty ones are one shared object.
        ignored or _NOTHING,
        explicit or _NOTHING,
        optional or _NOTHING,
        not strict,
        reserved or _NOTHING,
    )
    appbuilder: Callable[[], dict[str, Any]] | None = None
    if strict:
        appbuilder = _ShapedAppbuilder(shape, texts)
    else:
        parameters["additionalProperties"] = True
    return ArgumentsSchema(
        parameters=parameters,
        validate=LazyValidator(validator),
        model=model,
        appbuilder=appbuilder,
    )


# Small objects rather than closures or partials: what a tool keeps is one object each, not
# three or nine, and a thousand tools registered make the garbage collector walk them again
# and again.
@dataclasses.dataclass(slots=True, eq=False)
class _ValidatorRecipe:
    """Builds a tool's `ArgumentValidator` (for `LazyValidator`)."""

    model: type[BaseModel]
    keys: dict[str, str]
    parameters: dict[str, Any]
    ignored: Collection[str]
    explicit: Collection[str]
    optional: Collection[str]
    pass_unknown: bool
    reserved: Collection[str]

    def __call__(self) -> ArgumentValidator:
        return ArgumentValidator(
            self.model,
            keys=self.keys,
            parameters=self.parameters,
            ignored=self.ignored,
            explicit=self.explicit,
            optional=self.optional,
            pass_unknown=self.pass_unknown,
            reserved=self.reserved,
        )


@dataclasses.dataclass(slots=True, eq=False)
class _ShapedAppbuilder:
    """A tool's appbuilder arguments schema, filled from its shape's (see `Shape.render`)."""

    shape: Shape
    texts: dict[str, str]

    def __call__(self) -> dict[str, Any]:
        return fill(self.shape.render("appbuilder", appbuilder_parameters), self.texts)


def _build_shape(
    params: Sequence[Param], problems: list[str], model_name: str, start: int
) -> Shape | None:
    """Build the model and canonical schema of `params`, descriptions as placeholders; None
    when `problems` grew past `start` (every argument is checked first)."""
    fields: dict[str, Any] = {}
    for index, param in enumerate(params):
        if param.description is not None:
            param = dataclasses.replace(param, description=placeholder(index))
        field_def = _field(param, problems)
        if field_def is None:
            continue
        fields[f"p{index}"] = field_def
    if len(problems) > start:
        return None
    try:
        model = create_model(model_name, __config__=_CONFIG, **fields)
        raw = model.model_json_schema(schema_generator=_SchemaGenerator)
    except Exception as exc:
        problems.extend(_diagnose(params, exc))
        return None
    parameters = strip_titles(raw)
    parameters.pop("description", None)
    defs = parameters.get("$defs", {})
    props: dict[str, Any] = parameters.setdefault("properties", {})
    nullable: set[str] = set()
    for param in params:
        prop = props.get(param.name)
        if prop is None:
            continue
        if "null" in kinds(prop, defs):
            nullable.add(param.name)
        if param.default is None:
            props[param.name] = _drop_null(prop)
    slots = tuple(placeholders(parameters))
    return Shape(model, parameters, frozenset(nullable), (), slots)


def model_arguments(
    model: type[BaseModel],
    *,
    field_docs: Mapping[str, str] | None = None,
    problems: list[str],
) -> ArgumentsSchema | None:
    """The arguments schema and validator of a pydantic-model tool (its fields are the arguments).

    Args:
        model: The model class.
        field_docs: Descriptions from the class docstring, used for fields that have none.
        problems: Receives one readable line per problem.
    """
    try:
        raw = model.model_json_schema(schema_generator=_SchemaGenerator)
    except Exception as exc:
        problems.append(f"cannot build a JSON Schema for {model.__qualname__}: {_first_line(exc)}")
        return None
    parameters = strip_titles(raw)
    parameters.pop("description", None)
    props: dict[str, Any] = parameters.setdefault("properties", {})
    defs = parameters.get("$defs", {})
    keys: dict[str, str] = {}
    optional: set[str] = set()
    for field_name, info in model.model_fields.items():
        alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
        key = alias or field_name
        if key not in props:
            continue
        keys[field_name] = key
        doc = (field_docs or {}).get(field_name) or (field_docs or {}).get(key)
        if doc and "description" not in props[key]:
            props[key]["description"] = doc
        if not info.is_required() and "null" not in kinds(props[key], defs):
            optional.add(key)
    extra = model.model_config.get("extra") == "allow"

    def validator() -> ArgumentValidator:
        return ArgumentValidator(
            model,
            keys=keys,
            parameters=parameters,
            ignored=(),
            explicit=set(),
            optional=optional,
            allow_unknown=extra,
            # The schema says additionalProperties: true, so the extras must reach the model.
            pass_unknown=extra,
        )

    return ArgumentsSchema(parameters=parameters, validate=LazyValidator(validator), model=model)


def _field(param: Param, problems: list[str]) -> tuple[Any, Any] | None:
    """The `create_model` definition of one argument: internal name -> (annotation, default)."""
    annotation = compat_annotation(param.annotation)
    default = param.default
    metadata: list[Any] = []
    if isinstance(default, FieldInfo):
        metadata.append(default)
        if default.default_factory is not None:
            default = Field(default_factory=default.default_factory)
        elif default.default is PydanticUndefined:
            default = NO_DEFAULT
        else:
            default = default.default
    if default is None and not _admits_none(annotation):
        # `x: str = None` is a common way of writing "optional": accept null as the default.
        annotation = Union[annotation, None]  # noqa: UP007 - a runtime type object is built here
    extra: dict[str, Any] = {"alias": param.name}
    if param.description is not None:
        extra["description"] = param.description
    if param.example is not NO_DEFAULT:
        try:
            json.dumps(param.example)
        except (TypeError, ValueError):
            problems.append(f"parameter '{param.name}': example {param.example!r} is not JSON")
            return None
        extra["examples"] = [param.example]
    allowed: list[Any] | None = None
    if param.enum is not None:
        allowed = _enum_values(param, annotation, problems)
        if allowed is None:
            return None
        extra["json_schema_extra"] = {"enum": list(param.enum)}
    metadata.append(Field(**extra))
    if allowed is not None:
        metadata.append(AfterValidator(_enum_check(allowed, param.enum or ())))
    annotated = Annotated.__class_getitem__((annotation, *metadata))  # type: ignore[attr-defined]
    return annotated, (... if default is NO_DEFAULT else default)


def _enum_values(param: Param, annotation: Any, problems: list[str]) -> list[Any] | None:
    values = param.enum or ()
    if not values:
        problems.append(f"parameter '{param.name}': enum must list at least one value")
        return None
    try:
        json.dumps(list(values))
    except (TypeError, ValueError):
        problems.append(f"parameter '{param.name}': enum values must be JSON (got {values!r})")
        return None
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    allowed = []
    for value in values:
        try:
            allowed.append(adapter.validate_python(value))
        except ValidationError:
            problems.append(
                f"parameter '{param.name}': enum value {value!r} does not fit its type "
                f"{_type_name(param.annotation)}"
            )
            return None
    return allowed


def _enum_check(allowed: list[Any], shown: Sequence[Any]) -> Callable[[Any], Any]:
    choices = ", ".join(json.dumps(v, ensure_ascii=False) for v in shown)

    def check(value: Any) -> Any:
        if value is None or value in allowed:
            return value
        raise ValueError(f"must be one of {choices}")

    return check


SUPPORTED_TYPES = (
    "parameter types must describe JSON: str, int, float, bool, None, list, dict, tuple, "
    "Literal, Enum, datetime, UUID, Path, dataclasses, TypedDicts, pydantic models, and "
    "unions of them"
)
"""What a message about an unsupported parameter type says the supported ones are."""


def _diagnose(params: Sequence[Param], exc: Exception) -> list[str]:
    """Name the parameters whose types pydantic cannot handle (only runs on failure)."""
    from pydantic import PydanticUserError

    found = []
    for param in params:
        try:
            TypeAdapter(compat_annotation(param.annotation)).json_schema(
                schema_generator=_SchemaGenerator
            )
        except Exception as inner:
            # pydantic's own advice (`arbitrary_types_allowed`, `__get_pydantic_core_schema__`)
            # is for model authors; a tool's author needs another type.
            why = "" if isinstance(inner, PydanticUserError) else f", {_first_line(inner)}"
            found.append(
                f"parameter '{param.name}': type {_type_name(param.annotation)} is not supported "
                f"({SUPPORTED_TYPES}{why})"
            )
    return found or [f"cannot build the arguments schema: {_first_line(exc)}"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        module = annotation.__module__
        shown = module not in ("builtins", "typing") and not module.startswith("_")
        return f"{module}.{annotation.__qualname__}" if shown else annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def _has_default(default: Any) -> bool:
    if isinstance(default, FieldInfo):
        return default.default is not PydanticUndefined or default.default_factory is not None
    return default is not NO_DEFAULT


def _admits_none(annotation: Any) -> bool:
    if annotation is Any or annotation is None or annotation is _NONE_TYPE or annotation is object:
        return True
    origin = get_origin(annotation)
    if origin is Annotated:
        return _admits_none(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return any(_admits_none(arg) for arg in get_args(annotation))
    return False


def _drop_null(prop: dict[str, Any]) -> dict[str, Any]:
    """`x: T | None = None` is described as T: leaving the argument out gives None already."""
    any_of = prop.get("anyOf")
    if not isinstance(any_of, list) or not any(is_null(s) for s in any_of):
        return prop
    rest = [s for s in any_of if not is_null(s)]
    if not rest:
        return prop
    siblings = {k: v for k, v in prop.items() if k != "anyOf"}
    if "default" in siblings and siblings["default"] is None:
        del siblings["default"]
    if len(rest) == 1 and isinstance(rest[0], dict):
        merged = dict(rest[0])
        merged.update(siblings)
        return merged
    return {"anyOf": rest, **siblings}
