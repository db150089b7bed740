"""Arguments written as a tuple, ``(1, "a", [2])``, mapped onto a tool's parameters in order.

Lagent's TupleParser and the text tool protocol's ``name(1, 2)`` calls send them. The text is
parsed into a Python syntax tree and only literals are read from it (numbers, strings, lists,
dicts, tuples, sets, True/False/None and JSON's true/false/null): nothing is ever evaluated.
Values JSON has no word for are refused like expressions: complex numbers (``1j``) and floats
that are not finite (``1e999999`` parses as infinity), as the JSON path refuses them.
"""

from __future__ import annotations

import ast
import math
from typing import Any

__all__ = ["MAX_TUPLE_CHARS", "looks_like_tuple", "tuple_arguments"]

MAX_TUPLE_CHARS = 100_000
"""Longer tuple texts are refused before parsing (a parser's work grows with the text)."""

_NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}


def looks_like_tuple(text: str) -> bool:
    """Whether arguments text is in the tuple form: parenthesised (JSON never starts so)."""
    stripped = text.strip()
    return stripped.startswith("(") and stripped.endswith(")")


class _NotLiteralError(ValueError):
    pass


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and _json_scalar(node.value):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Set):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        keys = [key for key in node.keys if key is not None]
        if len(keys) != len(node.keys):
            raise _NotLiteralError("a ** inside a dict")
        return {_key(key): _literal(value) for key, value in zip(keys, node.values, strict=True)}
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, (int, float))
        and not isinstance(node.operand.value, bool)
        and _json_scalar(node.operand.value)
    ):
        value = node.operand.value
        return -value if isinstance(node.op, ast.USub) else value
    raise _NotLiteralError(ast.dump(node)[:60])


def _json_scalar(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, int))  # bool is an int


def _key(node: ast.AST) -> Any:
    key = _literal(node)
    if isinstance(key, (list, dict)):
        raise _NotLiteralError("a list or dict as a dict key")
    return key


def tuple_arguments(text: str, names: list[str]) -> dict[str, Any] | str:
    """The arguments as a dict keyed by `names` (the tool's parameters in order), or a
    sentence saying why the text cannot be read that way.

    Never raises and never evaluates anything: hostile text only gives a sentence.
    """
    if len(text) > MAX_TUPLE_CHARS:
        return (
            f"the tuple-form arguments are {len(text)} characters long, over the limit of "
            f"{MAX_TUPLE_CHARS}; send a JSON object"
        )
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except Exception as exc:  # SyntaxError, ValueError (NUL), RecursionError, MemoryError
        reason = exc.msg if isinstance(exc, SyntaxError) and exc.msg else type(exc).__name__
        return (
            f"the arguments look like a tuple but cannot be read ({reason}); expected literals "
            'in parentheses, e.g. (1, "text"), or a JSON object'
        )
    body = tree.body
    items = body.elts if isinstance(body, ast.Tuple) else [body]
    values: list[Any] = []
    for position, item in enumerate(items, 1):
        try:
            values.append(_literal(item))
        except (_NotLiteralError, RecursionError):
            return (
                f"argument {position} of the tuple is not a literal; only numbers (finite, "
                "not complex), strings, lists, dicts and true/false/null are accepted"
            )
    if len(values) > len(names):
        takes = f"at most {len(names)} ({', '.join(names)})" if names else "no arguments"
        return f"the call has {len(values)} positional arguments, but the tool takes {takes}"
    return dict(zip(names[: len(values)], values, strict=True))
