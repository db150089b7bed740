"""A fast reading of the usual Google-style docstring: a description, `Args:` (or `Arguments:`,
`Parameters:`, `Params:`, `Attributes:`) and `Returns:`.

It gives exactly what `docstring_parser`'s Google parser gives for these (the same splitting,
indentation and cleaning rules, reproduced step by step), in a third of the time, which shows
when a thousand tools are registered. Anything else (another section, a repeated one, an entry
without a colon, a name written over two lines) returns None and is left to
`docstring_parser`, so a docstring is never read differently.
"""

from __future__ import annotations

import inspect
import re

__all__ = ["Parsed", "parse_google"]

_PARAM_TITLES = frozenset(("Arguments", "Args", "Parameters", "Params", "Attributes"))
_ALL_TITLES = (
    "Arguments",
    "Args",
    "Parameters",
    "Params",
    "Raises",
    "Exceptions",
    "Except",
    "Attributes",
    "Example",
    "Examples",
    "Returns",
    "Yields",
)
# docstring_parser.google: GoogleParser().titles_re, GOOGLE_TYPED_ARG_REGEX, MULTIPLE_PATTERN.
_TITLES = re.compile(
    "^(" + "|".join(f"({t})" for t in _ALL_TITLES) + ")" + ":" + "[ \t\r\f\v]*$", flags=re.M
)
_TYPED_ARG = re.compile(r"\s*(.+?)\s*\(\s*(.*[^\s]+)\s*\)")
_MULTIPLE = re.compile(r"(\s*[^:\s]+:)|([^:]*\]:.*)")
_UNKNOWN_META = re.compile(r"\n\S")
_INDENT = re.compile(r"^\s*")
_ENTRY_STARTS: dict[str, re.Pattern[str]] = {}
"""By indentation: where the entries of a section start (few indentations occur)."""

Parsed = tuple[
    str | None, str | None, list[tuple[str, str | None, str]], tuple[str | None, str] | None
]
"""(short description, long description, params as (name, type, description), returns as
(type, description) or None), as docstring_parser's `Docstring` would hold them."""


def _split_entry(text: str) -> tuple[str, str] | None:
    """GoogleParser._build_meta's split of one entry into (before the colon, description)."""
    if ":" not in text:
        return None  # docstring_parser raises ParseError: its own message is kept
    before, desc = text.split(":", 1)
    if before and "\n" in before:
        return None
    if desc:
        desc = desc[1:] if desc[0] == " " else desc
        if "\n" in desc:
            first_line, rest = desc.split("\n", 1)
            desc = first_line + "\n" + inspect.cleandoc(rest)
        desc = desc.strip("\n")
    return before, desc


def parse_google(doc: str) -> Parsed | None:
    """The parts of a Google-style docstring, or None when it is not the usual kind."""
    text = inspect.cleandoc(doc)
    found = [(match.start(), match.end(), match.group(1)) for match in _TITLES.finditer(text)]
    if found:
        # The titles of `meta_chunk` are those of `text`, moved: the first one starts a line
        # in both (docstring_parser searches the chunk again).
        first = found[0][0]
        desc_chunk, meta_chunk = text[:first], text[first:]
        matches = [(start - first, end - first, title) for start, end, title in found]
    else:
        desc_chunk, meta_chunk, matches = text, "", []
    parts = desc_chunk.split("\n", 1)
    short = parts[0] or None
    long = (parts[1] or "").strip() or None if len(parts) > 1 else None
    titles = [title for _, _, title in matches]
    if len(set(titles)) != len(titles):
        return None  # a repeated section replaces the first one's text but keeps its place
    params: list[tuple[str, str | None, str]] = []
    returns: tuple[str | None, str] | None = None
    for index, (_, title_end, title) in enumerate(matches):
        if title not in _PARAM_TITLES and title != "Returns":
            return None
        end = matches[index + 1][0] if index + 1 < len(matches) else len(meta_chunk)
        details = meta_chunk[title_end:end]
        unknown = _UNKNOWN_META.search(details)
        if unknown is not None:
            details = details[: unknown.start()]
        chunk = details.strip("\n")
        if title == "Returns":
            part = inspect.cleandoc(chunk)
            if _MULTIPLE.match(part):
                split = _split_entry(part)
                if split is None:
                    return None
                returns = split
            else:
                returns = (None, part)
            continue
        indent_match = _INDENT.search(chunk)
        indent = indent_match.group() if indent_match else ""
        entry = _ENTRY_STARTS.get(indent)
        if entry is None:
            entry = re.compile("^" + indent + r"(?=\S)", flags=re.M)
            if len(_ENTRY_STARTS) < 64:
                _ENTRY_STARTS[indent] = entry
        starts = list(entry.finditer(chunk))
        if not starts:
            return None
        for number, start in enumerate(starts):
            stop = starts[number + 1].start() if number + 1 < len(starts) else len(chunk)
            split = _split_entry(chunk[start.end() : stop].strip("\n"))
            if split is None:
                return None
            before, desc = split
            typed = _TYPED_ARG.match(before)
            if typed:
                name, type_name = typed.group(1, 2)
                if type_name.endswith(", optional"):
                    type_name = type_name[:-10]
                elif type_name.endswith("?"):
                    type_name = type_name[:-1]
                params.append((name, type_name, desc))
            else:
                params.append((before, None, desc))
    return short, long, params, returns
