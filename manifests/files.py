"""Ready-made tools: list and read files under one folder, and nothing outside it.

    export TOOLBRIDGE_FILES_ROOT=/srv/shared/reports
    toolbridge run "summarise the latest report" --tools manifests/files.py

Tools: `list_files`, `read_file`. Paths are relative to the root; absolute paths, `..` that
climbs out, and symbolic links that lead outside the root are refused, as are binary files.
The root is read from `TOOLBRIDGE_FILES_ROOT` at each call.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

from bridge.tools import manifest

__all__ = ["ROOT_ENV", "list_files", "read_file"]

ROOT_ENV = "TOOLBRIDGE_FILES_ROOT"
MAX_ENTRIES = 500
MAX_CHARS = 100_000


def _root() -> Path:
    value = os.environ.get(ROOT_ENV)
    if not value:
        raise PermissionError(
            f"{ROOT_ENV} is not set: set it to the folder these tools may read, where "
            "toolbridge runs"
        )
    root = Path(value).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"{ROOT_ENV} points to {value!r}, which is not a folder")
    return root.resolve()


def _inside(path: str, root: Path) -> Path:
    """The real path of `path` under `root`; refuses anything that ends up elsewhere."""
    if not path.strip() or "\x00" in path:
        raise ValueError(f"path: expected a path relative to the shared folder (got {path!r})")
    relative = Path(path.strip())
    if relative.is_absolute() or relative.drive:
        raise PermissionError(
            f"refused: {path!r} is an absolute path; use a path relative to the shared folder"
        )
    real = (root / relative).resolve()
    if real != root and root not in real.parents:
        how = (
            "a symbolic link leads"
            if (root / relative).is_symlink() or ".." not in relative.parts
            else "it climbs"
        )
        raise PermissionError(f"refused: {path!r} is outside the shared folder ({how} out of it)")
    return real


def _shown(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix() or "."


@manifest
def list_files(path: str = ".", pattern: str = "*", recursive: bool = False) -> dict[str, Any]:
    """List the files and folders of a folder in the shared folder.

    Args:
        path: Folder relative to the shared folder ("." for its top).
        pattern: Shell-style name filter, such as "*.csv".
        recursive: Also list the contents of sub-folders.
    """
    root = _root()
    folder = _inside(path, root)
    if not folder.is_dir():
        kind = "a file" if folder.is_file() else "nothing"
        raise NotADirectoryError(f"path: {path!r} is {kind}, not a folder; use read_file for files")
    entries: list[dict[str, Any]] = []
    skipped = 0
    walker = os.walk(folder) if recursive else [(str(folder), *_split(folder))]
    for current, dirs, files in walker:
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            entry = Path(current) / name
            real = entry.resolve()
            if real != root and root not in real.parents:
                skipped += 1  # a link out of the shared folder: neither shown nor followed
                if name in dirs:
                    dirs.remove(name)
                continue
            if not fnmatch.fnmatch(name, pattern):
                continue
            if len(entries) >= MAX_ENTRIES:
                return {"entries": entries, "truncated": True, "skipped_links": skipped}
            is_dir = real.is_dir()
            entries.append(
                {
                    "path": _shown(entry, root),
                    "type": "folder" if is_dir else "file",
                    "size": None if is_dir else real.stat().st_size,
                }
            )
    return {"entries": entries, "truncated": False, "skipped_links": skipped}


def _split(folder: Path) -> tuple[list[str], list[str]]:
    dirs, files = [], []
    for child in folder.iterdir():
        (dirs if child.is_dir() else files).append(child.name)
    return dirs, files


@manifest
def read_file(path: str, offset: int = 0, max_chars: int = 20_000) -> dict[str, Any]:
    """Read a text file of the shared folder (a part of it when it is long).

    Args:
        path: File relative to the shared folder.
        offset: Character to start at (to read on after a previous call).
        max_chars: Most characters to return (1-100000).
    """
    if offset < 0:
        raise ValueError(f"offset: expected 0 or more (got {offset})")
    if not 1 <= max_chars <= MAX_CHARS:
        raise ValueError(f"max_chars: expected 1 to {MAX_CHARS} (got {max_chars})")
    root = _root()
    file = _inside(path, root)
    if not file.is_file():
        kind = "a folder" if file.is_dir() else "missing"
        raise FileNotFoundError(f"path: {path!r} is {kind}; expected a file (see list_files)")
    with file.open("rb") as handle:
        head = handle.read(8192)
    if b"\x00" in head:
        raise ValueError(f"refused: {path!r} is a binary file; only text files can be read")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"refused: {path!r} is not UTF-8 text") from None
    part = text[offset : offset + max_chars]
    return {
        "path": _shown(file, root),
        "offset": offset,
        "content": part,
        "total_chars": len(text),
        "more": offset + len(part) < len(text),
    }
